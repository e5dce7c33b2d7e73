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
  prediction of both (:func:`feedgpu.models.copies.training_loop_s`, with a copy as a loop pays
  it: :attr:`feedgpu.models.copies.CopyCosts.pageable_in_loop`) as a ratio to the measurement.
  The pinned loop's is a point, expected within 25%; the plain loop's copies are pageable,
  which vary from run to run, so its note says whether the measurement fell inside the
  range the model predicts (:func:`feedgpu.models.copies.training_loop_range_s`: the fastest and
  the slowest pageable copies of the machine's readings) and gives the range
  (``tests/test_pinning.py`` checks the simulated loops against a GPU the same way;
  ``tests/test_readings.py`` replays the recorded machines, each on its own readings and
  on the other's; notebook 05 shows the student's own, ungraded).

``feedgpu-bench --only gpu --readings FOLDER`` computes the same figures from a recorded
folder of ``readings/`` instead of a live GPU: the recorded loops stand as "measured", and
every note names the machine.
"""

from __future__ import annotations

from . import Figure, figure

N_BATCHES = 20
BATCH_BYTES = 64 * 2**20


def bench_gpu(readings: str | None = None) -> list[Figure]:
    """GB/s pageable vs pinned, pinning cost, overlap gain; or why there is no GPU here.

    With ``readings`` (a folder of ``readings/``, or a path), the same figures from that
    recorded machine instead of a live GPU: the copy model fitted to its recorded copies,
    its recorded loops as "measured", and every note naming the machine.
    """
    from feedgpu.measure.pinning import DEFAULT_SIZES, cuda_skip_reason

    sizes = f"fit over {DEFAULT_SIZES[0] / 2**10:.0f} KiB-{DEFAULT_SIZES[-1] / 2**20:.0f} MiB"
    if readings is not None:
        return _replayed(readings, sizes)
    reason = cuda_skip_reason()
    if reason is not None:
        return [figure("gpu available", 0.0, "", f"GPU section not measured: {reason}")]
    import torch

    from feedgpu.measure.pinning import measure_compute_s, measure_copy_costs, measure_first_pin, measure_training

    costs = measure_copy_costs().costs
    first_pin = measure_first_pin(BATCH_BYTES)
    compute_s = measure_compute_s()
    plain = measure_training(N_BATCHES, BATCH_BYTES)
    overlapped = measure_training(N_BATCHES, BATCH_BYTES, pinned=True, non_blocking=True, prefetch=True)
    return _figures(torch.cuda.get_device_name(), costs, first_pin.first_s / first_pin.steady_s, compute_s,
                    plain, overlapped, sizes, "", first_pin_emptied=first_pin.cache_emptied)


def _replayed(name: str, sizes: str) -> list[Figure]:
    """The gpu figures of a recorded machine (:mod:`feedgpu.readings`)."""
    from feedgpu.readings import load_readings

    recorded = load_readings(name)
    loops = {loop.name: loop for loop in recorded.copy_loops}
    plain, overlapped = loops["bench, plain copies"], loops["bench, pinned + non_blocking + prefetch"]
    if plain.compute_s != overlapped.compute_s:
        raise ValueError(f"{recorded.name}: the bench's two loops give different compute times")
    first_pin = recorded.bench_figure("gpu first pin / later pins")
    figures = _figures(recorded.describe(), recorded.copy_costs(), first_pin, plain.compute_s,
                       plain.measured_s, overlapped.measured_s, sizes + " of its recorded copies",
                       f"recorded: {recorded.name}",
                       first_pin_emptied=recorded.machine.get("guards", {}).get("empty_host_cache", True))
    figures[0]["note"] = f"not this machine: {recorded.describe()} (readings/{recorded.name})"
    return figures


def _figures(device: str, costs, first_pin_ratio: float | None, compute_s: float, plain: float, overlapped: float,
             sizes: str, recorded: str, first_pin_emptied: bool = True) -> list[Figure]:
    from feedgpu.models.copies import range_note, training_loop_range_s, training_loop_s

    model_plain = training_loop_s(N_BATCHES, costs.loop_copy_s(BATCH_BYTES, pinned=False), compute_s, overlapped=False)
    plain_range = training_loop_range_s(N_BATCHES, BATCH_BYTES, compute_s, costs, pinned=False, overlapped=False)
    model_overlapped = training_loop_s(N_BATCHES, costs.loop_copy_s(BATCH_BYTES, pinned=True), compute_s,
                                       overlapped=True)
    loop = f"{N_BATCHES} batches of {BATCH_BYTES / 2**20:.0f} MB"

    def noted(note: str) -> str:
        return "; ".join(part for part in (note, recorded) if part)

    figures = [
        figure("gpu available", 1.0, "", noted(device)),
        figure("gpu H2D bandwidth, pageable", costs.pageable.bytes_per_s / 1e9, "GB/s", noted(sizes)),
        figure("gpu H2D bandwidth, pinned", costs.pinned.bytes_per_s / 1e9, "GB/s", noted(sizes)),
        figure("gpu H2D bandwidth, pageable in a loop", costs.in_loop().pageable.bytes_per_s / 1e9, "GB/s",
               noted("copies inside a copy-compute loop (CopyCosts.pageable_in_loop)")),
        figure("gpu pinned / pageable bandwidth", costs.pinned.bytes_per_s / costs.pageable.bytes_per_s, "x",
               noted("")),
        figure("gpu pinning speed", costs.pinning.bytes_per_s / 1e9, "GB/s", noted("tensor.pin_memory(), cached blocks")),
        figure("gpu pinning latency", costs.pinning.latency_s * 1e6, "us", noted("")),
    ]
    if first_pin_ratio is not None:
        emptied = ("empty host cache first" if first_pin_emptied else  # torch 2.11: no empty_host_cache
                   "host cache NOT emptied first (this torch cannot): the first pin may reuse a cached block")
        figures.append(figure("gpu first pin / later pins", first_pin_ratio, "x",
                              noted(f"{BATCH_BYTES / 2**20:.0f} MiB, {emptied}")))
    return figures + [
        figure("gpu loop, plain copies", plain, "s", noted(loop)),
        figure("gpu loop, pinned + non_blocking + prefetch", overlapped, "s", noted(loop)),
        figure("gpu overlap gain", plain / overlapped, "x", noted("plain / overlapped")),
        figure("gpu model / measured, plain loop", model_plain / plain, "x",
               noted(f"pageable copies vary from run to run: {range_note(plain, *plain_range)}")),
        figure("gpu model / measured, overlapped loop", model_overlapped / overlapped, "x",
               noted("pinned copies: a point, budget 0.75 to 1.25")),
    ]
