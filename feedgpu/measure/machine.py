"""What machine are we on? Cores, memory, start method and accelerator, in one dict.

Every measurement in the course depends on the machine: how many cores the DataLoader's
workers can really use, how worker processes are started, and whether there is a GPU to
feed. Notebooks call :func:`describe_machine` once, in their configuration cell, and
:func:`print_machine` to show the result as a labelled table::

    from feedgpu.measure.machine import describe_machine, print_machine

    info = describe_machine()
    print_machine(info)

Three numbers of cores are reported, because they differ on real machines:

* ``logical_cores`` (``os.cpu_count()``): hardware threads in the machine;
* ``usable_cores``: those this process may run on (``os.sched_getaffinity`` on Linux; a
  container or ``taskset`` can give fewer than the machine has). Size worker pools by
  this one;
* ``physical_cores`` (psutil): real cores; two hardware threads of one core share it.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import logging
import multiprocessing
import os
import platform
import re
import sys
from typing import Any

from ..base.processes import usable_cores

logger = logging.getLogger(__name__)

__all__ = ["describe_machine", "print_machine", "machine_notes", "usable_cores", "start_method", "total_memory_mb"]


def start_method() -> str:
    """How new processes (and so DataLoader workers) start here: fork, spawn or forkserver.

    The method set with ``multiprocessing.set_start_method`` if any, else the platform's
    default (the first of ``multiprocessing.get_all_start_methods()``). Unlike
    ``multiprocessing.get_start_method()`` this does not fix the default as a side effect.
    """
    return multiprocessing.get_start_method(allow_none=True) or multiprocessing.get_all_start_methods()[0]


def _physical_cores() -> int | None:
    try:
        import psutil
    except ImportError:  # psutil is a course dependency, but stay usable without it
        logger.debug("psutil is not installed: physical cores unknown")
        return None
    return psutil.cpu_count(logical=False)


def _total_memory_bytes() -> int | None:
    try:
        import psutil
    except ImportError:
        logger.debug("psutil is not installed: memory unknown")
        return None
    return int(psutil.virtual_memory().total)


def total_memory_mb() -> float | None:
    """The machine's memory in MB (2**20 bytes), or None where psutil cannot tell."""
    total = _total_memory_bytes()
    return None if total is None else total / 2**20


def _torchvision_version() -> str | None:
    """torchvision's ``__version__`` (with its local tag, ``+cu130``), read from its
    ``version.py`` without importing the package: ``import torchvision`` imports
    ``torch._dynamo`` (2.5 s on a 2-core machine, torchvision 0.29), which a notebook that never
    uses torchvision should not pay for its configuration cell. The wheel's version where
    that file does not say; None where torchvision is not installed."""
    try:
        spec = importlib.util.find_spec("torchvision")
    except (ImportError, ValueError):
        spec = None
    if spec is None:
        return None
    for folder in spec.submodule_search_locations or ():
        try:
            with open(os.path.join(folder, "version.py"), encoding="utf-8") as f:
                found = re.search(r"^__version__\s*=\s*['\"]([^'\"]+)['\"]", f.read(), re.M)
        except OSError:
            continue
        if found:
            return found.group(1)
    try:
        return importlib.metadata.version("torchvision")
    except importlib.metadata.PackageNotFoundError:
        return None


def _accelerators() -> dict[str, Any]:
    info: dict[str, Any] = {
        "torch": None,
        "torchvision": None,
        "torch_threads": None,
        "cuda_available": False,
        "cuda_device_count": 0,
        "cuda_device_name": None,
        "mps_available": False,
        "device": "cpu",
    }
    try:
        import torch
    except ImportError:
        logger.warning("torch is not installed: the course needs it (see requirements.txt)")
        return info
    info["torch"] = torch.__version__
    info["torch_threads"] = torch.get_num_threads()
    info["torchvision"] = _torchvision_version()
    if info["torchvision"] is None:
        logger.warning("torchvision is not installed: the course needs it (see requirements.txt)")
    if torch.cuda.is_available():
        info["cuda_available"] = True
        info["cuda_device_count"] = torch.cuda.device_count()
        info["cuda_device_name"] = torch.cuda.get_device_name(0)
        info["device"] = "cuda"
    mps = getattr(torch.backends, "mps", None)
    if mps is not None and mps.is_available():
        info["mps_available"] = True
        if info["device"] == "cpu":
            info["device"] = "mps"
    return info


def describe_machine() -> dict[str, Any]:
    """Describe this machine and Python environment.

    Returns:
        A dict with the keys

        * ``python``, ``platform``: versions, e.g. ``"3.11.7"``, ``"Linux-6.1-x86_64"``;
        * ``torch``, ``torchvision``: versions (``None`` if not installed);
        * ``logical_cores``, ``usable_cores``, ``physical_cores``: see the module's
          docstring (``physical_cores`` may be ``None`` where it cannot be known);
        * ``memory_bytes``: total memory (``None`` if unknown);
        * ``start_method``: ``"fork"``, ``"spawn"`` or ``"forkserver"``;
        * ``torch_threads``: threads torch uses for CPU operators;
        * ``cuda_available``, ``cuda_device_count``, ``cuda_device_name``;
        * ``mps_available`` (Apple GPUs);
        * ``device``: the device the course will use, ``"cuda"``, ``"mps"`` or ``"cpu"``.
    """
    info: dict[str, Any] = {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "logical_cores": os.cpu_count(),
        "usable_cores": usable_cores(),
        "physical_cores": _physical_cores(),
        "memory_bytes": _total_memory_bytes(),
        "start_method": start_method(),
    }
    info.update(_accelerators())
    logger.debug("machine: %s", info)
    return info


def machine_notes(info: dict[str, Any] | None = None) -> list[str]:
    """What the description means for data loading, as short sentences."""
    info = describe_machine() if info is None else info
    notes = []
    usable, logical = info.get("usable_cores"), info.get("logical_cores")
    if usable and logical and usable < logical:
        notes.append(
            f"This process may use {usable} of the machine's {logical} cores "
            "(a container or CPU affinity limits it): size worker pools by usable cores."
        )
    physical = info.get("physical_cores")
    if physical and logical and physical < logical:
        notes.append(
            f"{logical} logical cores are {physical} physical ones: two hardware threads "
            "share a core, so CPU-bound workers gain less than the count suggests."
        )
    if info.get("start_method") == "fork":
        notes.append(
            "Workers start by fork: they inherit a copy of the notebook's memory, so even a "
            "Dataset class defined in a notebook cell works here (but not on macOS or Windows)."
        )
    else:
        notes.append(
            f"Workers start by {info.get('start_method')}: each is a fresh Python that imports "
            "the Dataset's class by name, so that class must live in an importable module."
        )
    if info.get("device") == "cpu":
        notes.append("No GPU: the course simulates the training step; GPU-only cells skip.")
    return notes


def _fmt_bytes(n: int | None) -> str:
    if n is None:
        return "unknown"
    return f"{n / 2**30:.1f} GiB"


def _fmt(value: Any) -> str:
    if value is None:
        return "unknown"
    if isinstance(value, bool):
        return "yes" if value else "no"
    return str(value)


def print_machine(info: dict[str, Any] | None = None, notes: bool = True) -> None:
    """Print the machine's description as a labelled table, then what it means.

    Args:
        info: a dict from :func:`describe_machine`; described afresh when ``None``.
        notes: also print :func:`machine_notes`.
    """
    info = describe_machine() if info is None else info
    gpu = info.get("cuda_device_name") if info.get("cuda_available") else None
    rows = [
        ("Python", _fmt(info.get("python"))),
        ("platform", _fmt(info.get("platform"))),
        ("torch", _fmt(info.get("torch"))),
        ("torchvision", _fmt(info.get("torchvision"))),
        ("logical cores", _fmt(info.get("logical_cores"))),
        ("usable cores", _fmt(info.get("usable_cores"))),
        ("physical cores", _fmt(info.get("physical_cores"))),
        ("memory", _fmt_bytes(info.get("memory_bytes"))),
        ("start method", _fmt(info.get("start_method"))),
        ("torch threads", _fmt(info.get("torch_threads"))),
        ("CUDA GPU", f"yes: {gpu} (x{info.get('cuda_device_count')})" if gpu else "no"),
        ("Apple MPS", _fmt(info.get("mps_available", False))),
        ("device", _fmt(info.get("device"))),
    ]
    width = max(len(label) for label, _ in rows)
    for label, value in rows:
        print(f"{label:<{width}}  {value}")
    if notes:
        for note in machine_notes(info):
            print(f"- {note}")
    sys.stdout.flush()
