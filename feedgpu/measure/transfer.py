"""What it costs to hand a batch from a DataLoader worker to the main process.

A worker is a separate process, so every batch it builds must cross a process boundary
before the training loop can use it. How much that costs depends on what the batch is:

* **numpy arrays, or a list of them** (a ``collate_fn`` that returns the records as they
  are): the worker pickles every byte, writes it into a pipe, and the main process reads
  it back and unpickles it. The main process pays for the whole copy, on every batch,
  and only one main process does this however many workers there are.
* **one tensor** (PyTorch's default collate): the worker stacks the items straight into
  shared memory, and only a small handle is sent (on Linux, a file descriptor that the
  main process fetches from the worker, and a few numbers). The main process maps the
  same memory: nothing is copied, but fetching the handle costs about a millisecond per
  tensor, so send one tensor per batch, not a list of them.

The measurements here:

* :func:`payload_bytes`: how many bytes a batch holds;
* :func:`transfer_time_per_batch`: the main process's cost of receiving one batch from a
  worker, measured;
* :func:`time_per_item`: a dataset's cost per item, measured in this process;
* :func:`shared_memory_write_s`: what a worker pays, more than a single process, to write
  a batch tensor: fresh shared memory against fresh private memory of the same size;
* :func:`shared_memory_handover_s`: the same hand-over split between the two sides: the
  worker writes the shared segment, the main process maps it and later frees it;
* :func:`cpu_per_batch`: who pays for a batch, in CPU time: the main process or the workers.

The datasets and collate functions they are measured with live in
:mod:`feedgpu.workloads.arrays` (workers must import them under *spawn*).

Example::

    records = make_records(16, (1000, 150), "float64")
    slow = transfer_time_per_batch(collate_list(records))
    fast = transfer_time_per_batch(collate_tensor(records))
    print(f"list of arrays {slow * 1e3:.1f} ms, one tensor {fast * 1e3:.2f} ms")
"""

from __future__ import annotations

import copy
import logging
import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset

from ..base.checks import check_choice, check_int, check_seconds
from .timing import median_seconds, shutdown_workers

__all__ = [
    "payload_bytes",
    "PREFETCH_FACTOR",
    "transfer_time_per_batch",
    "time_per_item",
    "shared_memory_write_s",
    "HandOver",
    "shared_memory_handover_s",
    "CpuShare",
    "cpu_per_batch",
]


logger = logging.getLogger(__name__)


def payload_bytes(batch: Any) -> int:
    """Bytes of array data in a batch: a tensor, a numpy array, or lists, tuples and
    dicts of them (other objects count 0)."""
    if isinstance(batch, torch.Tensor):
        return batch.element_size() * batch.numel()
    if isinstance(batch, np.ndarray):
        return int(batch.nbytes)
    if isinstance(batch, dict):
        return sum(payload_bytes(v) for v in batch.values())
    if isinstance(batch, (list, tuple)):
        return sum(payload_bytes(v) for v in batch)
    return 0


#: prefetch_factor of the loader inside :func:`transfer_time_per_batch`.
PREFETCH_FACTOR = 2


def _as_is(batch: Any) -> Any:
    """collate_fn for ``batch_size=None``: hand the item over untouched (the default,
    ``default_convert``, would turn numpy arrays into tensors)."""
    return batch


class _BatchSource(Dataset):
    """Every item is a fresh batch: ``make_batch()`` if callable, else a deep copy of it.

    A deep copy is new memory in the worker, as a batch built there would be: a tensor
    is moved into shared memory when sent, a numpy array is pickled.
    """

    def __init__(self, make_batch: Any, n: int) -> None:
        self.make_batch = make_batch
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, index: int) -> Any:
        if callable(self.make_batch):
            return self.make_batch()
        return copy.deepcopy(self.make_batch)


def transfer_time_per_batch(
    make_batch: Any,
    *,
    num_workers: int = 1,
    batches: int = 8,
    warmup: int = 2,
    gap_s: float | None = None,
    statistic: str = "median",
    multiprocessing_context: Any = None,
) -> float:
    """Seconds the main process spends receiving one batch from a worker.

    A DataLoader with ``num_workers`` workers sends batches that are copies of
    ``make_batch``. After start-up (and the batches prefetched meanwhile), the main
    process takes ``warmup`` batches back to back, which tells how long a batch takes
    when the worker sets the pace; then, before each of ``batches`` timed
    ``next()`` calls, it sleeps ``gap_s`` (default: twice that plus 20 ms), like a
    training step long enough for the worker to finish the next batch. What ``next()``
    still costs then is the transfer the main process itself pays: reading the pipe and
    unpickling (numpy), or mapping shared memory (tensors). That is the ``transfer_s``
    of :func:`feedgpu.models.pipeline.steady_state_time_per_batch` on the main process's side.

    Args:
        make_batch: the batch to send, or a zero-argument callable that builds one in
            the worker. An object is deep-copied in the worker for every batch, so it can
            be made in the notebook (with a notebook-defined collate function) and still
            work under spawn. A callable must be importable under spawn (a module-level
            function, or ``functools.partial`` of one).
        num_workers: worker processes (the main process's cost does not depend on it).
        batches: timed batches; ``statistic`` of their ``next()`` times is returned.
        warmup: batches taken back to back before timing (at least 1).
        gap_s: seconds to sleep before each timed ``next()``; None chooses as above.
        statistic: ``"median"`` (the typical cost, the default) or ``"min"`` (the cost
            when nothing else got in the way: on a busy machine the most stable figure
            for comparing two kinds of batch).
        multiprocessing_context: passed to the DataLoader (None: the platform's).

    Returns:
        The median (or least) seconds one timed ``next()`` took.

    Raises:
        ValueError: if ``num_workers``, ``batches`` or ``warmup`` is below 1, ``gap_s``
            is negative, or ``statistic`` is not ``"median"`` or ``"min"``.
    """
    num_workers = check_int("num_workers", num_workers, minimum=1)
    batches = check_int("batches", batches, minimum=1)
    warmup = check_int("warmup", warmup, minimum=1)
    gap_s = None if gap_s is None else check_seconds("gap_s", gap_s)
    check_choice("statistic", statistic, ("median", "min"))
    queued = PREFETCH_FACTOR * num_workers  # ready at once after start-up
    loader = DataLoader(
        _BatchSource(make_batch, 1 + queued + warmup + batches),
        batch_size=None,
        collate_fn=_as_is,
        num_workers=num_workers,
        prefetch_factor=PREFETCH_FACTOR,
        multiprocessing_context=multiprocessing_context,
    )
    iterator = iter(loader)
    try:
        for _ in range(1 + queued):  # start-up and the batches prefetched meanwhile
            next(iterator)
        start = time.perf_counter()  # now the worker sets the pace: calibrate the gap
        for _ in range(warmup):
            next(iterator)
        per_batch = (time.perf_counter() - start) / warmup
        gap = 2 * per_batch + 0.02 if gap_s is None else gap_s
        waits = []
        for _ in range(batches):
            time.sleep(gap)
            t0 = time.perf_counter()
            batch = next(iterator)
            waits.append(time.perf_counter() - t0)
            del batch
    finally:
        shutdown_workers(iterator)
        del iterator
    logger.debug("transfer: back to back %.5f s/batch, gap %.4f s, waits %s", per_batch, gap, waits)
    return statistics.median(waits) if statistic == "median" else min(waits)


def time_per_item(dataset: Dataset, n: int = 20) -> float:
    """Mean seconds of ``dataset[i]`` over the first ``n`` items, in this process.

    Useful to calibrate a model with what a sleep really costs here (a ``sleep(0.001)``
    lasts a little longer than 1 ms on most systems).

    Raises:
        ValueError: if ``n`` is below 1 or the dataset is empty.
    """
    n = min(check_int("n", n, minimum=1), len(dataset))  # type: ignore[arg-type]
    if n < 1:
        raise ValueError("the dataset has no items to time")
    start = time.perf_counter()
    for i in range(n):
        dataset[i]
    return (time.perf_counter() - start) / n


def shared_memory_write_s(shape: Sequence[int], dtype: torch.dtype = torch.float32, repeats: int = 10) -> float:
    """Seconds a worker pays, more than a single process, to write one batch tensor.

    A worker's collate stacks the batch into *fresh shared memory* (a new segment the
    main process will map); with ``num_workers=0`` the same stack goes into fresh private
    memory. Both pay for the bytes; the shared segment also costs its creation and the
    first touch of every page, which private memory often gets from pages the process
    already holds. This is the hand-over cost ``transfer_s`` of
    :func:`feedgpu.models.pipeline.steady_state_time_per_batch` for a batch of tensors, measured in
    this process on this thread: the median over ``repeats`` of filling a fresh shared
    tensor, minus the median of filling a fresh private one (never below 0).

    Args:
        shape: the batch tensor's shape, e.g. ``(32, 3, 250, 250)``.
        dtype: its type (``torch.uint8`` is a quarter of ``torch.float32``'s bytes).
        repeats: tensors of each kind made and filled.

    Raises:
        ValueError: if ``repeats`` is below 1 or a dimension is negative or not whole.
    """
    repeats = check_int("repeats", repeats, minimum=1)
    shape = tuple(check_int("a dimension of shape", d, minimum=0) for d in shape)
    private = median_seconds(lambda: torch.empty(shape, dtype=dtype).fill_(1), repeats)
    shared = median_seconds(lambda: torch.empty(shape, dtype=dtype).share_memory_().fill_(1), repeats)
    return max(shared - private, 0.0)


@dataclass
class HandOver:
    """What handing one batch tensor over through shared memory costs each side, in seconds.

    Attributes:
        send_s: what the worker pays more than a single process building the same batch:
            writing a fresh shared segment (which it leaves to the main process to free)
            against writing, then freeing, fresh private memory.
        receive_s: what the main process pays: taking the handle and mapping the segment
            (``next()``), then unmapping it and freeing its pages when the batch is dropped.
    """

    send_s: float
    receive_s: float


def shared_memory_handover_s(shape: Sequence[int], dtype: torch.dtype = torch.float32,
                             repeats: int = 10) -> HandOver:
    """Seconds each side pays to hand one batch tensor from a worker to the main process.

    :func:`shared_memory_write_s` charges the whole difference between shared and private
    memory to one side; the two sides do different work. The worker stacks the batch into
    a fresh shared segment and sends its handle; the main process maps the segment and,
    when it drops the batch, unmaps it and returns its pages (the worker's mapping is gone
    by then, so the last holder pays). With ``num_workers=0`` one process writes the batch
    into fresh private memory and frees it, and both of those are already in its time per
    batch. So, each the median of ``repeats`` in this process on this thread:

    * ``send_s`` = fill a fresh shared tensor (kept, so its freeing is not counted) minus
      fill a fresh private one and free it (never below 0);
    * ``receive_s`` = the least ``next()`` of a 1-worker DataLoader that sends tensors of
      this shape (:func:`transfer_time_per_batch`) plus freeing a filled shared tensor.

    These are ``transfer_s`` and ``receive_s`` of
    :func:`feedgpu.models.pipeline.steady_state_time_per_batch`.

    Raises:
        ValueError: if ``repeats`` is below 1 or a dimension is negative or not whole.
    """
    import functools

    repeats = check_int("repeats", repeats, minimum=1)
    shape = tuple(check_int("a dimension of shape", d, minimum=0) for d in shape)
    private = median_seconds(lambda: torch.empty(shape, dtype=dtype).fill_(1), repeats)
    kept: list[torch.Tensor] = []
    shared = median_seconds(lambda: kept.append(torch.empty(shape, dtype=dtype).share_memory_().fill_(1)),
                            repeats)
    free = median_seconds(kept.pop, repeats)  # each pop drops the last reference: unmap and free
    taken = transfer_time_per_batch(functools.partial(torch.ones, shape, dtype=dtype),
                                    batches=min(repeats, 8), statistic="min")
    return HandOver(send_s=max(shared - private, 0.0), receive_s=taken + free)


@dataclass
class CpuShare:
    """What :func:`cpu_per_batch` measured, per batch, in seconds.

    Attributes:
        s_per_batch: wall-clock time per batch (step included).
        main_cpu_s: CPU time of the main process (all its threads).
        workers_cpu_s: CPU time of all the loader's workers together.
        num_workers: the loader's ``num_workers``.
    """

    s_per_batch: float
    main_cpu_s: float
    workers_cpu_s: float
    num_workers: int


def _cpu_seconds(procs: Sequence[Any]) -> float:
    """User plus system CPU seconds of ``procs`` (psutil processes) together."""
    import psutil

    total = 0.0
    for proc in procs:
        try:
            times = proc.cpu_times()
        except (psutil.NoSuchProcess, psutil.AccessDenied):  # a worker already gone
            continue
        total += times.user + times.system
    return total


def cpu_per_batch(
    loader: Any, *, batches: int = 30, warmup: int | None = None, step_s: float = 0.0
) -> CpuShare:
    """Time a loader and count the CPU time each side spends per batch.

    Starts a fresh iteration, takes ``1 + warmup`` batches untimed (default
    ``2 * num_workers + 2``: start-up and the batches prefetched meanwhile), then
    ``batches`` timed ones, sleeping ``step_s`` after each as a training step. The CPU
    time of this process and of the worker processes (the children of this process that
    appeared with the iteration, found with psutil) is read before and after the timed
    batches. Sleeping costs no CPU, so a :class:`SleepArrayDataset` shows only the work
    of building, collating, sending and receiving batches. The workers are shut down
    before returning.

    Args:
        loader: a DataLoader.
        batches: timed batches (the loader must have ``1 + warmup + batches``).
        warmup: untimed batches after the first; None chooses as above.
        step_s: seconds to sleep per batch, as a training step.

    Returns:
        A :class:`CpuShare`.

    Raises:
        ValueError: if ``batches`` is below 1, ``warmup`` or ``step_s`` negative.
    """
    import psutil

    batches = check_int("batches", batches, minimum=1)
    step_s = check_seconds("step_s", step_s)
    num_workers = int(getattr(loader, "num_workers", 0))
    warm = 2 * num_workers + 2 if warmup is None else check_int("warmup", warmup)
    if num_workers > 0 and getattr(loader, "persistent_workers", False):
        # Their workers may already run, started by an earlier iteration, and could not be
        # told apart from any other child of this process.
        raise ValueError("cpu_per_batch needs a loader without persistent_workers: it counts "
                         "the CPU of the workers that this iteration starts")
    me = psutil.Process()
    before = {child.pid for child in me.children()}
    iterator = iter(loader)
    try:
        for _ in range(1 + warm):
            next(iterator)
            if step_s:
                time.sleep(step_s)
        workers = [child for child in me.children() if child.pid not in before]
        workers_0, main_0, start = _cpu_seconds(workers), _cpu_seconds([me]), time.perf_counter()
        for _ in range(batches):
            next(iterator)
            if step_s:
                time.sleep(step_s)
        elapsed = time.perf_counter() - start
        workers_1, main_1 = _cpu_seconds(workers), _cpu_seconds([me])
    finally:
        shutdown_workers(iterator)
        del iterator
    return CpuShare(elapsed / batches, (main_1 - main_0) / batches, (workers_1 - workers_0) / batches,
                    num_workers)
