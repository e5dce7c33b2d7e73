"""Feeding the GPU: the course's instruments (timing harness, sweeps, pipeline model, workloads).

``feedgpu.diagnose`` is :func:`feedgpu.diagnosis.diagnose`, imported on first use so that
``import feedgpu`` stays cheap (no torch) for workers and tools that need only a part.
"""


def __getattr__(name: str):
    if name == "diagnose":  # loaded on first use: it imports torch
        from .diagnosis import diagnose

        return diagnose
    raise AttributeError(f"module 'feedgpu' has no attribute {name!r}")
