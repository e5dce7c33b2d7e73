"""Where a batch's time goes, measured piece by piece in the main process.

* :func:`probe_items`: ``dataset[i]`` on the first items of the diagnosis's sample (or the
  first items of an iterable dataset), each timed with ``time.perf_counter`` and with the
  thread's CPU clock (``time.thread_time``): items that wait (a disk, a network, a sleep)
  use little CPU and leave room for more workers than cores; items that compute do not.
  Then the loader's ``collate_fn`` on them, timed the same way.
* :func:`probe_hand_over`: what handing that batch from a worker to the main process
  would cost each side (for a loader without workers, and for the fix the diagnosis
  tries; with workers, the baseline run measures it in the loop), with the course's
  instruments
  (:func:`feedgpu.measure.transfer.transfer_time_per_batch` for the main process;
  for the worker, the same for a pickled batch, or
  :func:`feedgpu.measure.transfer.shared_memory_write_s` for tensors in shared memory).
* :func:`probe_pinning`: ``pin_memory()`` of the batch's tensors, where an accelerator
  makes ``pin_memory=True`` do anything (the pinned ``torch/utils/data/dataloader.py``,
  line 665: ``self._pin_memory = loader.pin_memory and torch.accelerator.is_available()``),
  warm and repeated.

Probes on a busy machine are noisy (one loader's load per batch read 165-170 ms in one run
and 90-101 ms in the next), so the repeated ones return a :class:`Reading`: every reading,
their median and their spread, and :func:`disagreement_note` says when they disagree.
"""

from __future__ import annotations

import itertools
import logging
import math
import os
import statistics
import time
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.utils.data import DataLoader, Dataset, IterableDataset

from ...measure.transfer import payload_bytes, shared_memory_write_s, transfer_time_per_batch
from .cloning import sample_indices
from ..handover_fix import numpy_bytes
from .io_counters import read_chars

__all__ = ["MATTERS", "DISAGREE", "ItemCost", "HandOverCost", "Reading", "disagreement_note", "one_thread",
           "torch_threads", "worker_threads", "probe_items", "probe_hand_over", "probe_pinning", "tensor_bytes",
           "crosses_pickled", "in_flight_mb", "shared_memory_send_s", "ReadyItems"]

logger = logging.getLogger(__name__)

#: Repeated readings that disagree by more than this share of their median
#: (:attr:`Reading.spread`) are reported in the diagnosis's notes.
DISAGREE = 0.25


@dataclass
class Reading:
    """A probe taken more than once: every reading, so that its spread can be told.

    Attributes:
        readings_s: each reading, seconds per batch, in the order taken.
        threads: the torch threads the probe ran with.
    """

    readings_s: list[float]
    threads: int

    @property
    def median_s(self) -> float:
        """The median reading (NaN without any): one slow reading does not move it."""
        return statistics.median(self.readings_s) if self.readings_s else math.nan

    @property
    def spread(self) -> float:
        """``(max - min) / median``: 0.0 for one reading, NaN without any or with a zero median."""
        median = self.median_s
        if not self.readings_s or median == 0 or math.isnan(median):
            return math.nan
        return (max(self.readings_s) - min(self.readings_s)) / median

    def to_dict(self) -> dict[str, Any]:
        """The reading as JSON can hold it (NaN becomes None)."""
        def finite(x: float) -> float | None:
            return x if math.isfinite(x) else None
        return {"median_s": finite(self.median_s), "readings_s": list(self.readings_s),
                "spread": finite(self.spread), "threads": self.threads}


def _ms(seconds: float) -> str:
    ms = seconds * 1e3
    return f"{ms:.3g}" if ms < 1000 else f"{ms:.0f}"


#: A disagreement smaller than this share of the loop's time per batch is not worth a note.
MATTERS = 0.05


def disagreement_note(name: str, reading: Reading, loop_s: float | None = None) -> str | None:
    """A one-line note when ``reading``'s readings disagree by more than :data:`DISAGREE`
    (None otherwise): the median is still reported, but a busy machine can move a probe by
    half from one run to the next, and the reader should know how far to trust it. With
    ``loop_s`` (the loop's seconds per batch), a disagreement under :data:`MATTERS` of it
    is left out: it cannot move a prediction."""
    spread = reading.spread
    if not spread > DISAGREE:  # also False for NaN
        return None
    low, high = min(reading.readings_s), max(reading.readings_s)
    if loop_s is not None and math.isfinite(loop_s) and high - low < MATTERS * loop_s:
        return None
    return (f"the {name} probe's readings disagree by {spread:.0%} ({_ms(low)} to {_ms(high)} ms per batch): "
            "readings this far apart point to a busy machine (other processes, a throttled CPU) or to items "
            "whose cost varies, so its figures are less certain")


@dataclass
class ItemCost:
    """What the items and the collate of one batch cost in the main process.

    Attributes:
        items: items timed.
        item_s: mean wall seconds of ``dataset[i]``.
        item_cpu_s: mean CPU seconds of the thread during ``dataset[i]``.
        collate_s: wall seconds of ``collate_fn`` for a whole batch.
        collate_cpu_s: its CPU seconds.
        batch_size: items per batch (1 when the loader does not batch).
        batch: a batch made of the timed items (for the hand-over probes).
        chunk: the items ``batch`` was collated from.
        load_readings_s: the load per batch of each batch's worth of items timed (their mean
            times ``batch_size``, plus ``collate_s``), in the order fetched; one reading when
            fewer than two batches' worth were timed.
        threads: the torch threads the items ran with.
        read_bytes: bytes this process read during the median item (``rchar``,
            :func:`~feedgpu.diagnosis.sensing.io_counters.read_chars`; NaN where it cannot be read).
    """

    items: int
    item_s: float
    item_cpu_s: float
    collate_s: float
    collate_cpu_s: float
    batch_size: int
    batch: Any
    chunk: list[Any]
    load_readings_s: list[float] = field(default_factory=list)
    threads: int = 1
    read_bytes: float = math.nan

    @property
    def read_per_s(self) -> float:
        """Bytes per second one process reads while it fetches items alone (NaN: unknown)."""
        return self.read_bytes / self.item_s if self.item_s > 0 else math.nan

    @property
    def fetch_s(self) -> float:
        """Seconds to fetch a batch's items: ``batch_size * item_s``."""
        return self.batch_size * self.item_s

    @property
    def fetch_cpu_s(self) -> float:
        """CPU seconds to fetch a batch's items: ``batch_size * item_cpu_s``."""
        return self.batch_size * self.item_cpu_s

    @property
    def load_s(self) -> float:
        """Seconds one process needs to build a batch: items plus collate."""
        return self.fetch_s + self.collate_s

    @property
    def cpu_share(self) -> float:
        """CPU time over wall time of building a batch: 1 computes, 0 waits."""
        cpu = self.fetch_cpu_s + self.collate_cpu_s
        return min(cpu / self.load_s, 1.0) if self.load_s > 0 else 0.0

    @property
    def load_reading(self) -> Reading:
        """:attr:`load_readings_s` as a :class:`Reading` (``load_s`` alone if there are none)."""
        return Reading(list(self.load_readings_s) or [self.load_s], self.threads)


def _timed(call: Any) -> tuple[Any, float, float]:
    wall, cpu = time.perf_counter(), time.thread_time()
    out = call()
    return out, time.perf_counter() - wall, time.thread_time() - cpu


#: A first item slower than this many times the median of the others paid a one-off start
#: (opening a file, an index, a connection, in this process): it is left out of the means.
ONE_OFF_FIRST = 4.0


def _items(loader: DataLoader, deadline: float, wanted: int, reads: list[int] | None = None,
           keep: int | None = None, order: Any = None) -> tuple[list[Any], list[float], list[float], int]:
    """Up to ``wanted`` items (at least one, then until ``deadline``), the wall and CPU
    seconds of each, and how many items at the start those seconds leave out (1 for a
    one-off first item, else 0): ``walls[i]`` is of the item fetched ``i + skipped``-th. ``reads``, if
    given, gets the bytes this process read during each item (where they can be counted).
    ``keep``: the items returned, the first ``keep`` (all by default); the others are
    dropped a batch's worth (``keep`` items) at a time, as a worker drops a batch's items
    once it has collated them, so that the next ones reuse their memory as in a loop
    (items of megabytes held all at once would each take fresh pages, which a loop does not).
    ``order``: the indices to fetch, in order (default: a seeded sample, as the runs read)."""
    dataset = loader.dataset
    if isinstance(dataset, IterableDataset):
        stream = iter(dataset)
        fetch = lambda: next(stream)  # noqa: E731
    else:
        if order is not None:  # the loader's own batches, taken by the caller
            indices = iter(order)
        else:
            try:
                n = len(dataset)  # type: ignore[arg-type]
                indices = iter(sample_indices(n, wanted))  # the runs' first items
            except TypeError:  # no length: the loader's own order
                indices = itertools.chain.from_iterable(
                    b if isinstance(b, list) else [b] for b in iter(loader.batch_sampler or loader.sampler))
        fetch = lambda: dataset[next(indices)]  # noqa: E731
    items, walls, cpus, current = [], [], [], []
    while len(walls) < wanted and (not walls or time.perf_counter() < deadline):
        before = read_chars(os.getpid()) if reads is not None else None
        try:
            item, w, c = _timed(fetch)
        except StopIteration:
            break
        if before is not None:
            after = read_chars(os.getpid())
            if after is not None:
                reads.append(after - before)
        if keep is None or len(items) < keep:
            items.append(item)
        else:
            current.append(item)
            if len(current) >= keep:
                current.clear()
        del item
        walls.append(w)
        cpus.append(c)
    if not items:
        raise ValueError("the loader's dataset has no items: nothing to diagnose")
    if len(walls) >= 3 and walls[0] > ONE_OFF_FIRST * sorted(walls[1:])[(len(walls) - 1) // 2]:
        logger.debug("the first item took %.4f s, a one-off start: left out of the item cost", walls[0])
        return items, walls[1:], cpus[1:], 1
    return items, walls, cpus, 0


def _load_readings(walls: list[float], skipped: int, batch_size: int, collate_s: float) -> list[float]:
    """One load per batch for each batch's worth of items fetched: the mean of its timed
    items times ``batch_size``, plus ``collate_s``. Items past the last whole batch's worth
    join it (fewer than two batches' worth make one reading); a batch's worth whose only
    item was a one-off first has no reading."""
    fetched = len(walls) + skipped
    chunks = max(1, fetched // batch_size)
    readings = []
    for k in range(chunks):
        start = max(k * batch_size - skipped, 0)
        end = len(walls) if k == chunks - 1 else (k + 1) * batch_size - skipped
        part = walls[start:end]
        if part:
            readings.append(batch_size * sum(part) / len(part) + collate_s)
    return readings


@contextmanager
def torch_threads(n: int) -> Iterator[None]:
    """PyTorch on ``n`` threads meanwhile, the caller's count restored afterwards."""
    threads = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def one_thread() -> Any:
    """PyTorch on one thread, as in every DataLoader worker (the pinned
    ``torch/utils/data/_utils/worker.py``, line 274: ``torch.set_num_threads(1)``)."""
    return torch_threads(1)


class _ThreadsProbe(Dataset):
    """One item: the torch threads of the process that reads it. It wraps the user's
    dataset (attributes read and set through it reach a copy of the dataset in the
    worker), so that a ``worker_init_fn`` that uses ``get_worker_info().dataset`` runs."""

    def __init__(self, dataset: Any) -> None:
        self.dataset = dataset

    def __getattr__(self, name: str) -> Any:
        if name == "dataset":  # not set yet (unpickling): no recursion
            raise AttributeError(name)
        return getattr(self.dataset, name)

    def __len__(self) -> int:
        return 1

    def __getitem__(self, index: int) -> int:
        return torch.get_num_threads()


#: How long the worker that reports its threads may take to start and answer.
THREADS_TIMEOUT_S = 60.0


def worker_threads(loader: DataLoader) -> int:
    """The torch threads a worker of ``loader`` runs its items with.

    A worker sets one thread (the pinned ``torch/utils/data/_utils/worker.py``, line 274)
    and then calls the loader's ``worker_init_fn``, which may set another count. Without
    one, that is 1. With one, a single worker is started with the loader's
    ``worker_init_fn`` and start method, and asked: the function runs where it was meant
    to run, and whatever else it does (shard the dataset, open files, seed generators)
    stays in that worker, never in the user's process. A worker that cannot start or
    answer counts as one thread.
    """
    init = loader.worker_init_fn
    if init is None:
        return 1
    probe = DataLoader(_ThreadsProbe(loader.dataset), batch_size=None, num_workers=1, worker_init_fn=init,
                       multiprocessing_context=loader.multiprocessing_context, timeout=THREADS_TIMEOUT_S,
                       generator=torch.Generator())  # its workers' seed drawn from a generator of its own
    try:
        return int(next(iter(probe)))
    except Exception as error:  # noqa: BLE001 - the user's worker_init_fn failed, or the worker did
        logger.debug("a worker could not report its threads (%r): one thread assumed", error)
        return 1


def probe_items(loader: DataLoader, deadline: float, batches: int = 3, threads: int | None = None) -> ItemCost:
    """Time the items of ``batches`` batches and their collate, in this process.

    The figures are what a worker spends: with workers, PyTorch runs meanwhile on the
    threads a worker has (:func:`worker_threads`: one, unless the loader's
    ``worker_init_fn`` sets more); with 0 workers on one thread, as a worker of the fix
    would by default (the baseline run measures the main process as it is). Stops at
    ``deadline`` (a ``time.perf_counter()`` value) once it has one item: slow items are
    then timed on fewer. Each batch's worth of items gives a load reading
    (:attr:`ItemCost.load_readings_s`), so that a busy machine shows as a spread. With
    fewer items than a batch, the collate is timed on what there is, a batch's size of
    them repeated; that is also the batch for the hand-over probes.
    """
    if threads is None:
        threads = worker_threads(loader) if loader.num_workers > 0 else 1
    with torch_threads(threads):
        return _probe_items(loader, deadline, batches, threads)


def _probe_items(loader: DataLoader, deadline: float, batches: int, threads: int) -> ItemCost:
    batching = loader.batch_size is not None or loader.batch_sampler is not None
    order = None
    if loader.batch_size is not None:
        batch_size = loader.batch_size
    elif batching and not isinstance(loader.dataset, IterableDataset):
        # the user's batch_sampler (buckets of one shape, say): its own first batches, taken once (a
        # sampler that shuffles gives other batches each time), so the items collated are one batch's
        own = [list(b) for b in itertools.islice(iter(loader.batch_sampler), batches)]
        batch_size = max(1, len(own[0])) if own else 1
        order = [i for b in own for i in b]
    elif batching:
        batch_size = max(1, len(next(iter(loader.batch_sampler))))
    else:  # no automatic batching: each item is a batch
        batch_size = 1
    reads: list[int] = []
    items, walls, cpus, skipped = _items(loader, deadline, batches * batch_size if order is None else len(order),
                                         reads, keep=batch_size, order=order)
    # the median item's: a first item that imports lazily, or a thread reading meanwhile, is left out
    read = float(statistics.median(reads)) if reads else math.nan
    if batching:
        chunk = items[:batch_size]
        full = (chunk * math.ceil(batch_size / len(chunk)))[:batch_size]
        timings = []
        for _ in range(3):  # the median of three; each batch dropped before the next, as in a loop
            batch = None
            batch, wall, cpu = _timed(lambda: loader.collate_fn(full))
            timings.append((wall, cpu))
        collate_s, collate_cpu = sorted(timings)[1]
    else:
        full = items[0]
        batch, collate_s, collate_cpu = _timed(lambda: loader.collate_fn(full))
    timed = len(walls)
    cost = ItemCost(timed, sum(walls) / timed, sum(cpus) / timed, collate_s, collate_cpu, batch_size, batch, full,
                    _load_readings(walls, skipped, batch_size, collate_s), threads, read)
    logger.debug("items: %.5f s each (CPU share %.2f), collate %.5f s, on %d threads; loads %s", cost.item_s,
                 cost.cpu_share, collate_s, threads, cost.load_readings_s)
    return cost


class ReadyItems(Dataset):
    """The same items, ready, for every index: a loader over it with ``batch_size=None`` and
    the user's ``collate_fn`` makes the user's batch at the cost of the collate alone (the
    main process's floor, :meth:`feedgpu.diagnosis.modes.live._Diagnosis.measure_floor`).

    Args:
        items: what the collate takes (a batch's items, or one item without batching).
        n: how many batches it holds.
    """

    def __init__(self, items: Any, n: int = 100_000) -> None:
        self.items = items
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, index: int) -> Any:
        return self.items


def tensor_bytes(batch: Any) -> int:
    """Bytes of tensor data in a batch (what travels in shared memory)."""
    return payload_bytes(batch) - numpy_bytes(batch) if payload_bytes(batch) else 0


def crosses_pickled(batch: Any) -> bool:
    """Whether most of a batch crosses from a worker pickled (numpy arrays, Python objects)
    rather than as tensors in shared memory."""
    total = payload_bytes(batch)
    return numpy_bytes(batch) >= total / 2 if total else True


def shared_memory_send_s(nbytes: int) -> float:
    """What a worker pays, more than one process, to write ``nbytes`` of a batch into shared
    memory: the least of three :func:`shared_memory_write_s` (each the median of three),
    the cost with nothing else in the way. (On the course's virtual machine, putting a
    tensor of 128 KB or more into shared memory took either ~0.2 ms or ~8 ms, whatever its
    size, from one minute to the next; the least keeps the spells of 8 ms out.)"""
    return min(shared_memory_write_s((max(nbytes, 1),), torch.uint8, repeats=3) for _ in range(3))


def in_flight_mb(loader: DataLoader, batch: Any) -> float:
    """MB of batches one worker can hold at once: the ``prefetch_factor`` it has been
    asked for and the one it builds (0 without workers)."""
    if not loader.num_workers:
        return 0.0
    return ((loader.prefetch_factor or 2) + 1) * payload_bytes(batch) / 2**20


@dataclass
class HandOverCost:
    """What handing one batch from a worker to the main process costs, seconds per batch.

    Attributes:
        send_s: the worker's part (pickling, or writing fresh shared memory).
        receive_s: the main process's part (reading and unpickling, or mapping).
        pickled: whether most of the batch's bytes are pickled (numpy arrays) rather than
            carried in shared memory (tensors).
        bytes: the batch's array bytes.
    """

    send_s: float
    receive_s: float
    pickled: bool
    bytes: int


def probe_hand_over(batch: Any, multiprocessing_context: Any = None) -> HandOverCost:
    """Measure both sides of handing ``batch`` from a worker to this process.

    The main process's side is :func:`transfer_time_per_batch` (one worker, the median of
    six timed ``next()`` calls of a batch that is ready: what receiving costs on the clock;
    a pickle is read from the pipe as the worker writes it, so this is more than the CPU
    time of unpickling). A pickled batch costs the worker about what it costs the main
    process (one writes every byte, the other reads it: the model's assumption); a tensor
    costs the worker the writing of fresh shared memory (:func:`shared_memory_send_s`).
    """
    total = payload_bytes(batch)
    pickled = crosses_pickled(batch)
    receive = transfer_time_per_batch(batch, batches=6, warmup=1, statistic="median",
                                      multiprocessing_context=multiprocessing_context)
    send = receive if pickled else shared_memory_send_s(tensor_bytes(batch))
    logger.debug("hand-over of %d bytes: send %.5f s, receive %.5f s", total, send, receive)
    return HandOverCost(send, receive, pickled, total)


def _tensors(batch: Any) -> list[torch.Tensor]:
    """The tensors in a batch: in tensors, dicts, lists and tuples, as the DataLoader's
    ``pin_memory`` walks it."""
    tensors: list[torch.Tensor] = []

    def walk(obj: Any) -> None:
        if isinstance(obj, torch.Tensor):
            tensors.append(obj)
        elif isinstance(obj, dict):
            for value in obj.values():
                walk(value)
        elif isinstance(obj, (list, tuple)):
            for value in obj:
                walk(value)

    walk(batch)
    return tensors


def probe_pinning(batch: Any, threads: int | None = None, repeats: int = 5,
                  deadline: float | None = None) -> Reading | None:
    """Seconds to pin the batch's tensors, warm, ``repeats`` times; None where pinning does
    nothing (no accelerator).

    Warm: the batch is pinned once untimed first. The process's first ``pin_memory()``
    pays CUDA's start-up and a fresh ``cudaHostAlloc``, 116-141 ms on an H200, where a
    19.7 MB batch then pins in about 0.3 ms (16 threads) or 1.5 ms (one thread): a loop
    pays the cold pin once and the warm one every batch, from the caching host allocator
    (each batch's pinned tensors are dropped before the next pin, so their blocks come
    back, as in a loop).

    Threads: with workers, the DataLoader pins on its pin thread, which runs on one torch
    thread (the pinned ``torch/utils/data/_utils/pin_memory.py``, line 21, in
    ``_pin_memory_loop``: ``torch.set_num_threads(1)``); with 0 workers the main thread
    pins, on torch's own threads. Pass ``threads`` to match (the caller's count is restored
    afterwards); without it the probe runs on the threads it finds. Either way the reading
    records the count.

    In the diagnosis's model this is the main process's time per batch (its pin thread's
    with workers), not a stage of loading a batch.

    Stops at ``deadline`` (a ``time.perf_counter()`` value) once two readings are timed.
    """
    if not torch.accelerator.is_available():
        return None
    tensors = _tensors(batch)
    with torch_threads(threads) if threads is not None else nullcontext():
        used = torch.get_num_threads()
        pinned = [t.pin_memory() for t in tensors]  # untimed: CUDA's start-up, the host cache filled
        del pinned
        readings: list[float] = []
        while len(readings) < max(repeats, 1) and (len(readings) < 2 or deadline is None
                                                    or time.perf_counter() < deadline):
            start = time.perf_counter()
            pinned = [t.pin_memory() for t in tensors]
            readings.append(time.perf_counter() - start)
            del pinned  # its blocks go back to the host cache for the next pin
    reading = Reading(readings, used)
    logger.debug("pinning: %s s per batch on %d threads", readings, used)
    return reading
