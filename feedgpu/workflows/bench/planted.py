"""Training loops with one planted cause of a hungry accelerator each, and a healthy one.

Each factory returns a DataLoader over items of known cost (a sleep or a CPU spin per
item, from :mod:`~feedgpu.workloads.cost`), built so that exactly one of the causes of
:mod:`feedgpu.diagnosis` shows when it is diagnosed with its step (:data:`PLANTED`)::

    from feedgpu import diagnose
    from feedgpu.workflows.bench.planted import PLANTED

    case = PLANTED["too-few-workers"]
    print(diagnose(case.factory(), step_s=case.step_s))

or, from a shell, ``feedgpu-diagnose feedgpu.workflows.bench.planted:too_few_workers --step-ms 20``.
A case whose cause is in the step itself comes with its step (``case.step()``, a callable
to pass as ``step=`` instead of ``step_s``).

The costs are tens of milliseconds per batch, so that what the diagnosis measures stays a
clear ratio of them on a busy 2-core laptop. Everything a worker needs (the datasets,
:func:`slow_worker_start`) lives at module level, so the loaders work under *spawn* too.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, NamedTuple

import torch
from torch.utils.data import DataLoader, Dataset

from ...base.checks import check_int, check_seconds
from ...diagnosis.sensing.steps import ReplayedStep
from ...measure.machine import usable_cores
from ...workloads.arrays import SleepArrayDataset, collate_list
from ...workloads.cost import LockedDataset, MatmulDataset, RateLimitedDataset, SleepDataset, SpinDataset, ThrottledReadDataset
from ...workloads.records import _position, make_python_records

__all__ = [
    "WORKER_START_S",
    "slow_worker_start",
    "RecordRowsDataset",
    "healthy",
    "main_process_loading",
    "too_few_workers",
    "cpu_saturated",
    "hand_over",
    "worker_start_up",
    "memory_growth",
    "thread_oversubscription",
    "storage_bound",
    "serialised",
    "quarter_locked",
    "rate_limited",
    "HostWorkStep",
    "main_thread_work",
    "Planted",
    "PLANTED",
    "SHARED",
]

#: Seconds :func:`slow_worker_start` keeps each worker before its first item.
WORKER_START_S = 0.3


def slow_worker_start(worker_id: int) -> None:
    """A ``worker_init_fn`` that takes :data:`WORKER_START_S` (like opening a database or
    loading an index in every worker): paid again every epoch unless the workers persist."""
    time.sleep(WORKER_START_S)


class RecordRowsDataset(Dataset):
    """Items are rows of a Python list of ints: item ``i`` is the tensor of records
    ``[i * row, (i + 1) * row)`` of :func:`~feedgpu.workloads.records.make_python_records`,
    after a sleep of ``seconds_per_item``.

    Building the tensor reads every record of the row, which writes each int's reference
    count: a forked worker copies the pages of every row it reads (about 36 bytes a
    record, so ``row=4096`` is ~150 KB an item). That is the copy-on-write of notebook 06,
    fast enough to see in a few seconds.

    Args:
        n: number of items.
        row: records per item.
        seconds_per_item: sleep per item.

    Raises:
        ValueError: ``n`` or ``row`` below 1, or a negative sleep.
    """

    def __init__(self, n: int, row: int = 4096, seconds_per_item: float = 0.0) -> None:
        self.n = check_int("n", n, minimum=1)
        self.row = check_int("row", row, minimum=1)
        self.seconds_per_item = check_seconds("seconds_per_item", seconds_per_item)
        self.records = make_python_records(self.n * self.row)

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, index: int) -> torch.Tensor:
        """Sleep, then return row ``index`` as an ``int64`` tensor of ``row`` values."""
        i = _position(index, self.n)
        if self.seconds_per_item:
            time.sleep(self.seconds_per_item)
        return torch.tensor(self.records[i * self.row:(i + 1) * self.row], dtype=torch.int64)

    def __repr__(self) -> str:
        return f"RecordRowsDataset(n={self.n}, row={self.row}, seconds_per_item={self.seconds_per_item})"


def healthy() -> DataLoader:
    """0 workers over items that cost nothing: with any real step the loop never waits.

    (0 workers is no cause by itself: the diagnosis names causes from what it measures.)
    """
    return DataLoader(SleepDataset(1024, 0.0), batch_size=8)


def main_process_loading() -> DataLoader:
    """0 workers over 5 ms items, batches of 8: the main process loads 40 ms, then steps."""
    return DataLoader(SleepDataset(4096, 0.005), batch_size=8)


def too_few_workers(context: Any = None) -> DataLoader:
    """1 worker over 5 ms items (waiting, not computing), batches of 8: 40 ms a batch.

    Args:
        context: the loader's ``multiprocessing_context`` (``"spawn"`` to try it there).
    """
    return DataLoader(SleepDataset(4096, 0.005), batch_size=8, num_workers=1, multiprocessing_context=context)


def cpu_saturated() -> DataLoader:
    """One worker per usable core, each item 10 ms of CPU, two items per core in a batch:
    20 ms of every core per batch, and no core left for another worker."""
    cores = usable_cores()
    return DataLoader(SpinDataset(8192, 0.010), batch_size=2 * cores, num_workers=cores)


def hand_over() -> DataLoader:
    """2 workers, items of 1 MB of float64 (2 ms sleep each), batches of 8 kept as a list
    of numpy arrays: the main process unpickles 8 MB for every batch."""
    return DataLoader(SleepArrayDataset(2048, 0.002, shape=(1000, 125), dtype="float64"), batch_size=8,
                      num_workers=2, collate_fn=collate_list)


def worker_start_up() -> DataLoader:
    """2 workers that take 0.3 s to start (:func:`slow_worker_start`) over an epoch of 6
    batches of 4 ms items: without ``persistent_workers`` every epoch pays the start again."""
    return DataLoader(SleepDataset(48, 0.004), batch_size=8, num_workers=2, worker_init_fn=slow_worker_start)


def memory_growth() -> DataLoader:
    """2 persistent workers reading rows of a Python list (:class:`RecordRowsDataset`, 400
    rows of 4096 ints, ~60 MB): with *fork* each worker copies every row it reads."""
    return DataLoader(RecordRowsDataset(400, 4096, 0.005), batch_size=4, num_workers=2, persistent_workers=True)


def thread_oversubscription() -> DataLoader:
    """One persistent worker per usable core (at least 2) over items of numpy matrix
    products (:class:`~feedgpu.workloads.cost.MatmulDataset`, about 3 ms of one core each),
    batches of 4: numpy's BLAS keeps its default pool, one thread per core, in every worker,
    so the workers run cores x cores threads on the cores.

    Diagnosed with a 5 ms step (:data:`PLANTED`): with one thread per pool the workers
    deliver a batch in about 3 ms on 2 cores, so the loop is fed; the pools' turn-taking
    makes them 2 to 8 times slower, varying from run to run and machine to machine, and
    only a step well below what the slowest of those delivers keeps the loop input-bound on
    every run (a 10 ms step left it waiting 20% of its time on one CI machine, 23-87% here)."""
    return DataLoader(MatmulDataset(4096, 192, 3), batch_size=4, num_workers=max(2, usable_cores()),
                      persistent_workers=True)


def storage_bound() -> DataLoader:
    """2 persistent workers over items of 256 KB read through one channel of 32 MB/s shared
    by every process (:class:`~feedgpu.workloads.cost.ThrottledReadDataset`), batches of 8:
    one process reads a batch in 66 ms, and so do 2, 4 or 8 workers together."""
    return DataLoader(ThrottledReadDataset(4096, 256 * 1024, 32e6), batch_size=8, num_workers=2,
                      persistent_workers=True)


def serialised() -> DataLoader:
    """2 persistent workers over 3 ms items that wait under one lock every process shares
    (:class:`~feedgpu.workloads.cost.LockedDataset`), batches of 8: one batch every 24 ms
    with 1 worker, and with 2, 3 or 8 alike; nothing is read and the cores stay idle."""
    return DataLoader(LockedDataset(4096, 0.003, locked_share=1.0), batch_size=8, num_workers=2,
                      persistent_workers=True)


def quarter_locked() -> DataLoader:
    """1 persistent worker over 4 ms items, the last quarter of each under one lock every
    process shares, batches of 8: 32 ms a batch with 1 worker, never under 8 ms however
    many (the lock's), and a queue for it in between."""
    return DataLoader(LockedDataset(4096, 0.004, locked_share=0.25), batch_size=8, num_workers=1,
                      persistent_workers=True)


def rate_limited() -> DataLoader:
    """2 persistent workers over items that are each one request to a service taking 400
    requests a second from everyone (:class:`~feedgpu.workloads.cost.RateLimitedDataset`),
    batches of 8: one batch every 20 ms at best, however many workers ask."""
    return DataLoader(RateLimitedDataset(4096, requests_per_s=400, latency_s=0.001), batch_size=8, num_workers=2,
                      persistent_workers=True)


class HostWorkStep(ReplayedStep):
    """A training step that first works ``cpu_s`` on this thread's CPU (tokenising, packing,
    augmenting in the loop), then waits ``device_s`` for its accelerator (a sleep, as
    ``loss.item()`` holds the host): the accelerator idles while the CPU part runs."""

    def __init__(self, cpu_s: float = 0.015, device_s: float = 0.010) -> None:
        super().__init__(cpu_s, device_s)

    def __repr__(self) -> str:
        return f"HostWorkStep(cpu_s={self.cpu_s}, device_s={self.device_s})"


def main_thread_work() -> DataLoader:
    """2 persistent workers over 2 ms items, batches of 8 (a batch every 8 ms, loading is
    no bottleneck), for :class:`HostWorkStep`'s 15 ms of CPU before a 10 ms device wait."""
    return DataLoader(SleepDataset(4096, 0.002), batch_size=8, num_workers=2, persistent_workers=True)


class Planted(NamedTuple):
    """One planted case: its loader's factory, the simulated step to diagnose it with (or,
    where the cause is in the step, ``step``: a factory of the step to pass instead), and
    what the diagnosis should find."""

    factory: Callable[[], DataLoader]
    step_s: float
    cause: str | None  # the id of the cause planted (None: healthy)
    setting: str | None  # the setting the diagnosis should try first (None: nothing to try)
    step: Callable[[], Callable[[Any], Any]] | None = None

    def diagnose_kwargs(self) -> dict[str, Any]:
        """``step=`` or ``step_s=`` for :func:`feedgpu.diagnose`."""
        return {"step": self.step()} if self.step is not None else {"step_s": self.step_s}


#: Every planted case by the id of its cause (``"healthy"`` for none).
PLANTED: dict[str, Planted] = {
    "healthy": Planted(healthy, 0.030, None, None),
    "main-process-loading": Planted(main_process_loading, 0.020, "main-process-loading", "num_workers"),
    "too-few-workers": Planted(too_few_workers, 0.020, "too-few-workers", "num_workers"),
    "cpu-saturated": Planted(cpu_saturated, 0.005, "cpu-saturated", None),
    "hand-over": Planted(hand_over, 0.010, "hand-over", "collate_fn"),
    "worker-start-up": Planted(worker_start_up, 0.020, "worker-start-up", "persistent_workers"),
    "memory-growth": Planted(memory_growth, 0.020, "memory-growth", None),
    "thread-oversubscription": Planted(thread_oversubscription, 0.005, "thread-oversubscription", "worker_init_fn"),
    "storage-bound": Planted(storage_bound, 0.020, "storage-bound", None),
    "serialised": Planted(serialised, 0.005, "serialised", None),
    "main-thread-work": Planted(main_thread_work, 0.025, "main-thread-work", None, HostWorkStep),
}

#: Loaders whose workers share one resource (all ``serialised``), by what they share: the
#: scaling runs must show it, the model must be corrected by it, and a worker count is
#: tried only where the corrected model predicts a gain (the quarter lock's, up to its pace).
SHARED: dict[str, Planted] = {
    "a lock over every item": PLANTED["serialised"],
    "a lock over a quarter of each item": Planted(quarter_locked, 0.005, "serialised", "num_workers"),
    "a service of 400 requests a second": Planted(rate_limited, 0.005, "serialised", None),
}
