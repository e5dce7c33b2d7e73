"""Watch a loader inside your own training loop, for loops that cannot be handed over whole.

::

    from feedgpu.diagnosis import watch     # also feedgpu.diagnose.watch

    watched = watch(loader)
    for batch in watched:
        train_step(batch)                   # your loop, unchanged
    print(watched.report())                 # the data-wait share and the causes seen

Each ``next()`` is timed (the wait), and so is the time between two of them (your step,
whatever it does). After ``warmup`` batches the CPU time of this process, of the
loader's workers and the machine's idle time are read, and again when the loop ends, with
each worker's memory (USS); from these :meth:`Watch.report` names the causes of
:mod:`feedgpu.diagnosis.causes` it can see from inside the loop (no item probe, no
scaling runs, no what-if: :func:`feedgpu.diagnose` does those). The first ``next()``
(workers starting, the first batch) is counted as the start-up, not as a wait.

What it costs the loop: two clock readings per batch (a few microseconds), and two
readings of the workers' memory (about 10 ms per process) at the end of the warm-up and
at the end, outside the timed batches. When the loop ends early (``break``, an
exception), the loader's workers are stopped at once, unless they are persistent (then
they stay for your next epoch, as you asked).
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Iterator
from typing import Any

from torch.utils.data import DataLoader

from ...base.checks import check_int
from ...measure.machine import total_memory_mb, usable_cores
from ...measure.memory import MemoryProbe, available_kinds, process_roles, summarize
from ...measure.timing import shutdown_workers
from ..evidence import Evidence, MemoryGrowth, ms
from ..sensing.cloning import loader_settings
from ..conclusion import conclude
from ..sensing.probes import crosses_pickled, in_flight_mb
from ..report import Diagnosis
from ..sensing.runs import Snapshot, quiet_loader_warnings

__all__ = ["Watch", "watch"]


class Watch:
    """An iterable over a loader's batches that measures the loop it runs in.

    Args:
        loader: a DataLoader.
        warmup: batches after the first left out of the figures (default ``max(2,
            num_workers)``: the workers' first batches arrive in a burst).

    Attributes:
        waits_s: per batch, seconds inside ``next()`` (the first one is the start-up).
        steps_s: per batch, seconds from its ``next()`` returning to the next ``next()``.
        startup_s: ``iter()`` plus the first batch.
        completed: whether the last pass reached the end of the loader.

    Raises:
        TypeError: ``loader`` is not a DataLoader.
    """

    def __init__(self, loader: DataLoader, *, warmup: int | None = None) -> None:
        if not isinstance(loader, DataLoader):
            raise TypeError(f"watch() takes a torch.utils.data.DataLoader, got {type(loader).__name__}")
        self.loader = loader
        self.warmup = max(2, loader.num_workers) if warmup is None else check_int("warmup", warmup)
        self._reset()

    def _reset(self) -> None:
        self.waits_s: list[float] = []
        self.steps_s: list[float] = []
        self.next_cpu_s: list[float] = []
        self.startup_s = math.nan
        self.pickled: bool | None = None
        self.in_flight_mb = 0.0
        self.completed = False
        self._start: Snapshot | None = None
        self._end: Snapshot | None = None
        self._probe: MemoryProbe | None = None
        self._memory_reason: str | None = None

    def _begin_timed(self, before: set[int]) -> None:
        workers = sorted(p for p, r in process_roles().items() if r == "worker" and p not in before)
        if workers and "uss" in available_kinds():
            self._probe = MemoryProbe(kinds=("uss",))
            self._probe.sample()
        elif workers:
            self._memory_reason = "USS cannot be read on this platform"
        self._start = Snapshot.take(workers)

    def _end_timed(self) -> None:
        if self._start is not None and self._end is None:
            self._end = Snapshot.take(self._start.workers)
            if self._probe is not None:
                self._probe.sample()

    def __iter__(self) -> Iterator[Any]:
        self._reset()
        loader = self.loader
        before = set(process_roles()) if loader.num_workers else set()
        start = time.perf_counter()
        with quiet_loader_warnings():
            iterator = iter(loader)
        returned = None  # when the last batch was handed to the loop
        try:
            while True:
                t0 = time.perf_counter()
                if returned is not None:
                    self.steps_s.append(t0 - returned)
                cpu = time.thread_time()
                try:
                    batch = next(iterator)
                except StopIteration:
                    self.completed = True
                    self._end_timed()
                    return
                t1 = time.perf_counter()
                if not self.waits_s:
                    self.startup_s = t1 - start
                    self.pickled = crosses_pickled(batch)
                    self.in_flight_mb = in_flight_mb(loader, batch)
                self.waits_s.append(t1 - t0)
                self.next_cpu_s.append(time.thread_time() - cpu)
                if len(self.waits_s) == self.warmup + 1 and loader.num_workers:
                    self._begin_timed(before)
                returned = time.perf_counter()
                yield batch
        finally:
            self._end_timed()
            if not (loader.persistent_workers and loader.num_workers):
                shutdown_workers(iterator)
            del iterator

    # ------------------------------------------------------------------ figures
    def _timed(self) -> tuple[list[float], list[float]]:
        first, n = self.warmup + 1, len(self.steps_s)  # steps_s[i] is the step on batch i
        return self.waits_s[first:n], self.steps_s[first:n]

    @property
    def data_wait_share(self) -> float:
        """Waits over waits plus steps, for the batches after the warm-up (NaN before any)."""
        waits, steps = self._timed()
        total = sum(waits) + sum(steps)
        return sum(waits) / total if total > 0 else math.nan

    def _memory(self) -> MemoryGrowth | None:
        if self._memory_reason:
            return MemoryGrowth([], 0.0, self._memory_reason)
        if self._probe is None:
            return None
        summary = summarize(self._probe.table(), "uss")
        workers = summary[(summary["role"] == "worker") & (summary["samples"] >= 2)]
        if workers.empty:
            return MemoryGrowth([], 0.0, "the workers ended before their memory could be read")
        timed = len(self.waits_s) - self.warmup - 1
        items = timed * (self.loader.batch_size or 1) / max(self.loader.num_workers, 1)
        return MemoryGrowth([float(g) for g in workers["growth_mb"]], items)

    def report(self) -> Diagnosis:
        """The data-wait share and the causes visible from inside the loop (same vocabulary).

        Raises:
            ValueError: fewer than ``warmup + 2`` batches went through the loop.
        """
        waits, steps = self._timed()
        if len(self.steps_s) < self.warmup + 2 or not waits:
            raise ValueError(f"watch() needs at least {self.warmup + 2} batches through the loop to report, "
                             f"got {len(self.steps_s)}")
        cores = usable_cores()
        n = len(waits)
        cpu: dict[str, float] = {}
        if self._start is not None and self._end is not None:
            wall = max(self._end.wall_s - self._start.wall_s, 1e-9)
            cpu = {"main_per_s": (self._end.main_cpu_s - self._start.main_cpu_s) / wall,
                   "workers_per_s": (self._end.workers_cpu_s - self._start.workers_cpu_s) / wall,
                   "idle_share": min(max((self._end.idle_s - self._start.idle_s) / (wall * cores), 0.0), 1.0)}
        first = self.warmup + 1
        main_next = self.next_cpu_s[first:first + n]
        s_per_batch = (sum(waits) + sum(steps)) / n
        epoch = len(self.waits_s) if self.completed else _length(self.loader)
        ev = Evidence(num_workers=self.loader.num_workers, persistent_workers=self.loader.persistent_workers,
                      cores=cores, data_wait_share=self.data_wait_share, s_per_batch=s_per_batch,
                      wait_s=sum(waits) / n, step_s=sum(steps) / n, startup_s=self.startup_s,
                      one_batch_s=s_per_batch, batches_per_epoch=epoch,
                      main_next_cpu_s=sum(main_next) / len(main_next) if main_next else math.nan,
                      main_cpu_per_s=cpu.get("main_per_s", math.nan),
                      workers_cpu_per_s=cpu.get("workers_per_s", math.nan),
                      idle_share=cpu.get("idle_share", math.nan), memory=self._memory(), pickled=self.pickled,
                      in_flight_mb=self.in_flight_mb, dataset_items=_length(self.loader.dataset),
                      memory_mb=total_memory_mb())
        conclusion = conclude(ev)
        memory: dict[str, Any]
        if self.loader.num_workers == 0:
            memory = {"per_worker_mb": [], "reason": "0 workers: no worker to measure"}
        elif ev.memory is None or not ev.memory.per_worker_mb:
            memory = {"per_worker_mb": [], "reason": ev.memory.reason if ev.memory else "not measured"}
        else:
            projected = ev.projected_epoch_mb
            memory = {"per_worker_mb": ev.memory.per_worker_mb, "items_per_worker": ev.memory.items_per_worker,
                      "kb_per_item": ev.memory.kb_per_item,
                      "projected_epoch_mb": projected if math.isfinite(projected) else None,
                      "named": "memory-growth" in conclusion.causes, "reason": None}
        notes = ["watched from inside the loop: no item probe, no scaling runs and no what-if "
                 "(feedgpu.diagnose measures those)"]
        load = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
        if load is not None and load > cores:
            notes.append(f"the machine was busy (load average {load:.1f} on {cores} cores): timings are noisier")
        return conclusion.diagnosis(
            busy_share=sum(steps) / (sum(waits) + sum(steps)),
            breakdown={"step_s": ev.step_s, "s_per_batch": s_per_batch, "wait_s": ev.wait_s},
            memory=memory, settings=loader_settings(self.loader), step=f"your loop ({ms(ev.step_s)} a step measured)",
            runs=[{"label": "watched", "num_workers": self.loader.num_workers, "s_per_batch": s_per_batch,
                   "wait_share": ev.data_wait_share, "startup_s": self.startup_s, "timed_batches": n, "cpu": cpu}],
            notes=notes, source="watch")


def _length(loader: DataLoader) -> int | None:
    try:
        return len(loader)
    except TypeError:
        return None


def watch(loader: DataLoader, *, warmup: int | None = None) -> Watch:
    """Wrap ``loader`` for your own loop: ``for batch in watch(loader): ...``; then
    ``.report()``. See :class:`Watch`."""
    return Watch(loader, warmup=warmup)
