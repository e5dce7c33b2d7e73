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

This module holds the pieces the notebook ``03_prefetch_transfer`` needs in worker
processes, so they import cleanly under *spawn* (macOS, Windows):

* :class:`SleepArrayDataset`: items are numpy arrays of a chosen shape and dtype, each
  after a sleep of known length (optionally jittered), like the Stack Overflow question's
  iterable that sleeps, then returns ``np.random.random((1000, 150))``.
* :func:`collate_list` (the question's collate: the batch stays a list of arrays) and
  :func:`collate_tensor` (one contiguous tensor, as ``default_collate`` makes it).
* :func:`transfer_time_per_batch`: the main process's cost of receiving one batch from a
  worker, measured.
* :func:`cpu_per_batch`: who pays for a batch, in CPU time: the main process or the workers.

Example::

    records = make_records(16, (1000, 150), "float64")
    slow = transfer_time_per_batch(collate_list(records))
    fast = transfer_time_per_batch(collate_tensor(records))
    print(f"list of arrays {slow * 1e3:.1f} ms, one tensor {fast * 1e3:.2f} ms")
"""

from __future__ import annotations

import copy
import logging
import math
import random
import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset, default_collate

from .timing import shutdown_workers

logger = logging.getLogger(__name__)

__all__ = [
    "make_array",
    "make_records",
    "SleepArrayDataset",
    "collate_list",
    "collate_tensor",
    "payload_bytes",
    "transfer_time_per_batch",
    "time_per_item",
    "CpuShare",
    "cpu_per_batch",
]


def make_array(index: int, shape: Sequence[int], dtype: Any = "float64") -> np.ndarray:
    """The payload of item ``index``: an array of ``shape`` and ``dtype`` filled with
    ``index % 256`` (so it fits uint8 and every wider dtype; for int8 the value wraps
    around as numpy's cast does, so the 256 fills stay distinct).

    Filling is much cheaper than drawing random numbers, so building an item costs almost
    nothing next to its sleep; the bytes to move are the same either way.

    Args:
        index: the item's index.
        shape: the array's shape.
        dtype: a numpy dtype or its name (``"float64"``, ``"float32"``, ``"uint8"``, ...).

    Returns:
        A C-contiguous numpy array.
    """
    fill = np.array(index % 256).astype(np.dtype(dtype))  # a cast wraps where a fill would overflow
    return np.full(tuple(int(s) for s in shape), fill, dtype=np.dtype(dtype))


def make_records(n: int, shape: Sequence[int], dtype: Any = "float64") -> list[np.ndarray]:
    """``n`` items as a worker's dataset would return them: ``[make_array(i, ...)]``.

    This is what a ``collate_fn`` receives: a list of ``batch_size`` records.

    Args:
        n: how many records.
        shape: each record's shape.
        dtype: each record's dtype.

    Returns:
        A list of ``n`` numpy arrays; record ``i`` is filled with ``i % 256``.
    """
    if int(n) != n or n < 0:
        raise ValueError(f"n must be an integer >= 0, got {n!r}")
    return [make_array(i, shape, dtype) for i in range(int(n))]


class SleepArrayDataset(Dataset):
    """A map-style dataset whose items are numpy arrays, each after a known sleep.

    ``dataset[i]`` sleeps (I/O-like: it uses no CPU, so workers beyond the core count
    still help), then returns ``make_array(i, shape, dtype)``.

    Args:
        n: number of items.
        seconds_per_item: mean sleep per item, in seconds.
        shape: shape of each item (the question's small item is ``(10, 150)``, its large
            one ``(1000, 150)``).
        dtype: dtype of each item (the question's ``np.random.random`` gives float64).
        jitter: coefficient of variation of the sleep (0 = always ``seconds_per_item``).
            Sleeps follow a gamma distribution (see
            :func:`feedgpu.pipeline.draw_load_times`), drawn from a generator seeded by
            ``seed`` and the index, so item ``i`` sleeps the same in every run and in
            every worker.
        seed: seed for the jittered sleeps.

    Raises:
        ValueError: if ``n``, ``seconds_per_item`` or ``jitter`` is negative.

    With ``batch_size=None`` in the DataLoader, each item is a whole "batch": use that,
    with the batch's load time as ``seconds_per_item``, to give every batch its own
    random load time.
    """

    def __init__(
        self,
        n: int,
        seconds_per_item: float,
        shape: Sequence[int] = (10, 150),
        dtype: Any = "float64",
        jitter: float = 0.0,
        seed: int = 0,
    ) -> None:
        if int(n) != n or n < 0:
            raise ValueError(f"n must be an integer >= 0, got {n!r}")
        if not (seconds_per_item >= 0 and math.isfinite(seconds_per_item)):
            raise ValueError(f"seconds_per_item must be a finite number >= 0, got {seconds_per_item!r}")
        if not (jitter >= 0 and math.isfinite(jitter)):
            raise ValueError(f"jitter must be a finite number >= 0, got {jitter!r}")
        self.n = int(n)
        self.seconds_per_item = float(seconds_per_item)
        self.shape = tuple(int(s) for s in shape)
        self.dtype = np.dtype(dtype)
        self.jitter = float(jitter)
        self.seed = int(seed)

    def __len__(self) -> int:
        return self.n

    def _check_index(self, index: int) -> int:
        """``index`` as a position in ``0 .. n-1`` (negative counts from the end)."""
        position = index + self.n if index < 0 else index
        if not 0 <= position < self.n:
            raise IndexError(f"index {index} out of range for a dataset of {self.n} items")
        return position

    def item_seconds(self, index: int) -> float:
        """How long item ``index`` sleeps (the same on every call and in every process).

        Raises:
            IndexError: if ``index`` is out of range, as ``dataset[index]`` would.
        """
        index = self._check_index(index)
        if self.jitter == 0 or self.seconds_per_item == 0:
            return self.seconds_per_item
        # Seeded by the text "seed/index" (hashed with SHA-512 by random.Random, the same
        # in every process): independent of which worker loads the item and of the order,
        # and no two (seed, index) pairs share a stream.
        rng = random.Random(f"{self.seed}/{index}")
        shape = 1.0 / self.jitter**2
        return rng.gammavariate(shape, self.seconds_per_item / shape)

    def __getitem__(self, index: int) -> np.ndarray:
        """Sleep ``item_seconds(index)``, then return ``make_array(index, shape, dtype)``."""
        index = self._check_index(index)
        seconds = self.item_seconds(index)
        if seconds > 0:
            time.sleep(seconds)
        return make_array(index, self.shape, self.dtype)

    def __repr__(self) -> str:
        return (
            f"SleepArrayDataset(n={self.n}, seconds_per_item={self.seconds_per_item}, "
            f"shape={self.shape}, dtype={self.dtype.name}, jitter={self.jitter})"
        )


def collate_list(records: list[Any]) -> list[Any]:
    """The Stack Overflow question's collate: return the records as they are.

    The batch stays a Python list of numpy arrays, so a worker must pickle every array
    and the main process must read and unpickle every byte.
    """
    return list(records)


def collate_tensor(records: list[Any]) -> torch.Tensor:
    """One contiguous tensor of shape ``(len(records), *record_shape)``, same dtype.

    This is what :func:`torch.utils.data.default_collate` does with a list of arrays.
    In a worker it writes the stacked tensor straight into shared memory, so only a
    handle crosses to the main process.

    Raises:
        ValueError: if ``records`` is empty.
        TypeError: if the records are not arrays or tensors.
    """
    if len(records) == 0:
        raise ValueError("cannot collate an empty list of records")
    for i, record in enumerate(records):
        if not isinstance(record, (np.ndarray, torch.Tensor)):
            raise TypeError(f"records must be numpy arrays or tensors, record {i} is a {type(record).__name__}")
    return default_collate(list(records))


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
    of :func:`feedgpu.pipeline.steady_state_time_per_batch` on the main process's side.

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
    for name, value in (("num_workers", num_workers), ("batches", batches), ("warmup", warmup)):
        if int(value) != value or value < 1:
            raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
    if gap_s is not None and not (gap_s >= 0 and math.isfinite(gap_s)):
        raise ValueError(f"gap_s must be a finite number >= 0, got {gap_s!r}")
    if statistic not in ("median", "min"):
        raise ValueError(f"statistic must be 'median' or 'min', got {statistic!r}")
    queued = PREFETCH_FACTOR * int(num_workers)  # ready at once after start-up
    loader = DataLoader(
        _BatchSource(make_batch, 1 + queued + int(warmup) + int(batches)),
        batch_size=None,
        collate_fn=_as_is,
        num_workers=int(num_workers),
        prefetch_factor=PREFETCH_FACTOR,
        multiprocessing_context=multiprocessing_context,
    )
    iterator = iter(loader)
    try:
        for _ in range(1 + queued):  # start-up and the batches prefetched meanwhile
            next(iterator)
        start = time.perf_counter()  # now the worker sets the pace: calibrate the gap
        for _ in range(int(warmup)):
            next(iterator)
        per_batch = (time.perf_counter() - start) / int(warmup)
        gap = 2 * per_batch + 0.02 if gap_s is None else float(gap_s)
        waits = []
        for _ in range(int(batches)):
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
    """
    n = min(int(n), len(dataset))  # type: ignore[arg-type]
    if n < 1:
        raise ValueError("the dataset has no items to time")
    start = time.perf_counter()
    for i in range(n):
        dataset[i]
    return (time.perf_counter() - start) / n



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

    if int(batches) != batches or batches < 1:
        raise ValueError(f"batches must be an integer >= 1, got {batches!r}")
    num_workers = int(getattr(loader, "num_workers", 0))
    warm = 2 * num_workers + 2 if warmup is None else int(warmup)
    if warm < 0 or not (step_s >= 0 and math.isfinite(step_s)):
        raise ValueError(f"warmup and step_s must be finite and >= 0, got {warmup!r} and {step_s!r}")
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
        for _ in range(int(batches)):
            next(iterator)
            if step_s:
                time.sleep(step_s)
        elapsed = time.perf_counter() - start
        workers_1, main_1 = _cpu_seconds(workers), _cpu_seconds([me])
    finally:
        shutdown_workers(iterator)
        del iterator
    n = int(batches)
    return CpuShare(elapsed / n, (main_1 - main_0) / n, (workers_1 - workers_0) / n, num_workers)
