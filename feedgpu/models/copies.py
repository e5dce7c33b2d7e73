"""The course's model of host-to-device copies: latency + bytes ÷ bandwidth, and pinning.

A batch that the DataLoader hands over lives in ordinary (*pageable*) host memory. To
reach the GPU it must cross the bus by DMA, and DMA can only read *pinned* (page-locked)
memory, which the operating system promises not to move. So:

* a copy from **pageable** memory is staged: the host copies it, chunk by chunk, into a
  pinned buffer of CUDA's own, from which the DMA sends it. PyTorch makes every copy to
  the device with ``cudaMemcpyAsync`` (``copy_kernel_cuda``, ``aten/src/ATen/native/cuda/Copy.cu``;
  without ``non_blocking`` it then synchronises the stream), and CUDA's "API
  synchronization behavior" page says of the asynchronous copies that where pageable
  memory must first be staged to pinned memory, the driver may synchronize with the stream
  and stage the copy into pinned memory. Staging keeps pace with the DMA, so this model
  holds the host for the whole copy. It cannot overlap with kernels, and inside a loop it
  costs more than alone (:attr:`CopyCosts.pageable_in_loop`);
* a copy from **pinned** memory goes straight to the bus, faster, and with
  ``non_blocking=True`` the host does not wait: the copy overlaps with what the host does
  next. On its stream it still waits for the kernels enqueued there before it; it runs
  beside kernels only from a stream of its own;
* **pinning** (``tensor.pin_memory()``) is itself a copy, into pinned memory, paid by the
  host thread that calls it, at that thread's speed: a call in the user's code runs on
  torch's threads, the DataLoader's pin thread on one (``torch.set_num_threads(1)`` in
  ``torch/utils/data/_utils/pin_memory.py``). The DataLoader's ``pin_memory=True`` pays it in a pin thread
  of the main process when the loader has workers (off the training loop's path), and in
  the main thread, inside ``next(loader)``, when ``num_workers=0`` (on the loop's path:
  ``torch/utils/data/dataloader.py``, ``_SingleProcessDataLoaderIter._next_data``). The
  first pinning of a size also asks CUDA for page-locked memory; PyTorch's caching host
  allocator keeps the freed blocks for the next pinning of that size, and the model's
  pinning cost is that steady state.

Each of the three is modelled by one :class:`LinearCost`: a fixed latency plus bytes ÷
bandwidth. A pinned copy is DMA alone: it runs at the same speed from one run to the next
(on the recorded H200, 64 MiB in 1.215 to 1.23 ms over eight runs), so the model predicts
it as a point. A pageable copy is a host copy into a staging buffer, on one thread, then
DMA: its speed follows the host's memory traffic, its caches and its page faults, and
varies from run to run (64 MiB in 4.3 to 7.0 ms over eight runs on the same H200, whose
bench's loop of such copies ran at 7.1 GB/s). So the model
predicts a pageable copy, and pinning where its readings spread, as a range
(:class:`CopyRange`: the fastest and the slowest line the machine's readings hold,
:func:`copy_range`), and a loop of them as a range too (:func:`training_loop_range_s`,
:func:`strategy_range_s`); :func:`range_note` says whether a measurement fell inside. :class:`CopyCosts` holds the three, and the host's cost of one wait for the
device (``sync_s``: the round trip of the ``cudaStreamSynchronize`` that a blocking
``.to()`` adds after its copy).

With those, :func:`predict_strategies` predicts the six ways of the PyTorch tutorial "A
guide on good usage of ``non_blocking`` and ``pin_memory()``" to send ``n`` tensors
(:data:`STRATEGIES`), and :func:`pin_then_copy_slowdown` says how much slower
``t.pin_memory().to(device, non_blocking=True)`` is than a plain ``t.to(device)``: the
tutorial's wording is "can be up to twice as slow"; in this model the ratio for one
tensor is ``(p + c_pinned) / c_pageable`` (pinning plus a pinned copy against a pageable
copy), which is more than 2 exactly when ``p > 2 c_pageable - c_pinned``: with the default
copies (12 and 24 GB/s), a host that pins below 8 GB/s (:func:`pin_then_copy_limit`). :func:`training_loop_s` gives the loop's total with and without
overlap of copy and compute; :mod:`feedgpu.models.device` plays the same rules out on a
simulated device; :func:`fit_linear_cost` fits latency and bandwidth to measurements
(:mod:`feedgpu.measure.pinning` measures them on a GPU).

Example::

    costs = CopyCosts()                       # a PCIe 4 desktop GPU, roughly
    times = predict_strategies(4, 64 * 2**20, costs)
    print(best_strategy(4, 64 * 2**20, costs, candidates=FROM_PAGEABLE))
    fit = fit_linear_cost(sizes, seconds)     # measured (bytes, seconds) pairs
    print(fit.cost.latency_s, fit.cost.bytes_per_s / 1e9, "GB/s")
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace

import numpy as np

__all__ = [
    "LinearCost",
    "CopyRange",
    "copy_range",
    "pageable_range",
    "spread_range",
    "range_note",
    "PINNING_SPREAD",
    "PINNING_FROM",
    "CopyCosts",
    "STRATEGIES",
    "FROM_PAGEABLE",
    "strategy_time_s",
    "predict_strategies",
    "best_strategy",
    "pin_then_copy_slowdown",
    "pin_then_copy_limit",
    "training_loop_s",
    "training_loop_range_s",
    "strategy_range_s",
    "CostFit",
    "fit_linear_cost",
    "IN_LOOP_FROM",
    "batch_sized",
]


logger = logging.getLogger(__name__)


def _check_finite(name: str, value: float, *, positive: bool = False) -> None:
    if not math.isfinite(value) or value < 0 or (positive and value == 0):
        what = "> 0" if positive else ">= 0"
        raise ValueError(f"{name} must be a finite number {what}, got {value!r}")


def _check_count(name: str, value: int) -> None:
    if int(value) != value or value < 1:
        raise ValueError(f"{name} must be an integer >= 1, got {value!r}")


@dataclass(frozen=True)
class LinearCost:
    """A cost linear in bytes: ``time_s(nbytes) = latency_s + nbytes / bytes_per_s``.

    Attributes:
        latency_s: seconds paid whatever the size (setting up the copy).
        bytes_per_s: bandwidth, bytes per second (``10e9`` is 10 GB/s).

    Raises:
        ValueError: a negative or infinite latency, or a bandwidth that is not > 0.
    """

    latency_s: float
    bytes_per_s: float

    def __post_init__(self) -> None:
        _check_finite("latency_s", self.latency_s)
        _check_finite("bytes_per_s", self.bytes_per_s, positive=True)

    def time_s(self, nbytes: float) -> float:
        """Seconds to move ``nbytes`` bytes (``nbytes >= 0``)."""
        _check_finite("nbytes", nbytes)
        return self.latency_s + nbytes / self.bytes_per_s


@dataclass(frozen=True)
class CopyRange:
    """A cost that varies from run to run: the fastest and the slowest line it ran at.

    Attributes:
        fast: the line of its fastest readings (the least time).
        slow: the line of its slowest readings (the most time).

    Raises:
        TypeError: an end that is not a :class:`LinearCost`.
        ValueError: ``fast`` slower than ``slow`` for large copies.
    """

    fast: LinearCost
    slow: LinearCost

    def __post_init__(self) -> None:
        if not (isinstance(self.fast, LinearCost) and isinstance(self.slow, LinearCost)):
            raise TypeError(f"a CopyRange's ends are LinearCosts, got {self.fast!r} and {self.slow!r}")
        if self.fast.bytes_per_s < self.slow.bytes_per_s:
            raise ValueError(f"the fast end ({self.fast.bytes_per_s / 1e9:.3g} GB/s) is slower than the slow end "
                             f"({self.slow.bytes_per_s / 1e9:.3g} GB/s)")

    def time_s(self, nbytes: float) -> tuple[float, float]:
        """``(least, most)`` seconds to move ``nbytes`` bytes."""
        return self.fast.time_s(nbytes), self.slow.time_s(nbytes)

    @property
    def spread(self) -> float:
        """The fastest bandwidth over the slowest (1: no spread)."""
        return self.fast.bytes_per_s / self.slow.bytes_per_s


def copy_range(readings: Iterable[tuple[float, float]], latency_s: float, *, smallest: float = 0,
               slowest: Iterable[tuple[float, float]] = ()) -> CopyRange | None:
    """The range of bandwidths ``readings`` ran at: ``(bytes, seconds)``, every reading (not a
    median), of copies of at least ``smallest`` bytes; ``slowest``: more readings that count
    for the slow end only (a copy whose speed bounds this one's from below, such as the
    one-thread host copy that stages a pageable copy). Each end keeps ``latency_s``; its
    bandwidth is the fastest (slowest) a reading reached once that latency is paid.

    Returns:
        A :class:`CopyRange`, or None without a reading of that size.
    """
    def rates(points: Iterable[tuple[float, float]]) -> list[float]:
        return [b / (t - latency_s) for b, t in points if b >= smallest and t > latency_s and b > 0]

    main = rates(readings)
    if not main:
        return None
    low = rates(slowest)
    return CopyRange(LinearCost(latency_s, max(main)), LinearCost(latency_s, min(main + low)))


def pageable_range(in_loop: Iterable[tuple[float, float]], alone: Iterable[tuple[float, float]],
                   latency_s: float = 0.0, *, one_thread: Iterable[tuple[float, float]] = ()) -> CopyRange | None:
    """The range a pageable copy of a batch's size runs in, from every reading of a machine's
    pageable copies, ``(bytes, seconds)``, from :data:`IN_LOOP_FROM` bytes up.

    Its fast end is the fastest copy inside a loop (from fresh sources, as a loader hands
    them over; the copies alone where none was timed in a loop: a sweep that copies one
    source again and again can run from the caches, faster than any loop); its slow end
    the slowest of every pageable copy and of the ``one_thread`` host copies (a pageable
    copy's staging is a host copy on one thread). None without a reading of that size.
    """
    in_loop, alone, one_thread = list(in_loop), list(alone), list(one_thread)
    fast = [(b, t) for b, t in in_loop if b >= IN_LOOP_FROM] or alone
    return copy_range(fast, latency_s, smallest=IN_LOOP_FROM, slowest=in_loop + alone + one_thread)


def spread_range(line: LinearCost, readings: Iterable[tuple[float, Sequence[float]]], *, smallest: float,
                 spread: float) -> CopyRange | None:
    """``line`` widened by its readings' spread from run to run: at each size of at least
    ``smallest`` bytes, how far the slowest and the fastest of its readings
    (``(bytes, [seconds, ...])``) lie from their median; the worst of each, put around the
    line. None where the two together stay within ``spread`` (a point then), or without readings."""
    rows = [(b, list(ts)) for b, ts in readings if b >= smallest and len(ts) >= 2]
    if not rows:
        return None
    medians = [float(np.median(ts)) for _, ts in rows]
    slower = max(max(ts) / m for (_, ts), m in zip(rows, medians))
    faster = max(m / min(ts) for (_, ts), m in zip(rows, medians))
    if slower * faster <= spread:
        return None
    return CopyRange(LinearCost(line.latency_s, line.bytes_per_s * faster),
                     LinearCost(line.latency_s, line.bytes_per_s / slower))


#: Pinning's readings this far apart from run to run (fastest over slowest, at one size)
#: make it a range (:func:`spread_range`); sizes from :data:`PINNING_FROM` up, since
#: smaller ones fit in the CPU's caches and pin faster (the fitted line's business).
PINNING_SPREAD = 1.25
PINNING_FROM = 16 * 2**20


def range_note(measured_s: float, low_s: float, high_s: float) -> str:
    """Whether a measurement fell inside a predicted range, in words, with the range (ms)."""
    span = f"{low_s * 1e3:.3g}-{high_s * 1e3:.3g} ms"
    if low_s <= measured_s <= high_s:
        return f"inside the predicted range {span}"
    side = "above" if measured_s > high_s else "below"
    edge = high_s if measured_s > high_s else low_s
    return (f"outside the predicted range {span}: {measured_s * 1e3:.3g} ms measured, "
            f"{abs(measured_s / edge - 1):.0%} {side} it")


@dataclass(frozen=True)
class CopyCosts:
    """The parameters of the copy model. The defaults are a PCIe 4 desktop GPU, roughly:
    measure your own with :func:`feedgpu.measure.pinning.measure_copy_costs`.

    Attributes:
        pageable: a copy to the device from pageable memory (staged through CUDA's own
            pinned buffer: slower, and the host is busy staging it).
        pinned: a copy to the device from pinned memory (DMA straight from the tensor).
        pinning: ``tensor.pin_memory()``, a copy from pageable into pinned host memory,
            paid by the calling host thread, in the steady state: PyTorch's caching host
            allocator reuses the pinned blocks of earlier pinnings of the same size. (The
            first pinning of a size also pays for new page-locked memory:
            :func:`feedgpu.measure.pinning.measure_first_pin` measures both on a GPU.)
        sync_s: the host's cost of one wait for the device (a blocking ``.to()`` waits
            after every copy; ``torch.cuda.synchronize()`` waits once).
        pageable_in_loop: a pageable copy inside a training loop, where it costs more than
            the same copy measured alone (``None``: the same as ``pageable``). A pageable
            copy is staged by the host: the CUDA driver copies the bytes, chunk by chunk,
            into pinned memory of its own on the calling thread (CUDA's "API
            synchronization behavior": for ``cudaMemcpyAsync``, which PyTorch calls
            whether or not ``non_blocking`` is set, "the driver may synchronize with the
            stream and stage the copy into pinned memory"). Staging is a host copy, so
            its speed is that of reading the source from wherever it lies. A sweep of
            copies copies one source again and again, back to back, and sizes that fit in
            the CPU's caches come out fast (on the H200 machine of
            ``readings/h200-2026-11-26``, 64 MiB sped up from 7.0 to 4.3 ms over eight
            repeats). In a loop each copy first waits for the kernels queued before it,
            and a real loader hands over a fresh batch every step, so the source is read
            from memory: the loops there ran their copies at the bandwidth of a copy too
            large for any cache (512 MiB: 7.6 GB/s), not at the 12 to 16 GB/s of the
            sweep's 16 to 64 MiB. :func:`feedgpu.measure.pinning.measure_copy_costs`
            measures it inside a loop and fits it over batch-sized copies
            (:func:`batch_sized`, from :data:`IN_LOOP_FROM`); a readings folder without
            such copies gives the streaming bandwidth
            (:meth:`feedgpu.readings.Readings.streaming_cost`).
            Pinned copies are read by the GPU's copy engine, not staged: the same in a
            loop as alone.
        pageable_range: the range a pageable copy in a loop runs in (``None``: the
            point :attr:`pageable_in_loop` alone): the fastest and the slowest a machine's
            pageable copies of batch sizes ran at (:meth:`feedgpu.readings.Readings.copy_costs`).
        pinning_range: the same for pinning, where its readings spread (``None``: a point).
    """

    pageable: LinearCost = field(default_factory=lambda: LinearCost(20e-6, 12e9))
    pinned: LinearCost = field(default_factory=lambda: LinearCost(10e-6, 24e9))
    pinning: LinearCost = field(default_factory=lambda: LinearCost(10e-6, 12e9))
    sync_s: float = 5e-6
    pageable_in_loop: LinearCost | None = None
    pageable_range: CopyRange | None = None
    pinning_range: CopyRange | None = None

    def __post_init__(self) -> None:
        for name in ("pageable", "pinned", "pinning"):
            if not isinstance(getattr(self, name), LinearCost):
                raise TypeError(f"{name} must be a LinearCost, got {getattr(self, name)!r}")
        if self.pageable_in_loop is not None and not isinstance(self.pageable_in_loop, LinearCost):
            raise TypeError(f"pageable_in_loop must be a LinearCost or None, got {self.pageable_in_loop!r}")
        for name in ("pageable_range", "pinning_range"):
            if getattr(self, name) is not None and not isinstance(getattr(self, name), CopyRange):
                raise TypeError(f"{name} must be a CopyRange or None, got {getattr(self, name)!r}")
        _check_finite("sync_s", self.sync_s)

    def copy_s(self, nbytes: float, *, pinned: bool) -> float:
        """Seconds the device spends copying ``nbytes`` from pinned or pageable memory, alone."""
        return (self.pinned if pinned else self.pageable).time_s(nbytes)

    def loop_copy_s(self, nbytes: float, *, pinned: bool) -> float:
        """Seconds a copy of ``nbytes`` costs inside a training loop (see :attr:`pageable_in_loop`)."""
        return self.in_loop().copy_s(nbytes, pinned=pinned)

    def in_loop(self) -> "CopyCosts":
        """These costs as a training loop pays them: the pageable copy at :attr:`pageable_in_loop`
        where it is known (the other costs, and the ranges, unchanged)."""
        if self.pageable_in_loop is None:
            return self
        return replace(self, pageable=self.pageable_in_loop, pageable_in_loop=None)

    def loop_copy_range_s(self, nbytes: float, *, pinned: bool) -> tuple[float, float]:
        """``(least, most)`` seconds a copy of ``nbytes`` costs inside a training loop: a
        pinned copy a point, a pageable one its :attr:`pageable_range` where known."""
        if pinned or self.pageable_range is None:
            point = self.loop_copy_s(nbytes, pinned=pinned)
            return point, point
        return self.pageable_range.time_s(nbytes)

    def copy_range_s(self, nbytes: float, *, pinned: bool) -> tuple[float, float]:
        """``(least, most)`` seconds a copy of ``nbytes`` costs alone: a pinned copy a point,
        a pageable one from the fastest of its line alone and its range's fast end (a copy
        alone can run from the caches) to the slowest of the two."""
        point = self.copy_s(nbytes, pinned=pinned)
        if pinned or self.pageable_range is None:
            return point, point
        fast, slow = self.pageable_range.time_s(nbytes)
        return min(point, fast), max(point, slow)

    def at_end(self, end: str) -> "CopyCosts":
        """These costs with every range at one end, ``"fast"`` or ``"slow"``: the pageable
        copies (alone and in a loop) and pinning at that end's line, the rest as they are."""
        if end not in ("fast", "slow"):
            raise ValueError(f"end must be 'fast' or 'slow', got {end!r}")
        changes: dict = {}
        if self.pageable_range is not None:
            line = getattr(self.pageable_range, end)
            changes.update(pageable=line, pageable_in_loop=line if self.pageable_in_loop is not None else None)
        if self.pinning_range is not None:
            changes["pinning"] = getattr(self.pinning_range, end)
        return replace(self, **changes, pageable_range=None, pinning_range=None)

    def pin_s(self, nbytes: float) -> float:
        """Seconds ``tensor.pin_memory()`` takes for a tensor of ``nbytes``."""
        return self.pinning.time_s(nbytes)


#: The six ways to send tensors to the device compared by the PyTorch tutorial "A guide on
#: good usage of non_blocking and pin_memory()": name -> the code it stands for. ``t`` is a
#: pageable tensor; ``pinned_t`` was pinned earlier, somewhere else (by the DataLoader with
#: ``pin_memory=True``: in its pin thread when it has workers), so its pinning is not paid here.
STRATEGIES: dict[str, str] = {
    "pageable": "t.to(device)",
    "pageable_nb": "t.to(device, non_blocking=True)",
    "pin_then_copy": "t.pin_memory().to(device)",
    "pin_then_copy_nb": "t.pin_memory().to(device, non_blocking=True)",
    "pinned": "pinned_t.to(device)",
    "pinned_nb": "pinned_t.to(device, non_blocking=True)",
}

#: The strategies open to a loop whose tensors arrive pageable (the loader does not pin).
FROM_PAGEABLE: tuple[str, ...] = ("pageable", "pageable_nb", "pin_then_copy", "pin_then_copy_nb")


def strategy_time_s(strategy: str, n_tensors: int, tensor_bytes: float,
                    costs: CopyCosts | None = None) -> float:
    """Seconds, on the host's clock, to send ``n_tensors`` tensors of ``tensor_bytes`` each.

    The timed code is the tutorial's: a loop of ``.to()`` calls, followed by one
    ``torch.cuda.synchronize()`` for the ``non_blocking`` strategies (without it the
    copies would not be known to be done). With ``c`` one copy, ``p`` one pinning, ``s``
    one wait (``costs.sync_s``) and ``n`` tensors:

    ==================== =============================================================
    ``pageable``          ``n (c + s)``: every copy waits, then pays a wait
    ``pageable_nb``       ``n c + s``: the host still stages each copy itself,
                          but only synchronises once
    ``pin_then_copy``     ``n (p + c + s)``
    ``pin_then_copy_nb``  ``p + c + (n - 1) max(p, c) + s``: a pipeline; the host pins
                          tensor ``k + 1`` while the device copies tensor ``k``
    ``pinned``            ``n (c + s)``
    ``pinned_nb``         ``n c + s``: the copies queue up back to back
    ==================== =============================================================

    (``c`` is ``costs.pageable`` for the first two, ``costs.pinned`` for the others.)

    Args:
        strategy: a key of :data:`STRATEGIES`.
        n_tensors: tensors sent, one ``.to()`` each (>= 1).
        tensor_bytes: bytes of each tensor (>= 0).
        costs: the model's parameters (default :class:`CopyCosts`).

    Returns:
        Seconds from the first call until the host knows every tensor is on the device.

    Raises:
        KeyError: an unknown strategy (the message lists the known ones).
        ValueError: ``n_tensors`` < 1 or a negative ``tensor_bytes``.
    """
    if strategy not in STRATEGIES:
        raise KeyError(f"unknown strategy {strategy!r}; choose one of {list(STRATEGIES)}")
    _check_count("n_tensors", n_tensors)
    _check_finite("tensor_bytes", tensor_bytes)
    costs = CopyCosts() if costs is None else costs
    n, s = int(n_tensors), costs.sync_s
    c = costs.copy_s(tensor_bytes, pinned=not strategy.startswith("pageable"))
    p = costs.pin_s(tensor_bytes)
    if strategy in ("pageable", "pinned"):
        return n * (c + s)
    if strategy in ("pageable_nb", "pinned_nb"):
        return n * c + s
    if strategy == "pin_then_copy":
        return n * (p + c + s)
    return p + c + (n - 1) * max(p, c) + s  # pin_then_copy_nb


def predict_strategies(n_tensors: int, tensor_bytes: float,
                       costs: CopyCosts | None = None) -> dict[str, float]:
    """:func:`strategy_time_s` of every strategy, in the order of :data:`STRATEGIES`."""
    return {name: strategy_time_s(name, n_tensors, tensor_bytes, costs) for name in STRATEGIES}


def best_strategy(n_tensors: int, tensor_bytes: float, costs: CopyCosts | None = None, *,
                  candidates: Iterable[str] | None = None) -> str:
    """The fastest of ``candidates`` (default: all six) by :func:`strategy_time_s`.

    The two ``pinned`` strategies always win when allowed, since their pinning was paid
    elsewhere: pass ``candidates=FROM_PAGEABLE`` to ask what a loop whose tensors arrive
    pageable should do. Ties go to the candidate listed first.

    Raises:
        ValueError: no candidates. KeyError: an unknown one.
    """
    names = list(STRATEGIES if candidates is None else candidates)
    if not names:
        raise ValueError("candidates is empty: give at least one key of STRATEGIES")
    times = {name: strategy_time_s(name, n_tensors, tensor_bytes, costs) for name in names}
    return min(names, key=times.__getitem__)


def pin_then_copy_slowdown(tensor_bytes: float, costs: CopyCosts | None = None,
                           n_tensors: int = 1) -> float:
    """How many times slower ``t.pin_memory().to(device, non_blocking=True)`` is than a
    plain ``t.to(device)``: ``strategy_time_s("pin_then_copy_nb") / strategy_time_s("pageable")``.

    For one tensor it is ``(p + c_pinned + s) / (c_pageable + s)``; for a large one the
    latencies vanish and it tends to :func:`pin_then_copy_limit`. That is exactly 2 when
    pinning and both copies run at the same bandwidth (the tutorial says "can be up to
    twice as slow"), less when pinned copies are much faster than pageable ones, and more
    than 2 exactly when ``p > 2 c_pageable - c_pinned`` (pinning costs more than two pageable
    copies less a pinned one): the model sets no bound of 2.
    With many tensors the pipeline hides part of the pinning, so the slowdown shrinks.
    """
    plain = strategy_time_s("pageable", n_tensors, tensor_bytes, costs)
    return strategy_time_s("pin_then_copy_nb", n_tensors, tensor_bytes, costs) / plain


def pin_then_copy_limit(costs: CopyCosts | None = None) -> float:
    """:func:`pin_then_copy_slowdown` of one tensor so large that the latencies vanish:
    ``(p + c_pinned) / c_pageable`` per byte, ``pageable_bw / pinning_bw + pageable_bw / pinned_bw``.
    """
    costs = CopyCosts() if costs is None else costs
    pageable_bw = costs.pageable.bytes_per_s
    return pageable_bw / costs.pinning.bytes_per_s + pageable_bw / costs.pinned.bytes_per_s


def training_loop_s(n_batches: int, copy_s: float, compute_s: float, *, overlapped: bool) -> float:
    """Seconds for ``n_batches`` of copy-then-compute, with or without overlap.

    * not overlapped: ``n (copy + compute)``: each copy waits for the previous compute;
    * overlapped (pinned batches, ``non_blocking`` copies on a stream of their own, the
      next batch's copy issued before this batch's compute):
      ``n max(copy, compute) + min(copy, compute)``: the slower engine sets the pace,
      and the first copy (or the last compute) cannot be hidden.

    Waits for the device (``sync_s``) are left out; :func:`feedgpu.models.device.simulate_training`
    counts them.

    Raises:
        ValueError: ``n_batches`` < 1 or a negative time.
    """
    _check_count("n_batches", n_batches)
    _check_finite("copy_s", copy_s)
    _check_finite("compute_s", compute_s)
    n = int(n_batches)
    if not overlapped:
        return n * (copy_s + compute_s)
    return n * max(copy_s, compute_s) + min(copy_s, compute_s)


def training_loop_range_s(n_batches: int, nbytes: float, compute_s: float, costs: CopyCosts, *, pinned: bool,
                          overlapped: bool) -> tuple[float, float]:
    """``(least, most)`` seconds of :func:`training_loop_s` with the copy in a loop at each
    end of its range (:meth:`CopyCosts.loop_copy_range_s`): a point for pinned batches."""
    fast, slow = costs.loop_copy_range_s(nbytes, pinned=pinned)
    return (training_loop_s(n_batches, fast, compute_s, overlapped=overlapped),
            training_loop_s(n_batches, slow, compute_s, overlapped=overlapped))


def strategy_range_s(strategy: str, n_tensors: int, tensor_bytes: float,
                     costs: CopyCosts | None = None) -> tuple[float, float]:
    """``(least, most)`` seconds of :func:`strategy_time_s`, the ranges of ``costs`` at each
    end (:meth:`CopyCosts.at_end`): a point where the strategy meets no range."""
    costs = CopyCosts() if costs is None else costs
    return (strategy_time_s(strategy, n_tensors, tensor_bytes, costs.at_end("fast")),
            strategy_time_s(strategy, n_tensors, tensor_bytes, costs.at_end("slow")))


#: The smallest copy that the pageable copy in a loop is fitted from (4 MiB): a batch's
#: size. Small copies behave otherwise in a loop (the driver can stage a few hundred KiB
#: and return before the copy engine has sent it, so they can look faster in a loop than
#: alone), and a line fitted over them all, on relative errors, misses the batches it is for.
IN_LOOP_FROM = 4 * 2**20


def batch_sized(points: Sequence[tuple[int, float]], smallest: int = IN_LOOP_FROM) -> list[tuple[int, float]]:
    """The ``(bytes, seconds)`` points of copies of at least ``smallest`` bytes (all of them
    when fewer than two are that large), to fit a copy inside a loop with."""
    large = [(b, t) for b, t in points if b >= smallest]
    return large if len({b for b, _ in large}) >= 2 else list(points)


@dataclass(frozen=True)
class CostFit:
    """What :func:`fit_linear_cost` found.

    Attributes:
        cost: the fitted latency and bandwidth.
        nbytes: the sizes fitted, as given.
        seconds: the times fitted, as given.
        residuals_s: per point, measured minus fitted seconds.
        relative: whether the fit minimised relative (True) or absolute errors.
    """

    cost: LinearCost
    nbytes: tuple[float, ...]
    seconds: tuple[float, ...]
    residuals_s: tuple[float, ...]
    relative: bool

    @property
    def relative_residuals(self) -> tuple[float, ...]:
        """Per point, (measured - fitted) / measured."""
        return tuple(r / t for r, t in zip(self.residuals_s, self.seconds))


def fit_linear_cost(nbytes: Sequence[float], seconds: Sequence[float], *,
                    relative: bool = True) -> CostFit:
    """Fit ``seconds = latency_s + nbytes / bytes_per_s`` by least squares (numpy).

    Timings over sizes from kilobytes to a gigabyte span many orders of magnitude, and
    their errors grow with the time, so by default each point is weighted by
    ``1 / seconds``: the fit minimises the *relative* errors, and the small sizes (which
    fix the latency) count as much as the large ones (which fix the bandwidth). Pass
    ``relative=False`` for ordinary least squares. A latency below zero has no meaning;
    when the unconstrained fit gives one (noise at small sizes), the line is refitted
    through the origin, which is the least-squares answer under ``latency_s >= 0``.

    Args:
        nbytes: the sizes, in bytes (at least two different ones).
        seconds: the measured time of each, > 0.

    Returns:
        A :class:`CostFit`.

    Raises:
        ValueError: lengths differ, fewer than two distinct sizes, a time that is not
            > 0 and finite, or times that do not grow with size (no bandwidth to fit).
    """
    x = np.asarray(nbytes, dtype=float).ravel()
    y = np.asarray(seconds, dtype=float).ravel()
    if x.shape != y.shape:
        raise ValueError(f"{x.size} sizes but {y.size} times: give one time per size")
    if not (np.all(np.isfinite(x)) and np.all(x >= 0)):
        raise ValueError(f"sizes must be finite numbers >= 0, got {list(x)}")
    if not (np.all(np.isfinite(y)) and np.all(y > 0)):
        raise ValueError(f"times must be finite numbers > 0, got {list(y)}")
    if np.unique(x).size < 2:
        raise ValueError(f"need at least two different sizes to fit a latency and a bandwidth, got {list(x)}")
    w = 1.0 / y if relative else np.ones_like(y)
    design = np.column_stack([np.ones_like(x), x]) * w[:, None]
    (latency, per_byte), *_ = np.linalg.lstsq(design, y * w, rcond=None)
    if latency < 0:
        logger.debug("fit: latency %.3g s < 0, refitting through the origin", latency)
        latency = 0.0
        per_byte = float(np.sum(w * w * x * y) / np.sum(w * w * x * x))
    if not per_byte > 0:
        raise ValueError("the times do not grow with the size, so no bandwidth can be fitted: "
                         f"sizes {list(x)}, times {list(y)}; measure over a wider range of sizes")
    cost = LinearCost(float(latency), 1.0 / float(per_byte))
    residuals = tuple(float(t - cost.time_s(b)) for b, t in zip(x, y))
    return CostFit(cost, tuple(float(v) for v in x), tuple(float(v) for v in y), residuals, relative)
