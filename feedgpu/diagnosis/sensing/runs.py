"""One measured run of a loader: the course's timing harness on a bounded sample, plus CPU and memory.

A run is :func:`feedgpu.measure.timing.time_loader` over a loader that yields a fixed
sample of batches (:func:`~feedgpu.diagnosis.sensing.cloning.sampled_loader`) and stops early at
a deadline (:class:`Bounded`). Around the timed batches it reads, once at their start and
once at their end:

* the CPU time of this process and of the loader's workers (psutil), and the machine's
  idle CPU time: who computes, and whether any core is left;
* on the first pass, the memory of each worker (USS, with
  :class:`feedgpu.measure.memory.MemoryProbe`): what a worker adds while it reads items;
* for every batch, the CPU time the main thread spends inside ``next()``: receiving and
  unpickling a worker's batch (or loading it, with 0 workers).

The readings are taken in untimed moments (after the last warm-up batch, after the last
timed step), so they do not slow the batches the harness times.
"""

from __future__ import annotations

import logging
import math
import os
import time
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import psutil
from torch.utils.data import DataLoader

from ...measure.memory import MemoryProbe, available_kinds, process_roles, summarize, worker_growth_mb
from ...measure.timing import LoaderTiming, shutdown_workers, time_loader
from .io_counters import delay_accounting, io_wait_s, read_chars
from .threads import busy_threads, thread_cpu_s
from ..evidence import MemoryGrowth
from .cloning import sampled_loader

__all__ = ["Snapshot", "MemoryGrowth", "Run", "Bounded", "measure_run", "quiet_loader_warnings", "MIN_TIMED", "min_timed"]

logger = logging.getLogger(__name__)

#: The fewest timed batches a run goes on to past its soft deadline, and at least one a
#: worker: fewer can be one burst (workers that share a resource, or start together,
#: finish their batches together and hand them over in a row), and no point for the model.
MIN_TIMED = 4


def min_timed(num_workers: int) -> int:
    """The fewest timed batches a run of ``num_workers`` workers is a point with: two rounds
    of its workers, at least :data:`MIN_TIMED` (one round can be a burst of batches its
    workers finished together: 4 timed batches of 4 workers measured 12.4 ms a batch where
    the loop ran 37 ms, on 2 cores)."""
    return max(MIN_TIMED, 2 * num_workers)


@contextmanager
def quiet_loader_warnings() -> Iterator[None]:
    """Silence two warnings of DataLoader that the diagnosis reports in its own words.

    ``check_worker_number_rationality`` warns when a loader has more workers than its
    suggested maximum (a worker count the diagnosis tries on purpose), and an iterator warns
    that ``pin_memory`` has no effect without an accelerator (the report says so).
    """
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r"This DataLoader will create \d+ worker processes")
        warnings.filterwarnings("ignore", message=r"'pin_memory' argument is set as true but no accelerator")
        yield


def _cpu_s(pids: list[int]) -> float:
    total = 0.0
    for pid in pids:
        try:
            times = psutil.Process(pid).cpu_times()
        except (psutil.NoSuchProcess, psutil.ZombieProcess, psutil.AccessDenied):
            continue
        total += times.user + times.system
    return total


@dataclass
class Snapshot:
    """CPU counters at one moment: wall clock, this process, the workers (and each of their
    threads, :func:`~feedgpu.diagnosis.sensing.threads.thread_cpu_s`), the machine's idle."""

    wall_s: float
    main_cpu_s: float
    workers_cpu_s: float
    idle_s: float
    workers: list[int]
    threads: dict[int, dict[int, float]] = field(default_factory=dict)
    reads: dict[int, int | None] = field(default_factory=dict)
    io_waits: dict[int, float | None] = field(default_factory=dict)

    @classmethod
    def take(cls, workers: list[int]) -> Snapshot:
        counted = delay_accounting()
        return cls(time.perf_counter(), _cpu_s([os.getpid()]), _cpu_s(workers), psutil.cpu_times().idle, workers,
                   {pid: thread_cpu_s(pid) for pid in workers}, {pid: read_chars(pid) for pid in workers},
                   {pid: io_wait_s(pid, counted) for pid in workers})


class Bounded:
    """A re-iterable over ``loader`` that stops after ``batches`` batches, or at a deadline.

    ``soft_deadline`` stops a pass once it has ``min_batches`` (enough for the harness);
    ``hard_deadline`` stops it whatever it has. A pass in progress cannot be interrupted
    inside a ``next()``: a single slow batch may run past a deadline.

    It has the attributes :func:`~feedgpu.measure.timing.time_loader` reads
    (``batch_size``, ``num_workers``, ``persistent_workers``), and its passes stop their
    workers through ``_shutdown_workers`` (what ``shutdown_workers`` calls).
    """

    def __init__(self, loader: DataLoader, batches: int | None, *, warmup: int, soft_deadline: float,
                 hard_deadline: float, min_batches: int, memory: bool = False,
                 restore: Callable[[Any], Any] | None = None) -> None:
        self.loader = loader
        self.batches = batches
        self.warmup = warmup
        self.soft_deadline = soft_deadline
        self.hard_deadline = hard_deadline
        self.min_batches = min_batches
        self.memory = memory
        self.restore = restore
        self.batch_size = loader.batch_size
        self.num_workers = loader.num_workers
        self.persistent_workers = loader.persistent_workers
        self.passes: list[_Pass] = []

    def __iter__(self) -> _Pass:
        run = _Pass(self, first=not self.passes)
        self.passes.append(run)
        return run


class _Pass:
    """One pass of :class:`Bounded`: counts batches, takes the readings, stops on time."""

    def __init__(self, bounded: Bounded, first: bool) -> None:
        self.bounded = bounded
        self.first = first
        self.count = 0
        self.next_cpu_s: list[float] = []
        self.stopped_early = False
        self.ran_out = False
        self.start: Snapshot | None = None
        self.end: Snapshot | None = None
        self.probe: MemoryProbe | None = None
        self.memory_reason: str | None = None
        self._before = set(process_roles())
        self._inner: Iterator[Any] | None = iter(bounded.loader)

    def __iter__(self) -> _Pass:
        return self

    def _workers(self) -> list[int]:
        return sorted(pid for pid, role in process_roles().items() if role == "worker" and pid not in self._before)

    def _finish(self) -> None:
        if self.start is not None and self.end is None:
            self.end = Snapshot.take(self.start.workers)
            if self.probe is not None:
                self.probe.sample()

    def __next__(self) -> Any:
        b = self.bounded
        now = time.perf_counter()
        done = b.batches is not None and self.count >= b.batches
        late = now >= b.hard_deadline or (now >= b.soft_deadline and self.count >= b.min_batches)
        if done or late:
            self.stopped_early = late and not done
            self._finish()
            raise StopIteration
        cpu = time.thread_time()
        try:
            batch = next(self._inner)
        except StopIteration:
            self.ran_out = True
            self._finish()
            raise
        self.next_cpu_s.append(time.thread_time() - cpu)
        self.count += 1
        if self.count == b.warmup + 1:  # the last untimed batch: read where the timed ones start
            workers = self._workers()
            if self.first and b.memory and workers:
                if "uss" in available_kinds():
                    self.probe = MemoryProbe(kinds=("uss",))
                    self.probe.sample()
                else:
                    self.memory_reason = "USS cannot be read on this platform"
            self.start = Snapshot.take(workers)
        if b.restore is not None:
            batch = b.restore(batch)
        return batch

    def _shutdown_workers(self) -> None:
        if self._inner is not None:
            shutdown_workers(self._inner)


@dataclass
class Run:
    """One measured run of a loader setting.

    Attributes:
        label: what was run (``"baseline"``, ``"num_workers=3"``, ...).
        num_workers: the run's worker count.
        timing: what the harness measured (None when the run could not be measured).
        reason: why not measured, or None.
        cpu: ``{"main_next_s", "main_per_s", "workers_per_s", "idle_share", "worker_threads"}``:
            the main thread's CPU inside ``next()`` per timed batch, this process's and the
            workers' CPU seconds per second of the timed batches (all threads, all workers),
            the machine's idle share of its cores then, the bytes the workers read per second
            (``workers_read_per_s``, :mod:`~feedgpu.diagnosis.sensing.io_counters`), the share of their time the workers
            waited for block I/O (``workers_io_wait_share``, where the kernel counts it), and the busy threads of a worker
            (:func:`~feedgpu.diagnosis.sensing.threads.busy_threads`, the workers' mean; NaN where
            they cannot be read). Empty when not measured.
        memory: each worker's USS growth over the timed batches (first pass), when asked.
        busy_s: seconds the step kept the (simulated or real) accelerator busy, timed batches.
        gpu_busy_s: CUDA device seconds between the events around the timed steps, or None.
        stopped_early: the run reached its deadline before its planned batches.
    """

    label: str
    num_workers: int
    timing: LoaderTiming | None
    reason: str | None = None
    cpu: dict[str, float] = field(default_factory=dict)
    memory: MemoryGrowth | None = None
    busy_s: float = math.nan
    gpu_busy_s: float | None = None
    stopped_early: bool = False

    @property
    def measured(self) -> bool:
        return self.timing is not None

    @property
    def s_per_batch(self) -> float:
        return self.timing.mean_s_per_batch if self.timing else math.nan

    @property
    def wait_share(self) -> float:
        return self.timing.wait_fraction if self.timing else math.nan

    @property
    def wait_s(self) -> float:
        if not self.timing:
            return math.nan
        return sum(self.timing.waits_s[0]) / len(self.timing.waits_s[0])

    @property
    def step_s(self) -> float:
        if not self.timing:
            return math.nan
        return sum(self.timing.steps_s[0]) / len(self.timing.steps_s[0])

    @property
    def timed_wall_s(self) -> float:
        return self.timing.s_per_batch[0] * self.timing.n_batches[0] if self.timing else math.nan

    @property
    def busy_share(self) -> float:
        """Busy seconds of the accelerator over the wall time of the timed batches."""
        wall = self.timed_wall_s
        return self.busy_s / wall if wall > 0 else math.nan


def _cpu_rates(start: Snapshot, end: Snapshot, next_cpu: list[float], cores: int) -> dict[str, float]:
    wall = max(end.wall_s - start.wall_s, 1e-9)
    threads = [busy_threads(start.threads.get(pid, {}), after, wall) for pid, after in end.threads.items() if after]
    reads = [end.reads[pid] - start.reads[pid] for pid in end.reads
             if end.reads[pid] is not None and start.reads.get(pid) is not None]
    waits = [end.io_waits[pid] - start.io_waits[pid] for pid in end.io_waits
             if end.io_waits[pid] is not None and start.io_waits.get(pid) is not None]
    return {
        "workers_read_per_s": sum(reads) / wall if reads else math.nan,
        "workers_io_wait_share": min(max(sum(waits) / (wall * len(waits)), 0.0), 1.0) if waits else math.nan,
        "worker_threads": sum(threads) / len(threads) if threads else math.nan,
        "main_next_s": sum(next_cpu) / len(next_cpu) if next_cpu else math.nan,
        "main_per_s": (end.main_cpu_s - start.main_cpu_s) / wall,
        "workers_per_s": (end.workers_cpu_s - start.workers_cpu_s) / wall,
        "idle_share": min(max((end.idle_s - start.idle_s) / (wall * cores), 0.0), 1.0),
    }


def _memory(run: _Pass, batch_size: int, num_workers: int) -> MemoryGrowth | None:
    if run.memory_reason is not None:
        return MemoryGrowth([], 0.0, run.memory_reason)
    if run.probe is None:
        return None
    table = run.probe.table()
    summary = summarize(table, "uss")  # one row per process: growth_mb = last - first sample
    workers = summary[(summary["role"] == "worker") & (summary["samples"] >= 2)]
    if workers.empty:
        return MemoryGrowth([], 0.0, "the workers ended before their memory could be read")
    # a worker's USS can fall (it freed what it had allocated before the first sample): growth is
    # what it added, never below zero, as the bench counts a worker's own pages
    growth = [max(float(g), 0.0) for g in workers["growth_mb"]]
    logger.debug("workers' USS growth %.2f MB in all", worker_growth_mb(table))
    items = (run.count - run.bounded.warmup - 1) * batch_size / max(num_workers, 1)
    return MemoryGrowth(growth, items)


def measure_run(loader: DataLoader, step: Callable[[Any], Any], *, label: str, batches: int, warmup: int,
                soft_deadline: float, hard_deadline: float, cores: int, repeats: int = 1, memory: bool = False,
                restore: Callable[[Any], Any] | None = None,
                gpu_busy: Callable[[int], float | None] | None = None, **changes: Any) -> Run:
    """Time ``batches`` batches of the sample (``1 + warmup`` of them untimed) with ``step``.

    The loop runs as the user's would: the harness's clock is plain ``time.perf_counter``
    (``time_loader(..., synchronize=False)``), never ``torch.cuda.synchronize()`` per step,
    so a step that queues its GPU work asynchronously overlaps it with the loading, as in
    training. Its step time is then the host's part (launching); the device's part is
    ``gpu_busy``, read from CUDA events once the run is over.

    Args:
        loader: the user's loader; the run reads a sampled clone of it with ``changes``.
        step: called on every batch (a simulated accelerator or the user's step).
        label: the run's name in the report.
        batches: batches per pass, the first ``1 + warmup`` untimed.
        warmup: untimed batches after the first (as ``time_loader``'s).
        soft_deadline, hard_deadline: ``time.perf_counter()`` values (see :class:`Bounded`).
        cores: the usable cores (for the idle share).
        repeats: passes (``time_loader``'s repeats); readings come from the first.
        memory: read the workers' USS at the start and the end of the timed batches.
        restore: applied to every batch before the step (see :mod:`~feedgpu.diagnosis.handover_fix`).
        gpu_busy: returns the device seconds of the steps from a given call on; called once,
            after the timed loop (it may synchronise the device then).
        **changes: the settings changed from the user's loader.

    Returns:
        A :class:`Run`; not measured (``timing`` None, with the reason) when the deadline
        left too few batches. Every worker the run started is stopped before it returns,
        also when the step or the dataset raises.
    """
    with quiet_loader_warnings():  # the constructor warns of more workers than it suggests
        sample, available = sampled_loader(loader, batches, **changes)
    total = batches if available is None else min(batches, available)
    # a small sample keeps 3 batches timed (the fewest the harness reports on) before it warms up every worker
    warmup = max(0, min(warmup, total - 1 - min(3, max(total - 2, 1))))
    bounded = Bounded(sample, total, warmup=warmup, soft_deadline=soft_deadline, hard_deadline=hard_deadline,
                      min_batches=warmup + 1 + min_timed(sample.num_workers), memory=memory, restore=restore)
    num_workers = sample.num_workers
    try:
        with quiet_loader_warnings():
            if total < 2:
                return Run(label, num_workers, None, f"the sample holds {total} batch(es); 2 are needed")
            # no synchronisation in the loop: the user's asynchronous GPU work must overlap the loading
            timing = time_loader(bounded, batches=None, warmup=warmup, repeats=repeats, step=step,
                                 synchronize=False)
    except ValueError as err:
        first = bounded.passes[0] if bounded.passes else None
        if first is not None and (first.stopped_early or first.ran_out):
            reason = "the time budget ran out first" if first.stopped_early else f"the loader ran out: {err}"
            return Run(label, num_workers, None, reason, stopped_early=first.stopped_early)
        raise
    finally:
        shutdown_workers(sample)  # persistent workers, if the sample kept any
    first = bounded.passes[0]
    cpu = _cpu_rates(first.start, first.end, first.next_cpu_s[warmup + 1:], cores) if first.end else {}
    # the step's time is busy time when it holds the host while the accelerator works (the simulated one,
    # a step that reads its result); for an asynchronous GPU step it is the launching: see gpu_busy_s
    run = Run(label, num_workers, timing, cpu=cpu, memory=_memory(first, sample.batch_size or 1, num_workers),
              busy_s=sum(timing.steps_s[0]), stopped_early=first.stopped_early)
    if gpu_busy is not None:  # after the loop: reading the events synchronises once, outside the timing
        run.gpu_busy_s = gpu_busy(1 + warmup)
    logger.debug("%s: %.4f s/batch over %d batches, wait share %.2f", label, run.s_per_batch,
                 timing.n_batches[0], run.wait_share)
    return run
