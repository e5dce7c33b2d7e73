"""The evidence of a measured loop, in the quantities the causes are named from, and the
thresholds they are named by.

:class:`Evidence` is what the sensing (:mod:`.sensing`) measured, reduced to shares and
rates: the data-wait share, the workers' CPU and the idle cores, the main process's
receiving and its own step, the bytes read, the threads per worker, each worker's memory
growth (:class:`MemoryGrowth`) and the scaling points. Every mode builds one (live,
watch, replay, script) and hands it to the one conclusion (:mod:`.conclusion`).

The thresholds are module constants, each stated where the causes are named
(:mod:`.causes`, whose docstring says what each one decides) and in the README:
:data:`INPUT_BOUND_SHARE` (a loop input-bound from 20% of its time waiting),
:data:`HAND_OVER_SHARE`, :data:`COMPUTING_SHARE`, :data:`IDLE_SHARE`,
:data:`OWN_CPU_SHARE`, :data:`START_UP_SHARE`, the memory growth's :data:`GROWTH_MB`,
:data:`GROWTH_KB_PER_ITEM`, :data:`EPOCH_GROWTH_MB` and :data:`CACHE_SHARE`,
:data:`THREADS_PER_WORKER`, :data:`STORAGE_SHARE` and :data:`READ_MIN_BYTES`,
:data:`MAIN_WORK_SHARE`, :data:`MAIN_WORK_MIN_S` and :data:`DEVICE_MIN_SHARE`, and
serialised's :data:`SERIAL_GAIN`, :data:`SERIAL_MIN_GAIN` and :data:`SERIAL_CPU_GROWTH`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields
from typing import Any

__all__ = [
    "INPUT_BOUND_SHARE", "MODERATE_SHARE", "HAND_OVER_SHARE", "COMPUTING_SHARE", "IDLE_SHARE",
    "OWN_CPU_SHARE", "START_UP_SHARE", "GROWTH_MB", "GROWTH_KB_PER_ITEM", "EPOCH_GROWTH_MB", "THREADS_PER_WORKER",
    "STORAGE_SHARE", "READ_MIN_BYTES", "MAIN_WORK_SHARE", "MAIN_WORK_MIN_S", "DEVICE_MIN_SHARE", "SERIAL_GAIN",
    "SERIAL_MIN_GAIN", "SERIAL_CPU_GROWTH", "CACHE_SHARE", "MemoryGrowth", "Evidence", "ms", "pct",
]

INPUT_BOUND_SHARE = 0.20
MODERATE_SHARE = 0.05
HAND_OVER_SHARE = 0.30
COMPUTING_SHARE = 0.25
IDLE_SHARE = 0.10
OWN_CPU_SHARE = 0.80
START_UP_SHARE = 0.10
GROWTH_MB = 2.0
GROWTH_KB_PER_ITEM = 8.0
EPOCH_GROWTH_MB = 16.0
THREADS_PER_WORKER = 1.5
STORAGE_SHARE = 0.6
READ_MIN_BYTES = 4096
MAIN_WORK_SHARE = 0.25
MAIN_WORK_MIN_S = 0.002
DEVICE_MIN_SHARE = 0.20
SERIAL_GAIN = 0.25
SERIAL_MIN_GAIN = 0.10
SERIAL_CPU_GROWTH = 0.15
CACHE_SHARE = 0.5


def ms(seconds: float) -> str:
    """Seconds as milliseconds for a sentence: ``'41.2 ms'``."""
    return "n/a" if seconds is None or not math.isfinite(seconds) else f"{seconds * 1e3:.3g} ms"


def pct(share: float) -> str:
    """A share as a percentage for a sentence: ``'67%'``."""
    return "n/a" if share is None or not math.isfinite(share) else f"{100 * share:.0f}%"


@dataclass
class MemoryGrowth:
    """What each worker's USS did between two samples of a run.

    Attributes:
        per_worker_mb: USS growth of each worker, MB (2**20 bytes), in pid order; never
            below zero (a worker whose USS fell added nothing).
        items_per_worker: items each worker read between the samples (about: the batches
            returned, times the batch size, shared between the workers).
        reason: why nothing was measured (then ``per_worker_mb`` is empty), or None.
    """

    per_worker_mb: list[float]
    items_per_worker: float
    reason: str | None = None

    @property
    def mean_mb(self) -> float:
        """Mean growth per worker, MB (NaN when not measured)."""
        return sum(self.per_worker_mb) / len(self.per_worker_mb) if self.per_worker_mb else math.nan

    @property
    def kb_per_item(self) -> float:
        """Mean growth per item a worker read, KB (NaN when not measured)."""
        if not self.per_worker_mb or self.items_per_worker <= 0:
            return math.nan
        return self.mean_mb * 1024 / self.items_per_worker


@dataclass
class Evidence:
    """What a measured loop showed, in the quantities the causes are named from.

    Attributes:
        num_workers, persistent_workers: the loader's.
        cores: the usable cores.
        data_wait_share: wait / (wait + step) over the timed batches.
        s_per_batch, wait_s, step_s: per timed batch, seconds.
        startup_s: ``iter()`` plus the first batch.
        one_batch_s: what the first batch costs once workers run (a batch's load time).
        batches_per_epoch: the loader's length, or None.
        main_next_cpu_s: CPU seconds of the main thread inside one ``next()`` (NaN: unknown).
        main_cpu_per_s, workers_cpu_per_s: CPU seconds per second of this process and of
            all the workers together (NaN: unknown).
        idle_share: the machine's idle share of its cores' time (NaN: unknown).
        memory: the workers' USS growth, or None.
        pickled: whether batches cross as pickles (numpy, Python objects) rather than
            tensors in shared memory (None: unknown).
        in_flight_mb: MB of the batches one worker can hold at once (``prefetch_factor +
            1`` of them): how much its USS can move without anything being copied.
        dataset_items: the dataset's length (None: an iterable without one).
        memory_mb: the machine's memory, MB (None: unknown).
        step_cpu_s: CPU seconds of this process's thread inside the step, per batch (NaN:
            unknown, or a simulated accelerator, which uses none).
        device_s: the step's seconds off the CPU when it runs alone, its wait for an
            accelerator (NaN: unknown, or a simulated accelerator).
        worker_threads: the threads a worker keeps busy, the workers' mean (NaN: unknown).
        pool_threads: the largest BLAS or OpenMP pool of this process (threadpoolctl; NaN: unknown).
        read_per_s: bytes the workers read per second together over the timed batches (NaN: unknown).
        item_read_bytes, item_read_per_s: bytes one item reads, and the bytes per second one
            process reads fetching items alone, from the item probe (NaN: unknown).
        io_wait_share: the share of the timed batches' time a worker waited for block I/O,
            the workers' mean (:func:`~feedgpu.diagnosis.sensing.io_counters.io_wait_s`; NaN where the
            kernel does not count it).
        points: the loop measured at each worker count (the baseline and the scaling
            runs): ``{"num_workers", "s_per_batch", "wait_share", "workers_cpu_per_s",
            "idle_share", "main_next_s"}`` each (None: not measured); empty where only one
            loop ran.
        item_bytes: the bytes of arrays and tensors one item holds (NaN: unknown): a
            worker's growth per item near it is a cache of the items, not copy-on-write.
    """

    num_workers: int
    persistent_workers: bool
    cores: int
    data_wait_share: float
    s_per_batch: float
    wait_s: float
    step_s: float
    startup_s: float
    one_batch_s: float
    batches_per_epoch: int | None
    main_next_cpu_s: float = math.nan
    main_cpu_per_s: float = math.nan
    workers_cpu_per_s: float = math.nan
    idle_share: float = math.nan
    memory: MemoryGrowth | None = None
    pickled: bool | None = None
    in_flight_mb: float = 0.0
    dataset_items: int | None = None
    memory_mb: float | None = None
    step_cpu_s: float = math.nan
    device_s: float = math.nan
    worker_threads: float = math.nan
    pool_threads: float = math.nan
    read_per_s: float = math.nan
    item_read_bytes: float = math.nan
    item_read_per_s: float = math.nan
    io_wait_share: float = math.nan
    points: list[dict[str, Any]] = field(default_factory=list)
    item_bytes: float = math.nan

    @property
    def storage_limited(self) -> bool:
        """The workers read together less than :data:`STORAGE_SHARE` of what as many
        processes read alone (see the module's docstring)."""
        rates = (self.read_per_s, self.item_read_bytes, self.item_read_per_s)
        return (self.num_workers >= 2 and all(math.isfinite(x) for x in rates)
                and self.item_read_bytes >= READ_MIN_BYTES
                and self.read_per_s < STORAGE_SHARE * self.num_workers * self.item_read_per_s)

    def to_dict(self) -> dict[str, Any]:
        """Every field as plain values (the diagnosis JSON's ``evidence``), for a replay."""
        out = {f.name: getattr(self, f.name) for f in fields(self) if f.name not in ("memory", "points")}
        out["points"] = [dict(p) for p in self.points]
        m = self.memory
        out["memory"] = None if m is None else {"per_worker_mb": list(m.per_worker_mb),
                                                "items_per_worker": m.items_per_worker, "reason": m.reason}
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Evidence:
        """The evidence written by :meth:`to_dict` (None for a figure not measured: NaN)."""
        names = {f.name: f for f in fields(cls)}
        values: dict[str, Any] = {}
        for key, value in data.items():
            if key not in names or key == "memory":
                continue
            if value is None and names[key].default is math.nan:
                value = math.nan
            if key == "points":
                value = [dict(p) for p in value or []]
            values[key] = value
        m = data.get("memory")
        if m:
            values["memory"] = MemoryGrowth(list(m.get("per_worker_mb") or []), m.get("items_per_worker") or 0.0,
                                            m.get("reason"))
        for key in ("startup_s", "one_batch_s", "s_per_batch", "wait_s", "step_s", "data_wait_share"):
            if values.get(key) is None:
                values[key] = math.nan
        return cls(**values)

    @property
    def projected_epoch_mb(self) -> float:
        """Each worker's USS growth over one epoch at the measured rate, MB (NaN: unknown)."""
        m = self.memory
        if m is None or not self.dataset_items or not self.num_workers or not math.isfinite(m.kb_per_item):
            return math.nan
        return m.kb_per_item * self.dataset_items / self.num_workers / 1024

    @property
    def input_bound(self) -> bool:
        return self.data_wait_share >= INPUT_BOUND_SHARE

    @property
    def receive_share(self) -> float:
        """The main thread's CPU inside ``next()`` over the wait (NaN: unknown)."""
        return self.main_next_cpu_s / self.wait_s if self.wait_s > 0 else math.nan

    @property
    def worker_cpu_share(self) -> float:
        """CPU seconds per second of one worker (1 = it computes all the time)."""
        return self.workers_cpu_per_s / self.num_workers if self.num_workers else math.nan

    @property
    def available_cores(self) -> float:
        """The cores this loop could have had during the run: the CPU its processes used
        plus the machine's idle time, per second (at least half a core, at most the usable
        cores); the usable cores when not measured. Less than the usable cores when other
        programs kept some busy."""
        used = self.main_cpu_per_s + self.workers_cpu_per_s
        if not (math.isfinite(used) and math.isfinite(self.idle_share)):
            return float(self.cores)
        return min(float(self.cores), max(0.5, used + self.idle_share * self.cores))

    @property
    def own_cpu_share(self) -> float:
        """This loop's processes' CPU per second, over the usable cores."""
        return (self.main_cpu_per_s + self.workers_cpu_per_s) / self.cores

    def epoch_s(self, startup_s: float | None = None) -> float:
        """One epoch's wall time: the start-up, then the other batches at the measured pace."""
        start = self.startup_s if startup_s is None else startup_s
        return start + (self.batches_per_epoch - 1) * self.s_per_batch if self.batches_per_epoch else math.nan

    @property
    def start_up_extra_s(self) -> float:
        """What starting the workers adds to an epoch: start-up beyond one batch's cost."""
        return max(self.startup_s - self.one_batch_s, 0.0)
