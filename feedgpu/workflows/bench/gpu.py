"""Pinned memory and the GPU (notebook 05): copy bandwidth, the cost of pinning, and overlap.

Runs only where CUDA is available; elsewhere it returns one figure, ``gpu available``
= 0, whose note says why, so the JSON records that the GPU section was not measured
(rather than leaving it out silently). On a GPU:

* host-to-device bandwidth from pageable and from pinned memory, and the time to pin,
  each a straight-line fit over :data:`feedgpu.measure.pinning.DEFAULT_SIZES` (4 KiB to
  64 MiB; CUDA events, synchronised);
* the first pinning of a batch-sized tensor against the later ones (the caching host
  allocator's new page-locked memory against its reused blocks);
* a training loop of copies and compute: plain, against pinned + ``non_blocking`` with the
  next batch's copy issued on a side stream (the overlap); and the copy model's
  prediction of both (:func:`feedgpu.copies.training_loop_s`) as a ratio to the
  measurement, which the course expects within 25% (``tests/test_pinning.py`` checks the
  simulated loops against a GPU with that tolerance; notebook 05 shows the student's own
  ratios, ungraded).
"""

from __future__ import annotations

from . import Figure, figure

N_BATCHES = 20
BATCH_BYTES = 64 * 2**20


def bench_gpu() -> list[Figure]:
    """GB/s pageable vs pinned, pinning cost, overlap gain; or why there is no GPU here."""
    from feedgpu.copies import training_loop_s
    from feedgpu.measure.pinning import (
        DEFAULT_SIZES,
        cuda_skip_reason,
        measure_compute_s,
        measure_copy_costs,
        measure_first_pin,
        measure_training,
    )

    reason = cuda_skip_reason()
    if reason is not None:
        return [figure("gpu available", 0.0, "", f"GPU section not measured: {reason}")]
    import torch

    costs = measure_copy_costs().costs
    first_pin = measure_first_pin(BATCH_BYTES)
    compute_s = measure_compute_s()
    plain = measure_training(N_BATCHES, BATCH_BYTES)
    overlapped = measure_training(N_BATCHES, BATCH_BYTES, pinned=True, non_blocking=True, prefetch=True)
    copy_pageable = costs.pageable.time_s(BATCH_BYTES)
    copy_pinned = costs.pinned.time_s(BATCH_BYTES)
    model_plain = training_loop_s(N_BATCHES, copy_pageable, compute_s, overlapped=False)
    model_overlapped = training_loop_s(N_BATCHES, copy_pinned, compute_s, overlapped=True)
    loop = f"{N_BATCHES} batches of {BATCH_BYTES / 2**20:.0f} MB"
    sizes = f"fit over {DEFAULT_SIZES[0] / 2**10:.0f} KiB-{DEFAULT_SIZES[-1] / 2**20:.0f} MiB"
    return [
        figure("gpu available", 1.0, "", torch.cuda.get_device_name()),
        figure("gpu H2D bandwidth, pageable", costs.pageable.bytes_per_s / 1e9, "GB/s", sizes),
        figure("gpu H2D bandwidth, pinned", costs.pinned.bytes_per_s / 1e9, "GB/s", sizes),
        figure("gpu pinned / pageable bandwidth", costs.pinned.bytes_per_s / costs.pageable.bytes_per_s, "x"),
        figure("gpu pinning speed", costs.pinning.bytes_per_s / 1e9, "GB/s", "tensor.pin_memory(), cached blocks"),
        figure("gpu pinning latency", costs.pinning.latency_s * 1e6, "us"),
        figure("gpu first pin / later pins", first_pin.first_s / first_pin.steady_s, "x",
               f"{BATCH_BYTES / 2**20:.0f} MiB, empty host cache first"),
        figure("gpu loop, plain copies", plain, "s", loop),
        figure("gpu loop, pinned + non_blocking + prefetch", overlapped, "s", loop),
        figure("gpu overlap gain", plain / overlapped, "x", "plain / overlapped"),
        figure("gpu model / measured, plain loop", model_plain / plain, "x", "budget 0.75 to 1.25"),
        figure("gpu model / measured, overlapped loop", model_overlapped / overlapped, "x", "budget 0.75 to 1.25"),
    ]
