"""A simulated GPU with a copy engine and a compute engine, on a virtual clock.

Most of the course runs without a GPU, yet what ``pin_memory`` and ``non_blocking`` do is
a matter of *who waits for whom*: the host (the Python thread), the copy engine (the
DMA that moves bytes to the device) and the compute engine (the kernels). This module
plays those rules out, deterministically and instantly (no sleeps: the clocks are
numbers), with the durations of :class:`feedgpu.models.copies.CopyCosts`::

    host:     [pin b1][wait .................]        <- a blocking copy makes it wait
    copy:             [copy b1 ]      [copy b2 ]
    compute:                   [compute b1 ]

The rules, the CUDA ones simplified:

* Operations go on *streams* (any names). On one stream they run in the order they were
  enqueued; ops on different streams may run at the same time, on different engines.
  ``after=`` makes an op wait for others (``stream.wait_stream`` / events in PyTorch).
* Each engine runs one op at a time, in the order they were enqueued.
* Enqueuing costs the host nothing; kernels never make it wait.
* A copy from **pinned** memory goes on the copy engine. ``non_blocking=True``: the host
  goes on at once, so the copy overlaps with what the host does next; on its stream it
  still starts only after what was enqueued there before it, so it overlaps kernels only
  from another stream. Blocking: the host waits for the copy's end (so for everything
  enqueued before it on its stream: PyTorch's blocking copy is ``cudaMemcpyAsync`` and
  then a synchronisation of the stream, ``copy_kernel_cuda`` in ``aten/src/ATen/native/cuda/Copy.cu``),
  then pays one wait (``sync_s``).
* A copy from **pageable** memory is staged by the host, chunk by chunk, through a pinned
  buffer. PyTorch calls ``cudaMemcpyAsync`` for it too, and CUDA's "API synchronization
  behavior" page says of the asynchronous copies that where pageable memory must first be
  staged to pinned memory, the driver may synchronize with the stream and stage the copy
  into pinned memory. Here it does both: the copy waits for all earlier device work (so it
  never overlaps with a kernel), and the host is busy staging until the copy ends, even
  with ``non_blocking=True`` (then without the extra ``sync_s``). Copies overlap with
  kernels only from page-locked memory (CUDA's programming guide). A loop's copies cost
  :meth:`feedgpu.models.copies.CopyCosts.loop_copy_s` (:func:`simulate_training`).
* :meth:`SimDevice.synchronize` makes the host wait for everything, plus one ``sync_s``.

Reading the host clock right after a ``non_blocking`` copy is the classic timing
mistake: it shows how long it took to *enqueue* the copy, not to do it
(:func:`copy_timing_readings`).

Example::

    run = simulate_training(8, 64 * 2**20, 0.004, pinned=True, non_blocking=True, prefetch=True)
    print(run.total_s, run.overlap_s())
    plot_device_timeline(run.timeline)      # from feedgpu.plots
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import NamedTuple

from .copies import STRATEGIES, CopyCosts

__all__ = [
    "ENGINES",
    "Span",
    "SimRun",
    "SimDevice",
    "simulate_strategy",
    "simulate_training",
    "TimingReadings",
    "copy_timing_readings",
]


#: The engines of a timeline, top to bottom: the host thread, the copy engine, the kernels.
ENGINES: tuple[str, ...] = ("host", "copy", "compute")


class Span(NamedTuple):
    """One operation on one engine: ``(engine, op, start_s, end_s)``.

    ``engine`` is one of :data:`ENGINES`; ``op`` a label such as ``"copy b3"``; on the host,
    ``"pin ..."`` and ``"stage ..."`` (a pageable copy) are work, and ``"wait ..."`` and
    ``"synchronize"`` are time spent waiting for the device.
    """

    engine: str
    op: str
    start_s: float
    end_s: float


def _check_time(name: str, value: float) -> None:
    if not (math.isfinite(value) and value >= 0):
        raise ValueError(f"{name} must be a finite number >= 0, got {value!r}")


def _busy_intervals(timeline: Iterable[Span], engine: str) -> list[tuple[float, float]]:
    """The engine's spans as sorted, merged (start, end) intervals."""
    merged: list[tuple[float, float]] = []
    for start, end in sorted((s.start_s, s.end_s) for s in timeline if s.engine == engine):
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((start, end))
    return merged


@dataclass
class SimRun:
    """A finished simulation.

    Attributes:
        timeline: every span, in the order the ops were enqueued.
        total_s: the host's clock at the end (after the last wait for the device).
    """

    timeline: list[Span]
    total_s: float

    def busy_s(self, engine: str) -> float:
        """Seconds ``engine`` was busy (overlapping spans counted once)."""
        return sum(end - start for start, end in _busy_intervals(self.timeline, engine))

    def overlap_s(self, a: str = "copy", b: str = "compute") -> float:
        """Seconds engines ``a`` and ``b`` were busy at the same time."""
        total = 0.0
        for a0, a1 in _busy_intervals(self.timeline, a):
            for b0, b1 in _busy_intervals(self.timeline, b):
                total += max(0.0, min(a1, b1) - max(a0, b0))
        return total


@dataclass
class SimDevice:
    """A device with one copy engine and one compute engine, driven by one host thread.

    Every method enqueues at the host's current time (``host_s``) and returns the
    :class:`Span` of the op, which later ops can wait for with ``after=``. See the module
    docstring for the rules.

    Attributes:
        costs: durations of copies, pinning and waits.
        host_s: the host's clock, seconds since the start.
        timeline: the spans so far, in the order they were enqueued.
    """

    costs: CopyCosts = field(default_factory=CopyCosts)
    host_s: float = 0.0
    timeline: list[Span] = field(default_factory=list)
    _engine_free: dict[str, float] = field(
        default_factory=lambda: {"copy": 0.0, "compute": 0.0}, init=False, repr=False)
    _stream_free: dict[str, float] = field(default_factory=dict, init=False, repr=False)

    # ------------------------------------------------------------------ helpers
    def _device_idle_s(self) -> float:
        """When all device work enqueued so far is done."""
        return max(self._engine_free.values())

    def _host_until(self, end_s: float, op: str) -> None:
        """The host waits until ``end_s`` (a span only if it really waits)."""
        if end_s > self.host_s:
            self.timeline.append(Span("host", op, self.host_s, end_s))
            self.host_s = end_s

    def _run(self, engine: str, op: str, duration_s: float, stream: str,
             after: Iterable[Span], not_before: float) -> Span:
        start = max([self.host_s, not_before, self._engine_free[engine],
                     self._stream_free.get(stream, 0.0)] + [s.end_s for s in after])
        span = Span(engine, op, start, start + duration_s)
        self._engine_free[engine] = span.end_s
        self._stream_free[stream] = span.end_s
        self.timeline.append(span)
        return span

    # ------------------------------------------------------------------ the API
    def host_work(self, duration_s: float, op: str = "host work") -> Span:
        """The host computes for ``duration_s`` (Python, ``next(loader)``, ...)."""
        _check_time("duration_s", duration_s)
        span = Span("host", op, self.host_s, self.host_s + duration_s)
        self.timeline.append(span)
        self.host_s = span.end_s
        return span

    def pin(self, nbytes: float, op: str = "pin") -> Span:
        """``tensor.pin_memory()`` of ``nbytes``: host work of ``costs.pin_s(nbytes)``."""
        return self.host_work(self.costs.pin_s(nbytes), op)

    def copy(self, nbytes: float, *, pinned: bool, non_blocking: bool = False,
             stream: str = "main", after: Iterable[Span] = (), op: str = "copy") -> Span:
        """``tensor.to(device, non_blocking=...)`` of ``nbytes`` from pinned or pageable memory.

        Returns the copy's span on the copy engine; ``host_s`` has moved on by the rules
        of the module docstring.
        """
        duration = self.costs.copy_s(nbytes, pinned=pinned)
        after = tuple(after)
        if pinned:
            span = self._run("copy", op, duration, stream, after, not_before=0.0)
            if not non_blocking:
                self._host_until(span.end_s + self.costs.sync_s, f"wait {op}")
            return span
        span = self._run("copy", op, duration, stream, after, not_before=self._device_idle_s())
        self._host_until(span.start_s, f"wait before {op}")  # the device finishes earlier work first
        self._host_until(span.end_s, f"stage {op}")  # host work: staging every chunk
        if not non_blocking:
            self._host_until(span.end_s + self.costs.sync_s, f"wait {op}")
        return span

    def compute(self, duration_s: float, *, stream: str = "main", after: Iterable[Span] = (),
                op: str = "compute") -> Span:
        """Enqueue a kernel of ``duration_s`` on the compute engine; the host goes on at once."""
        _check_time("duration_s", duration_s)
        return self._run("compute", op, duration_s, stream, tuple(after), not_before=0.0)

    def wait(self, span: Span, op: str | None = None) -> float:
        """The host waits for ``span`` to end (``event.synchronize()``), plus one ``sync_s``;
        returns ``host_s``."""
        self._host_until(max(self.host_s, span.end_s) + self.costs.sync_s,
                         op or f"wait {span.op}")
        return self.host_s

    def synchronize(self) -> float:
        """``torch.cuda.synchronize()``: the host waits until the device is idle, plus one
        ``sync_s``; returns ``host_s``, the time everything is known to be done."""
        self._host_until(max(self.host_s, self._device_idle_s()) + self.costs.sync_s, "synchronize")
        return self.host_s

    def result(self) -> SimRun:
        """The timeline so far and the host's clock, as a :class:`SimRun`."""
        return SimRun(list(self.timeline), self.host_s)


def simulate_strategy(strategy: str, n_tensors: int, tensor_bytes: float,
                      costs: CopyCosts | None = None) -> SimRun:
    """Play one of :data:`feedgpu.models.copies.STRATEGIES` out: ``n_tensors`` ``.to()`` calls,
    then ``synchronize()`` for the ``non_blocking`` ones, as the tutorial times them.

    ``total_s`` equals :func:`feedgpu.models.copies.strategy_time_s` (the formula and the
    simulation are two routes to the same rules).

    Raises:
        KeyError: an unknown strategy. ValueError: ``n_tensors`` < 1.
    """
    if strategy not in STRATEGIES:
        raise KeyError(f"unknown strategy {strategy!r}; choose one of {list(STRATEGIES)}")
    if int(n_tensors) != n_tensors or n_tensors < 1:
        raise ValueError(f"n_tensors must be an integer >= 1, got {n_tensors!r}")
    dev = SimDevice(CopyCosts() if costs is None else costs)
    non_blocking = strategy.endswith("_nb")
    for k in range(int(n_tensors)):
        if strategy.startswith("pin_then_copy"):
            dev.pin(tensor_bytes, op=f"pin t{k}")
        dev.copy(tensor_bytes, pinned=not strategy.startswith("pageable"),
                 non_blocking=non_blocking, op=f"copy t{k}")
    if non_blocking:
        dev.synchronize()
    return dev.result()


def simulate_training(n_batches: int, batch_bytes: float, compute_s: float,
                      costs: CopyCosts | None = None, *, pinned: bool = False,
                      non_blocking: bool = False, prefetch: bool = False) -> SimRun:
    """A training loop of ``n_batches``: copy a batch to the device, compute on it.

    * ``pinned``: the batches arrive pinned, their pinning paid off the loop's clock (by
      the pin thread of a ``DataLoader(pin_memory=True)`` with workers; with
      ``num_workers=0`` the main thread would pin inside ``next()``, on the loop's clock,
      which this loop leaves out); else pageable.
    * ``non_blocking``: ``.to(device, non_blocking=True)``.
    * ``prefetch``: copies go on a stream of their own and the next batch's copy is
      issued before this batch's compute (as NVIDIA's ``data_prefetcher`` does); without
      it, copies and kernels share one stream, so a copy waits for the previous compute.

    The loop ends with ``synchronize()``. With ``c`` the copy and ``k`` the compute:
    without overlap the total is ``n (c + k)`` plus the waits; pinned, ``non_blocking``
    and prefetched, it is ``n max(c, k) + min(c, k) + sync_s``
    (:func:`feedgpu.models.copies.training_loop_s`). Pageable batches never overlap.

    Raises:
        ValueError: ``n_batches`` < 1, or a negative size or time.
    """
    if int(n_batches) != n_batches or n_batches < 1:
        raise ValueError(f"n_batches must be an integer >= 1, got {n_batches!r}")
    _check_time("batch_bytes", batch_bytes)
    _check_time("compute_s", compute_s)
    # a loop's copies: a pageable one costs what it costs in a loop (CopyCosts.pageable_in_loop)
    dev = SimDevice((CopyCosts() if costs is None else costs).in_loop())
    n = int(n_batches)

    def load(k: int) -> Span:
        return dev.copy(batch_bytes, pinned=pinned, non_blocking=non_blocking,
                        stream="copy" if prefetch else "main", op=f"copy b{k}")

    if prefetch:
        ahead = load(0)
        for k in range(n):
            current = ahead
            if k + 1 < n:
                ahead = load(k + 1)
            dev.compute(compute_s, stream="main", after=[current], op=f"compute b{k}")
    else:
        for k in range(n):
            dev.compute(compute_s, stream="main", after=[load(k)], op=f"compute b{k}")
    dev.synchronize()
    return dev.result()


class TimingReadings(NamedTuple):
    """Two readings of the host's clock around one copy.

    Attributes:
        unsynchronised_s: right after ``.to()`` returns: the classic mistake, which for
            a ``non_blocking`` copy times only the enqueuing.
        synchronised_s: after ``torch.cuda.synchronize()``: the copy really done.
    """

    unsynchronised_s: float
    synchronised_s: float


def copy_timing_readings(nbytes: float, costs: CopyCosts | None = None, *,
                         pinned: bool = True, non_blocking: bool = True) -> TimingReadings:
    """Time one copy of ``nbytes`` on the simulated device, both ways.

    From pinned memory with ``non_blocking=True`` the unsynchronised reading is 0 (the
    host only enqueued the copy) while the copy takes ``costs.copy_s(nbytes, pinned=True)``;
    from pageable memory, or blocking, the two readings nearly agree.
    """
    dev = SimDevice(CopyCosts() if costs is None else costs)
    dev.copy(nbytes, pinned=pinned, non_blocking=non_blocking)
    unsynchronised = dev.host_s
    return TimingReadings(unsynchronised, dev.synchronize())
