"""Pinned memory, measured: what ``pin_memory=True`` does here, and copies to a real GPU.

Two kinds of instrument:

* **on any machine**: :func:`pin_memory_report` runs a tiny DataLoader with
  ``pin_memory=True`` and reports what PyTorch said and did, and who pinned the batch.
  In PyTorch 2.14 (``torch/utils/data/dataloader.py``, ``_BaseDataLoaderIter.__init__``):
  without an accelerator the loader warns and pins nothing; with MPS (Apple silicon) as
  the accelerator it warns that pinning is not supported on MPS and pins nothing either;
  with CUDA it pins each batch, in the main thread inside ``next()`` when
  ``num_workers=0`` (``_SingleProcessDataLoaderIter``) and in a pin thread of the main
  process when there are workers (``_MultiProcessingDataLoaderIter``: the only place
  that thread is started). :func:`has_cuda` and :func:`cuda_skip_reason` tell a
  notebook whether the GPU cells can run.
* **with a CUDA GPU**: the copy model's parameters (:func:`measure_copy_costs`: pageable
  and pinned host-to-device bandwidth, timed with CUDA events, alone and, for pageable
  copies, inside a copy-then-compute loop (:func:`measure_loop_copy_seconds`), and the
  cost of ``pin_memory()``), the first pinning of a size against later ones
  (:func:`measure_first_pin`), the tutorial's six strategies (:func:`measure_strategies`), the
  unsynchronised timing mistake (:func:`measure_copy_timing_readings`), a training
  loop with and without copy/compute overlap on two streams (:func:`measure_training`),
  and every kind of copy by size as a readings folder records it
  (:func:`measure_copy_table`, for ``feedgpu-record``).
  Without a GPU each of them raises :class:`NoCudaError` at once, with a message saying
  so, and a notebook skips the cell::

      reason = cuda_skip_reason()
      if reason:
          print("skipped:", reason)
      else:
          measured = measure_copy_costs()

Every GPU timing here synchronises before reading a clock: the clock of a host that has
only *enqueued* work says nothing about the work (:func:`measure_copy_timing_readings`
shows by how much).

:func:`empty_host_cache` empties PyTorch's cache of pinned blocks where this PyTorch can
(``torch.accelerator.empty_host_cache`` is missing in PyTorch 2.11, for one) and says
whether it did.
"""

from __future__ import annotations

import logging
import statistics
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch.utils.data import DataLoader, TensorDataset

from ..base.checks import check_int
from ..models.copies import (PINNING_FROM, PINNING_SPREAD, STRATEGIES, CopyCosts, CostFit, batch_sized, fit_linear_cost,
                      pageable_range, spread_range)
from ..models.device import TimingReadings
from .machine import usable_cores

__all__ = [
    "NoCudaError",
    "has_cuda",
    "cuda_skip_reason",
    "is_pinned",
    "empty_host_cache",
    "PinReport",
    "pin_memory_report",
    "FirstPin",
    "measure_first_pin",
    "DEFAULT_SIZES",
    "RECORD_SIZES",
    "LARGE_COPY_BYTES",
    "COPY_KINDS",
    "measure_copy_seconds",
    "measure_loop_copy_seconds",
    "measure_pin_seconds",
    "measure_sync_s",
    "CostMeasurement",
    "measure_copy_costs",
    "measure_copy_table",
    "measure_strategies",
    "measure_copy_timing_readings",
    "measure_compute_s",
    "measure_training",
]


logger = logging.getLogger(__name__)


class NoCudaError(RuntimeError):
    """A GPU measurement was asked for on a machine where ``torch.cuda.is_available()`` is False."""


def has_cuda() -> bool:
    """Whether a CUDA GPU can be used here (``torch.cuda.is_available()``; False if asking fails)."""
    try:
        return bool(torch.cuda.is_available())
    except Exception as err:  # a broken driver install raises instead of answering
        logger.debug("torch.cuda.is_available() failed: %s", err)
        return False


def cuda_skip_reason() -> str | None:
    """None when a CUDA GPU is available; otherwise why the GPU measurements cannot run."""
    if has_cuda():
        return None
    built = torch.version.cuda
    if built is None:
        return ("no CUDA GPU: this PyTorch is a CPU-only build, so the GPU measurements are "
                "skipped (the copy model and the simulated device still run)")
    return (f"no CUDA GPU: this PyTorch is built for CUDA {built} but torch.cuda.is_available() "
            "is False (no GPU or no driver), so the GPU measurements are skipped (the copy "
            "model and the simulated device still run)")


def _require_cuda(what: str) -> None:
    reason = cuda_skip_reason()
    if reason is not None:
        raise NoCudaError(f"{what} needs a CUDA GPU; {reason}")


def _accelerator() -> str | None:
    """The type of the accelerator PyTorch can use here (``"cuda"``, ``"mps"``, ...), or None.

    Asked through ``torch.accelerator``, as the DataLoader asks when it decides whether to pin.
    """
    accelerator = getattr(torch, "accelerator", None)  # torch >= 2.6
    if accelerator is None:
        return "cuda" if has_cuda() else None
    if not accelerator.is_available():
        return None
    device = accelerator.current_accelerator()
    return None if device is None else device.type


def is_pinned(tensor: torch.Tensor) -> bool | None:
    """``tensor.is_pinned()``, or None when PyTorch cannot tell on this machine (the call
    raised: some builds need a CUDA driver to answer). Warnings it gives are logged."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            answer: bool | None = bool(tensor.is_pinned())
        except RuntimeError as err:
            logger.debug("is_pinned() raised: %s", err)
            answer = None
    for w in caught:
        logger.debug("is_pinned() warned: %s", w.message)
    return answer


# Whether empty_host_cache() has said once that this PyTorch cannot empty the cache.
_SAID_NO_EMPTY_HOST_CACHE = False


def empty_host_cache() -> bool:
    """Empty PyTorch's cache of pinned host blocks, where this PyTorch can; say whether it did.

    Calls ``torch.accelerator.empty_host_cache()``, which gives every unused cached
    pinned block back (a no-op before the allocator has pinned anything). Older PyTorch
    lacks it (2.11 has no such function; 2.14 has it), and very old PyTorch lacks
    ``torch.accelerator`` itself: then nothing is emptied, the first time this is logged
    (a warning), and the answer is False. No private function of PyTorch is called.

    Returns:
        True if the cache was emptied, False if this PyTorch cannot empty it.
    """
    global _SAID_NO_EMPTY_HOST_CACHE
    empty = getattr(getattr(torch, "accelerator", None), "empty_host_cache", None)
    if empty is None:
        if not _SAID_NO_EMPTY_HOST_CACHE:
            _SAID_NO_EMPTY_HOST_CACHE = True
            logger.warning("torch %s has no torch.accelerator.empty_host_cache(): the cache of pinned "
                           "blocks is not emptied, so a 'first' pinning may reuse a cached block", torch.__version__)
        return False
    empty()
    return True


@dataclass
class PinReport:
    """What :func:`pin_memory_report` saw.

    Attributes:
        accelerator: whether PyTorch found an accelerator (``torch.accelerator.is_available()``).
        warnings: the messages of the warnings PyTorch gave while the loader ran.
        batch_pinned: whether the loader's batch is in pinned memory; None if PyTorch
            could not tell (``is_pinned()`` raised).
        pin_error: what ``tensor.pin_memory()``, called by hand, raised (``"Type: message"``);
            None if it worked.
        device: the accelerator's type (``"cuda"``, ``"mps"``, ...); None without one.
        num_workers: the workers of the loader that was run.
    """

    accelerator: bool
    warnings: list[str]
    batch_pinned: bool | None
    pin_error: str | None
    device: str | None = None
    num_workers: int = 0

    @property
    def pinned_by(self) -> str | None:
        """Which thread pinned the batch: the main thread inside ``next(loader)`` (no
        workers) or the loader's pin thread (workers); None if the batch is not pinned."""
        if not self.batch_pinned:
            return None
        if self.num_workers == 0:
            return "the main thread, inside next(loader): on the training loop's path"
        return "the loader's pin thread, in the main process: off the training loop's path"

    def meaning(self) -> str:
        """What the report means, in one sentence for a notebook to print."""
        if not self.accelerator:
            return ("no accelerator: pin_memory=True pins nothing (PyTorch warns) and the "
                    "batches stay pageable; there is no copy to a device to speed up")
        if self.device == "mps":
            return ("MPS (Apple silicon): the DataLoader turns pin_memory off there (PyTorch "
                    "warns) and the batches stay pageable")
        if self.batch_pinned:
            return f"{self.device}: the batch arrived pinned, pinned by {self.pinned_by}"
        return f"{self.device}: pin_memory=True did not pin the batch (see the warnings)"


def pin_memory_report(*, num_workers: int = 0, batch_size: int = 4) -> PinReport:
    """Run a DataLoader with ``pin_memory=True`` over 8 tiny items and report what happened.

    Without an accelerator PyTorch warns (``'pin_memory' argument is set as true but no
    accelerator is found ...``) and hands out pageable batches: ``batch_pinned`` is False.
    Calling ``tensor.pin_memory()`` by hand is then an error, kept in ``pin_error``. With
    MPS the loader warns that pinning is not supported on MPS and hands out pageable
    batches too. With a CUDA GPU there is no warning and the batch is pinned
    (:attr:`PinReport.pinned_by` says by which thread); :meth:`PinReport.meaning` says it
    in words.

    Args:
        num_workers: the loader's workers (0: the main process loads, and pins if it can).
        batch_size: items per batch (the first batch is the one checked).

    Returns:
        A :class:`PinReport`.
    """
    dataset = TensorDataset(torch.arange(8 * 3, dtype=torch.float32).reshape(8, 3))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")  # a warning shown before would otherwise be dropped
        loader = DataLoader(dataset, batch_size=batch_size, num_workers=num_workers, pin_memory=True)
        (batch,) = next(iter(loader))
    pin_error = None
    with warnings.catch_warnings(record=True):
        warnings.simplefilter("always")
        try:
            torch.zeros(4).pin_memory()
        except Exception as err:  # the type varies with the build: report whatever it is
            pin_error = f"{type(err).__name__}: {err}"
    device = _accelerator()
    return PinReport(
        accelerator=device is not None,
        warnings=[str(w.message) for w in caught],
        batch_pinned=is_pinned(batch),
        pin_error=pin_error,
        device=device,
        num_workers=int(num_workers),
    )


# ---------------------------------------------------------------------------- on a GPU

#: Sizes (bytes) the copy model is fitted over: 4 KiB to 64 MiB, by factors of 4.
DEFAULT_SIZES: tuple[int, ...] = tuple(4096 * 4**k for k in range(8))

#: Sizes (bytes) a readings folder records (:func:`measure_copy_table`): 4 KiB to 512 MiB,
#: every :data:`DEFAULT_SIZES` among them, and every power of two from 1 MiB up, where the
#: CPU's caches stop holding a pageable copy's source (as ``readings/h200-2026-11-26``).
RECORD_SIZES: tuple[int, ...] = tuple(2**k for k in (12, 14, 16, 18, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29))

#: Above this size, :func:`measure_copy_table` times each kind of copy ``large_repeats`` times.
LARGE_COPY_BYTES = 2**24

#: The kinds of copy in each row of :func:`measure_copy_table`, in its order (the names
#: :mod:`feedgpu.readings` reads).
COPY_KINDS: tuple[str, ...] = ("h2d_pageable", "h2d_pageable_in_loop", "h2d_pageable_loops", "h2d_pinned",
                               "d2h_pinned", "pin_memory_1thread", "pin_memory_cached", "host_copy_1thread",
                               "host_copy_all_threads")


def _check_repeats(repeats: int, warmup: int) -> None:
    if int(repeats) != repeats or repeats < 1:
        raise ValueError(f"repeats must be an integer >= 1, got {repeats!r}")
    if int(warmup) != warmup or warmup < 0:
        raise ValueError(f"warmup must be an integer >= 0, got {warmup!r}")


def _host_tensor(nbytes: int, *, pinned: bool) -> torch.Tensor:
    """``nbytes`` bytes of host memory, written once so every page is really there."""
    tensor = torch.empty(int(nbytes), dtype=torch.uint8, pin_memory=pinned)
    tensor.fill_(1)
    return tensor


def _event_seconds(run: Callable[[], Any]) -> float:
    """Device seconds of the work ``run`` enqueues on the current stream, by CUDA events."""
    start = torch.cuda.Event(enable_timing=True)
    end = torch.cuda.Event(enable_timing=True)
    start.record()
    run()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / 1e3  # elapsed_time is in milliseconds


def _wall_seconds(run: Callable[[], Any]) -> float:
    """Host seconds of ``run()``, the device idle before and synchronised after."""
    torch.cuda.synchronize()
    start = time.perf_counter()
    run()
    torch.cuda.synchronize()
    return time.perf_counter() - start


def measure_copy_seconds(sizes_bytes: Sequence[int] = DEFAULT_SIZES, *, pinned: bool,
                         repeats: int = 5, warmup: int = 2) -> list[tuple[int, float]]:
    """Host-to-device copy time per size, from pinned or pageable memory.

    Each size is copied into a preallocated device tensor (so allocation is not timed)
    ``warmup`` times untimed, then ``repeats`` times timed with CUDA events; the median
    is kept.

    Returns:
        ``[(nbytes, seconds), ...]`` in the order of ``sizes_bytes``, ready for
        :func:`feedgpu.models.copies.fit_linear_cost`.

    Raises:
        NoCudaError: no CUDA GPU. ValueError: bad ``repeats`` or ``warmup``.
    """
    _require_cuda("measure_copy_seconds")
    return _medians(measure_copy_readings(sizes_bytes, pinned=pinned, repeats=repeats, warmup=warmup))


def _medians(readings: Sequence[tuple[int, list[float]]]) -> list[tuple[int, float]]:
    return [(nbytes, statistics.median(times)) for nbytes, times in readings]


def measure_copy_readings(sizes_bytes: Sequence[int] = DEFAULT_SIZES, *, pinned: bool, repeats: int = 5,
                          warmup: int = 2) -> list[tuple[int, list[float]]]:
    """:func:`measure_copy_seconds` with every timed reading kept: ``[(nbytes, [seconds, ...]), ...]``
    (what a range is made of, :func:`feedgpu.models.copies.pageable_range`)."""
    _require_cuda("measure_copy_readings")
    _check_repeats(repeats, warmup)
    results = []
    for nbytes in sizes_bytes:
        src = _host_tensor(nbytes, pinned=pinned)
        dst = torch.empty(int(nbytes), dtype=torch.uint8, device="cuda")
        results.append((int(nbytes), _event_times(lambda: dst.copy_(src, non_blocking=pinned), repeats=repeats,
                                                  warmup=warmup)))
        del src, dst
    return results


def _loop_copy_times(nbytes: int, *, pinned: bool, repeats: int, warmup: int, sources: int,
                     matrix: torch.Tensor, matmuls: int) -> list[float]:
    """Device seconds of ``repeats`` copies of ``nbytes`` to the GPU, each issued right after a
    step's compute (``warmup`` untimed first), from ``sources`` host tensors in turn."""
    host = [_host_tensor(nbytes, pinned=pinned) for _ in range(int(sources))]
    dst = torch.empty(int(nbytes), dtype=torch.uint8, device="cuda")
    times = []
    for k in range(int(warmup) + int(repeats)):
        # The previous step's kernels, queued on the current stream: the copy waits for them,
        # as a loop's copy does, and the start event (recorded after them) leaves them out.
        _compute(matrix, dst, matmuls)
        src = host[k % len(host)]  # a loader hands over a fresh batch: not the one just copied
        seconds = _event_seconds(lambda: dst.copy_(src, non_blocking=pinned))
        if k >= warmup:
            times.append(seconds)
    return times


def measure_loop_copy_seconds(sizes_bytes: Sequence[int] = DEFAULT_SIZES, *, pinned: bool = False,
                              repeats: int = 5, warmup: int = 2, sources: int = 3, matrix_size: int = 2048,
                              matmuls: int = 4) -> list[tuple[int, float]]:
    """Host-to-device copy time per size, measured inside a copy-then-compute loop.

    A copy costs more in a training loop than alone when it is pageable (the host stages
    it; see :attr:`feedgpu.models.copies.CopyCosts.pageable_in_loop`). So each copy here runs as
    in :func:`measure_training`'s plain loop, on the current stream: the previous step's
    compute (:func:`measure_compute_s`'s kernels) is enqueued, then the copy is issued
    right after it and waits for those kernels, as a loop's copy does. Only the copy is
    timed, by CUDA events recorded just before and after it (so the compute it waited for
    is not counted), then the device is synchronised. The copies come from ``sources``
    host tensors in turn, since a loader hands over a fresh batch every step and the
    source is not the one just copied. ``warmup`` untimed copies, then ``repeats`` timed;
    the median is kept.

    Args:
        sizes_bytes: the sizes, in bytes.
        pinned: copy from pinned memory (``non_blocking=True``) instead of pageable.
        repeats, warmup: timed and untimed copies per size.
        sources: host tensors of each size copied in turn (at least 1).
        matrix_size, matmuls: the compute between copies, as :func:`measure_training`'s.

    Returns:
        ``[(nbytes, seconds), ...]`` in the order of ``sizes_bytes``, ready for
        :func:`feedgpu.models.copies.fit_linear_cost`.

    Raises:
        NoCudaError: no CUDA GPU. ValueError: bad ``repeats``, ``warmup`` or ``sources``.
    """
    _require_cuda("measure_loop_copy_seconds")
    return _medians(measure_loop_copy_readings(sizes_bytes, pinned=pinned, repeats=repeats, warmup=warmup,
                                               sources=sources, matrix_size=matrix_size, matmuls=matmuls))


def measure_loop_copy_readings(sizes_bytes: Sequence[int] = DEFAULT_SIZES, *, pinned: bool = False,
                               repeats: int = 5, warmup: int = 2, sources: int = 3, matrix_size: int = 2048,
                               matmuls: int = 4) -> list[tuple[int, list[float]]]:
    """:func:`measure_loop_copy_seconds` with every timed reading kept."""
    _require_cuda("measure_loop_copy_readings")
    _check_repeats(repeats, warmup)
    check_int("sources", sources, minimum=1)
    matrix = _matrix(matrix_size)
    return [(int(nbytes), _loop_copy_times(int(nbytes), pinned=pinned, repeats=repeats, warmup=warmup,
                                           sources=sources, matrix=matrix, matmuls=matmuls))
            for nbytes in sizes_bytes]


def _fresh_loop_copy_times(nbytes: int, *, loops: int, batches: int, matrix: torch.Tensor,
                           matmuls: int) -> list[float]:
    """The mean device seconds of a pageable copy in each of ``loops`` copy-then-compute loops
    of ``batches`` copies, every loop from sources made for it (fresh pages, as a loader's
    new batches are), one untimed copy first in each."""
    dst = torch.empty(int(nbytes), dtype=torch.uint8, device="cuda")
    means = []
    for _ in range(int(loops)):
        host = [_host_tensor(nbytes, pinned=False) for _ in range(int(batches) + 1)]
        times = []
        for k, src in enumerate(host):
            _compute(matrix, dst, matmuls)  # the previous step's kernels: the copy waits for them
            seconds = _event_seconds(lambda: dst.copy_(src))
            if k:
                times.append(seconds)
        means.append(statistics.fmean(times))
        del host
    return means


def measure_pin_seconds(sizes_bytes: Sequence[int] = DEFAULT_SIZES, *, repeats: int = 5,
                        warmup: int = 2) -> list[tuple[int, float]]:
    """Time of ``tensor.pin_memory()`` per size (host clock: pinning is host work).

    The warm-up matters: the first pinning of a size asks CUDA for new page-locked memory;
    PyTorch's caching host allocator then keeps freed pinned blocks and reuses them, as a
    DataLoader that pins does batch after batch (:func:`measure_first_pin` shows the
    difference). The median of ``repeats`` is kept: the steady state.

    Raises:
        NoCudaError: no CUDA GPU. ValueError: bad ``repeats`` or ``warmup``.
    """
    _require_cuda("measure_pin_seconds")
    return _medians(measure_pin_readings(sizes_bytes, repeats=repeats, warmup=warmup))


def measure_pin_readings(sizes_bytes: Sequence[int] = DEFAULT_SIZES, *, repeats: int = 5,
                         warmup: int = 2) -> list[tuple[int, list[float]]]:
    """:func:`measure_pin_seconds` with every timed reading kept."""
    _require_cuda("measure_pin_readings")
    _check_repeats(repeats, warmup)
    results = []
    for nbytes in sizes_bytes:
        src = _host_tensor(nbytes, pinned=False)
        times = []
        for k in range(int(warmup) + int(repeats)):
            start = time.perf_counter()
            pinned = src.pin_memory()
            seconds = time.perf_counter() - start
            del pinned  # back to PyTorch's cache of pinned blocks, for the next repeat
            if k >= warmup:
                times.append(seconds)
        results.append((int(nbytes), times))
    return results


@dataclass
class FirstPin:
    """What :func:`measure_first_pin` saw.

    Attributes:
        nbytes: the size pinned.
        first_s: host seconds of the first ``pin_memory()`` of that size, on an empty cache.
        steady_s: the median host seconds of the pinnings after it.
        first_new_blocks: pinned blocks the allocator asked CUDA for during the first
            pinning (``num_host_alloc`` of ``torch.cuda.host_memory_stats()``); None if
            this PyTorch does not count them.
        steady_new_blocks: the same, during all the later pinnings together.
        cache_emptied: whether the cache of pinned blocks was emptied before the first
            pinning (:func:`empty_host_cache`). False on a PyTorch that cannot empty it
            (2.11, for one): a block of that size left in the cache by an earlier pinning
            then serves the first one, which is no first one (``first_new_blocks`` 0
            says so where it is counted).
    """

    nbytes: int
    first_s: float
    steady_s: float
    first_new_blocks: int | None
    steady_new_blocks: int | None
    cache_emptied: bool = True


def _host_blocks_allocated() -> int | None:
    """Pinned blocks the caching host allocator has asked CUDA for so far, or None."""
    stats = getattr(torch.cuda, "host_memory_stats", None)
    if stats is None:
        return None
    value = stats().get("num_host_alloc")
    return None if value is None else int(value)


def _difference(after: int | None, before: int | None) -> int | None:
    return None if after is None or before is None else after - before


def measure_first_pin(nbytes: int = 64 * 2**20, *, repeats: int = 5) -> FirstPin:
    """Time the first ``pin_memory()`` of a tensor of ``nbytes``, then ``repeats`` more.

    PyTorch pins through its caching host allocator (``torch.cuda.host_memory_stats``
    describes it): a pinning that finds no free block of its size asks CUDA for new
    page-locked memory; a freed pinned tensor's block goes back to the cache, and the next
    pinning of that size reuses it. So the first pinning pays for new page-locked memory
    and the later ones are host copies. The cache is emptied first
    (:func:`empty_host_cache`), so the first pinning here is a first one; where this
    PyTorch cannot empty it (2.11, for one) the result says so
    (:attr:`FirstPin.cache_emptied` False) and the first pinning is a first one only if
    nothing of that size was pinned before in this process.

    Raises:
        NoCudaError: no CUDA GPU. ValueError: bad ``repeats``.
    """
    _require_cuda("measure_first_pin")
    _check_repeats(repeats, 0)
    src = _host_tensor(nbytes, pinned=False)
    torch.cuda.synchronize()  # initialises CUDA, whose start-up must not be timed
    emptied = empty_host_cache()
    before = _host_blocks_allocated()
    start = time.perf_counter()
    pinned = src.pin_memory()
    first = time.perf_counter() - start
    after_first = _host_blocks_allocated()
    del pinned  # back to the cache
    times = []
    for _ in range(int(repeats)):
        start = time.perf_counter()
        pinned = src.pin_memory()
        times.append(time.perf_counter() - start)
        del pinned
    return FirstPin(int(nbytes), first, statistics.median(times), _difference(after_first, before),
                    _difference(_host_blocks_allocated(), after_first), cache_emptied=emptied)


def measure_sync_s(repeats: int = 50) -> float:
    """Median host seconds of ``torch.cuda.synchronize()`` on an idle device: the model's ``sync_s``.

    Raises:
        NoCudaError: no CUDA GPU.
    """
    _require_cuda("measure_sync_s")
    _check_repeats(repeats, 0)
    torch.cuda.synchronize()
    times = []
    for _ in range(int(repeats)):
        start = time.perf_counter()
        torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


@dataclass
class CostMeasurement:
    """What :func:`measure_copy_costs` measured and fitted.

    Attributes:
        costs: the fitted model, ready for :func:`feedgpu.models.copies.predict_strategies`.
        fits: ``"pageable"``, ``"pinned"``, ``"pinning"`` and ``"pageable_in_loop"``: each
            :class:`CostFit`, which keeps the measured points and the residuals.
    """

    costs: CopyCosts
    fits: dict[str, CostFit]


def measure_copy_costs(sizes_bytes: Sequence[int] = DEFAULT_SIZES, *, repeats: int = 5,
                       warmup: int = 2) -> CostMeasurement:
    """Measure pageable copies, pinned copies and pinning over ``sizes_bytes``, and pageable
    copies inside a copy-then-compute loop (:func:`measure_loop_copy_seconds`); fit each
    with :func:`feedgpu.models.copies.fit_linear_cost` (the copies in a loop over the batch-sized
    ones only: :func:`feedgpu.models.copies.batch_sized`), and measure ``sync_s``.

    Returns:
        A :class:`CostMeasurement` whose ``costs`` carry the in-loop fit as
        ``pageable_in_loop`` (what :meth:`feedgpu.models.copies.CopyCosts.loop_copy_s` uses).

    Raises:
        NoCudaError: no CUDA GPU.
    """
    _require_cuda("measure_copy_costs")
    readings = {
        "pageable": measure_copy_readings(sizes_bytes, pinned=False, repeats=repeats, warmup=warmup),
        "pinned": measure_copy_readings(sizes_bytes, pinned=True, repeats=repeats, warmup=warmup),
        "pinning": measure_pin_readings(sizes_bytes, repeats=repeats, warmup=warmup),
        "pageable_in_loop": measure_loop_copy_readings(sizes_bytes, pinned=False, repeats=repeats, warmup=warmup),
    }
    samples = {name: _medians(rows) for name, rows in readings.items()}
    samples["pageable_in_loop"] = batch_sized(samples["pageable_in_loop"])  # a loop's copies are batches
    fits = {name: fit_linear_cost([b for b, _ in points], [s for _, s in points])
            for name, points in samples.items()}

    def every(name: str) -> list[tuple[int, float]]:
        return [(b, t) for b, times in readings[name] for t in times]

    in_loop = fits["pageable_in_loop"].cost
    costs = CopyCosts(pageable=fits["pageable"].cost, pinned=fits["pinned"].cost,
                      pinning=fits["pinning"].cost, sync_s=measure_sync_s(), pageable_in_loop=in_loop,
                      pageable_range=pageable_range(every("pageable_in_loop"), every("pageable"), in_loop.latency_s),
                      pinning_range=spread_range(fits["pinning"].cost, readings["pinning"], smallest=PINNING_FROM,
                                                 spread=PINNING_SPREAD))
    logger.debug("measured copy costs: %s", costs)
    return CostMeasurement(costs, fits)


def _event_times(run: Callable[[], Any], *, repeats: int, warmup: int) -> list[float]:
    """Device seconds (CUDA events) of ``repeats`` runs of ``run``, after ``warmup`` untimed ones."""
    times = [_event_seconds(run) for _ in range(int(warmup) + int(repeats))]
    return times[int(warmup):]


#: Seconds of untimed runs, at least, before a host copy is timed in :func:`measure_copy_table`.
SETTLE_S = 0.1


def _host_times(run: Callable[[], Any], *, repeats: int, warmup: int, settle_s: float = SETTLE_S) -> list[float]:
    """Host seconds (:func:`_wall_seconds`) of ``repeats`` runs of ``run``, after untimed ones:
    ``warmup`` of them, and more until ``settle_s`` has passed. The first host copies on many
    threads after a pause of the other cores can take milliseconds, not microseconds (seen
    on an H100 machine with 16 cores: 4 MiB on 16 threads took 12, 12 and 4 ms, then
    0.04 ms; 64 KiB pinned took 6 ms for some runs after the copies to the GPU), as idle cores wake up."""
    began = time.perf_counter()
    done = 0
    while done < warmup or time.perf_counter() - began < settle_s:
        _wall_seconds(run)
        done += 1
    return [_wall_seconds(run) for _ in range(int(repeats))]


def _summary(times: Sequence[float]) -> dict[str, Any]:
    return {"median_s": statistics.median(times), "min_s": min(times), "all_s": list(times)}


def measure_copy_table(sizes_bytes: Sequence[int] = RECORD_SIZES, *, repeats: int = 20, large_repeats: int = 8,
                       warmup: int = 2, sources: int = 3, matrix_size: int = 2048, matmuls: int = 4,
                       loops: int = 5) -> list[dict[str, Any]]:
    """Every kind of copy a readings folder records, by size: the rows of its ``copies`` list.

    For each size, each kind of copy (:data:`COPY_KINDS`) is run ``warmup`` times untimed,
    then timed ``repeats`` times (``large_repeats`` above :data:`LARGE_COPY_BYTES`):

    * ``h2d_pageable``: host to device from pageable memory, alone (CUDA events);
    * ``h2d_pageable_in_loop``: the same inside a copy-then-compute loop, from ``sources``
      tensors in turn (as :func:`measure_loop_copy_seconds`; CUDA events);
    * ``h2d_pageable_loops``: ``loops`` such loops of ``sources`` copies, each loop from
      sources made for it (fresh pages), one reading per loop (its mean copy): how far a
      pageable loop moves from one run to the next (the range of
      :func:`feedgpu.models.copies.pageable_range`; a folder recorded before has none);
    * ``h2d_pinned``: host to device from pinned memory, ``non_blocking=True`` (CUDA events);
    * ``d2h_pinned``: device to host into pinned memory, ``non_blocking=True`` (CUDA events);
    * ``pin_memory_1thread``: ``tensor.pin_memory()`` with ``torch.set_num_threads(1)``, as
      the DataLoader's pin thread runs it (``torch/utils/data/_utils/pin_memory.py`` sets one
      thread there); the host's clock, the caching allocator warm;
    * ``pin_memory_cached``: ``tensor.pin_memory()`` on torch's threads as they were when
      this was called, as a call in the user's thread runs it (host clock, allocator warm);
    * ``host_copy_1thread``, ``host_copy_all_threads``: a host-to-host copy into memory
      already held, on one thread and on every usable core (host clock).

    The host clock is read with the device idle before and synchronised after, and the
    untimed runs of a host copy go on for at least :data:`SETTLE_S` (the first copies on
    many threads after a pause are slow while idle cores wake up). Torch's thread count is
    restored afterwards, also on an error.

    Args:
        sizes_bytes: the sizes, in bytes (default :data:`RECORD_SIZES`: 4 KiB to 512 MiB).
        repeats, large_repeats, warmup: timed runs per kind (small and large sizes) and untimed ones.
        sources, matrix_size, matmuls: the loop of ``h2d_pageable_in_loop``.
        loops: the loops of ``h2d_pageable_loops``, ``sources`` copies each.

    Returns:
        One dict per size, in the order of ``sizes_bytes``: ``{"bytes": n, kind:
        {"median_s", "min_s", "all_s"}, ...}`` for every kind of :data:`COPY_KINDS`
        (seconds), as ``copies_and_loop.json`` holds them (:mod:`feedgpu.readings`).

    Raises:
        NoCudaError: no CUDA GPU. ValueError: bad ``repeats``, ``large_repeats``,
        ``warmup`` or ``sources``.
    """
    _require_cuda("measure_copy_table")
    _check_repeats(repeats, warmup)
    _check_repeats(large_repeats, warmup)
    check_int("sources", sources, minimum=1)
    check_int("loops", loops, minimum=1)
    default_threads = torch.get_num_threads()
    matrix = _matrix(matrix_size)
    rows = []
    try:
        for nbytes in sizes_bytes:
            n = int(nbytes)
            timed = {"repeats": repeats if n <= LARGE_COPY_BYTES else large_repeats, "warmup": warmup}
            pageable = _host_tensor(n, pinned=False)
            pinned = _host_tensor(n, pinned=True)
            device = torch.empty(n, dtype=torch.uint8, device="cuda")
            host = torch.empty_like(pageable)
            row: dict[str, Any] = {}
            row["h2d_pageable"] = _summary(_event_times(lambda: device.copy_(pageable), **timed))
            row["h2d_pageable_in_loop"] = _summary(_loop_copy_times(n, pinned=False, sources=sources, matrix=matrix,
                                                                    matmuls=matmuls, **timed))
            row["h2d_pageable_loops"] = _summary(_fresh_loop_copy_times(n, loops=loops, batches=sources, matrix=matrix,
                                                                        matmuls=matmuls))
            row["h2d_pinned"] = _summary(_event_times(lambda: device.copy_(pinned, non_blocking=True), **timed))
            row["d2h_pinned"] = _summary(_event_times(lambda: pinned.copy_(device, non_blocking=True), **timed))
            row["pin_memory_cached"] = _summary(_host_times(lambda: pageable.pin_memory(), **timed))
            torch.set_num_threads(1)
            row["pin_memory_1thread"] = _summary(_host_times(lambda: pageable.pin_memory(), **timed))
            row["host_copy_1thread"] = _summary(_host_times(lambda: host.copy_(pageable), **timed))
            torch.set_num_threads(usable_cores())
            row["host_copy_all_threads"] = _summary(_host_times(lambda: host.copy_(pageable), **timed))
            torch.set_num_threads(default_threads)
            rows.append({"bytes": n, **{kind: row[kind] for kind in COPY_KINDS}})
            del pageable, pinned, device, host
    finally:
        torch.set_num_threads(default_threads)
    return rows


def _strategy_runner(strategy: str, tensors: list[torch.Tensor]) -> Callable[[], Any]:
    """The tutorial's code for ``strategy`` over ``tensors`` (pinned ones for ``pinned*``)."""
    non_blocking = strategy.endswith("_nb")
    pin_first = strategy.startswith("pin_then_copy")

    def run() -> list[torch.Tensor]:
        out = []
        for t in tensors:
            source = t.pin_memory() if pin_first else t
            out.append(source.to("cuda", non_blocking=non_blocking))
        if non_blocking:
            torch.cuda.synchronize()
        return out

    return run


def measure_strategies(n_tensors: int, tensor_bytes: int, *, repeats: int = 5,
                       warmup: int = 2) -> dict[str, float]:
    """Host seconds of each of :data:`feedgpu.models.copies.STRATEGIES`, as the tutorial times them.

    ``n_tensors`` tensors of ``tensor_bytes`` each, pageable (and a pinned copy of them for
    the ``pinned`` strategies), are sent with the strategy's code; the clock starts on an
    idle device and stops after a final synchronisation. Median of ``repeats`` after
    ``warmup`` untimed runs. Compare with :func:`feedgpu.models.copies.predict_strategies`.

    Raises:
        NoCudaError: no CUDA GPU. ValueError: bad counts.
    """
    _require_cuda("measure_strategies")
    _check_repeats(repeats, warmup)
    if int(n_tensors) != n_tensors or n_tensors < 1:
        raise ValueError(f"n_tensors must be an integer >= 1, got {n_tensors!r}")
    pageable = [_host_tensor(tensor_bytes, pinned=False) for _ in range(int(n_tensors))]
    pinned = [t.pin_memory() for t in pageable]
    results = {}
    for strategy in STRATEGIES:
        run = _strategy_runner(strategy, pinned if strategy.startswith("pinned") else pageable)
        times = []
        for k in range(int(warmup) + int(repeats)):
            seconds = _wall_seconds(run)
            if k >= warmup:
                times.append(seconds)
        results[strategy] = statistics.median(times)
    return results


def measure_copy_timing_readings(nbytes: int = 64 * 2**20, *, pinned: bool = True,
                                 non_blocking: bool = True) -> TimingReadings:
    """Time one copy of ``nbytes`` to the GPU both ways: the host clock right after
    ``.to()`` returns (the mistake), and after ``torch.cuda.synchronize()``.

    From pinned memory with ``non_blocking=True`` the first reading is the time to
    *enqueue* the copy, a few microseconds, whatever its size. One warm-up copy first.

    Raises:
        NoCudaError: no CUDA GPU.
    """
    _require_cuda("measure_copy_timing_readings")
    src = _host_tensor(nbytes, pinned=pinned)
    src.to("cuda", non_blocking=non_blocking)  # warm-up: CUDA context, allocator
    torch.cuda.synchronize()
    start = time.perf_counter()
    dst = src.to("cuda", non_blocking=non_blocking)
    unsynchronised = time.perf_counter() - start
    torch.cuda.synchronize()
    synchronised = time.perf_counter() - start
    del dst
    return TimingReadings(unsynchronised, synchronised)


def _compute(matrix: torch.Tensor, batch: torch.Tensor, matmuls: int) -> torch.Tensor:
    """``matmuls`` matrix products, then one small kernel that reads the batch (so the
    compute depends on the copy, as a model's forward pass does)."""
    out = matrix
    for _ in range(int(matmuls)):
        out = matrix @ out
    return out[0, 0] + batch[0]


def _matrix(matrix_size: int) -> torch.Tensor:
    # A fixed seed: the same numbers, hence the same kernels, on every call.
    generator = torch.Generator(device="cuda").manual_seed(0)
    matrix = torch.rand(int(matrix_size), int(matrix_size), device="cuda", generator=generator)
    return matrix / matrix_size  # keeps repeated products finite


def measure_compute_s(*, matrix_size: int = 2048, matmuls: int = 4, repeats: int = 5) -> float:
    """Device seconds of the compute that :func:`measure_training` does per batch (CUDA events).

    Raises:
        NoCudaError: no CUDA GPU.
    """
    _require_cuda("measure_compute_s")
    _check_repeats(repeats, 1)
    matrix = _matrix(matrix_size)
    batch = torch.ones(1, device="cuda")
    _event_seconds(lambda: _compute(matrix, batch, matmuls))  # warm-up (kernel selection)
    return statistics.median(_event_seconds(lambda: _compute(matrix, batch, matmuls))
                             for _ in range(int(repeats)))


def measure_training(n_batches: int, batch_bytes: int, *, pinned: bool = False,
                     non_blocking: bool = False, prefetch: bool = False,
                     matrix_size: int = 2048, matmuls: int = 4) -> float:
    """Host seconds of a real loop of ``n_batches``: copy a batch to the GPU, compute on it.

    The same loop as :func:`feedgpu.models.device.simulate_training`, with the same options:

    * ``pinned``: the host batch is pinned (as ``DataLoader(pin_memory=True)`` delivers it);
    * ``non_blocking``: ``.to("cuda", non_blocking=True)``;
    * ``prefetch``: the copies run on a second ``torch.cuda.Stream`` and the next batch's
      copy is issued before this batch's compute; the compute stream waits for the copy
      stream (``wait_stream``) before using a batch, and ``record_stream`` tells the
      allocator the batch is used there.

    The compute is :func:`measure_compute_s`'s. One untimed run first; the clock starts
    on an idle device and stops after ``torch.cuda.synchronize()``.

    Raises:
        NoCudaError: no CUDA GPU. ValueError: ``n_batches`` < 1.
    """
    _require_cuda("measure_training")
    if int(n_batches) != n_batches or n_batches < 1:
        raise ValueError(f"n_batches must be an integer >= 1, got {n_batches!r}")
    src = _host_tensor(batch_bytes, pinned=pinned)  # every batch is a copy of it
    matrix = _matrix(matrix_size)
    main = torch.cuda.current_stream()
    side = torch.cuda.Stream()

    def load() -> torch.Tensor:
        if not prefetch:
            return src.to("cuda", non_blocking=non_blocking)
        with torch.cuda.stream(side):
            return src.to("cuda", non_blocking=non_blocking)

    def loop() -> None:
        if not prefetch:
            for _ in range(int(n_batches)):
                _compute(matrix, load(), matmuls)
            return
        ahead = load()
        for k in range(int(n_batches)):
            main.wait_stream(side)  # the batch about to be used is on the device
            current = ahead
            current.record_stream(main)
            if k + 1 < n_batches:
                ahead = load()
            _compute(matrix, current, matmuls)

    _wall_seconds(loop)  # warm-up: allocator, kernel selection
    return _wall_seconds(loop)
