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
  line 665: ``self._pin_memory = loader.pin_memory and torch.accelerator.is_available()``).
"""

from __future__ import annotations

import itertools
import logging
import math
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch
from torch.utils.data import DataLoader, IterableDataset

from ..measure.transfer import payload_bytes, shared_memory_write_s, transfer_time_per_batch
from .cloning import sample_indices
from .collate import numpy_bytes

__all__ = ["ItemCost", "HandOverCost", "one_thread", "probe_items", "probe_hand_over", "probe_pinning", "tensor_bytes",
           "crosses_pickled", "in_flight_mb", "shared_memory_send_s"]

logger = logging.getLogger(__name__)


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
    """

    items: int
    item_s: float
    item_cpu_s: float
    collate_s: float
    collate_cpu_s: float
    batch_size: int
    batch: Any
    chunk: list[Any]

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


def _timed(call: Any) -> tuple[Any, float, float]:
    wall, cpu = time.perf_counter(), time.thread_time()
    out = call()
    return out, time.perf_counter() - wall, time.thread_time() - cpu


#: A first item slower than this many times the median of the others paid a one-off start
#: (opening a file, an index, a connection, in this process): it is left out of the means.
ONE_OFF_FIRST = 4.0


def _items(loader: DataLoader, deadline: float, wanted: int) -> tuple[list[Any], float, float, int]:
    """Up to ``wanted`` items (at least one, then until ``deadline``), their wall and CPU
    seconds, and how many items those seconds are of (a one-off first item left out)."""
    dataset = loader.dataset
    if isinstance(dataset, IterableDataset):
        stream = iter(dataset)
        fetch = lambda: next(stream)  # noqa: E731
    else:
        try:
            n = len(dataset)  # type: ignore[arg-type]
            indices = iter(sample_indices(n, wanted))  # the runs' first items
        except TypeError:  # no length: the loader's own order
            indices = itertools.chain.from_iterable(
                b if isinstance(b, list) else [b] for b in iter(loader.batch_sampler or loader.sampler))
        fetch = lambda: dataset[next(indices)]  # noqa: E731
    items, walls, cpus = [], [], []
    while len(items) < wanted and (not items or time.perf_counter() < deadline):
        try:
            item, w, c = _timed(fetch)
        except StopIteration:
            break
        items.append(item)
        walls.append(w)
        cpus.append(c)
    if not items:
        raise ValueError("the loader's dataset has no items: nothing to diagnose")
    if len(walls) >= 3 and walls[0] > ONE_OFF_FIRST * sorted(walls[1:])[(len(walls) - 1) // 2]:
        logger.debug("the first item took %.4f s, a one-off start: left out of the item cost", walls[0])
        walls, cpus = walls[1:], cpus[1:]
    return items, sum(walls), sum(cpus), len(walls)


@contextmanager
def one_thread() -> Iterator[None]:
    """PyTorch on one thread, as in every DataLoader worker (the pinned
    ``torch/utils/data/_utils/worker.py``, line 274: ``torch.set_num_threads(1)``)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def probe_items(loader: DataLoader, deadline: float, batches: int = 2) -> ItemCost:
    """Time the items of ``batches`` batches and their collate, in this process.

    PyTorch runs on one thread meanwhile, as in a worker: the figures are what a worker
    spends (with 0 workers the baseline run measures the main process as it is). Stops at
    ``deadline`` (a ``time.perf_counter()`` value) once it has one item: slow items are
    then timed on fewer. With fewer items than a batch, the collate is timed on what there
    is, a batch's size of them repeated; that is also the batch for the hand-over probes.
    """
    with one_thread():
        return _probe_items(loader, deadline, batches)


def _probe_items(loader: DataLoader, deadline: float, batches: int) -> ItemCost:
    batching = loader.batch_size is not None or loader.batch_sampler is not None
    if loader.batch_size is not None:
        batch_size = loader.batch_size
    elif batching:  # the user's batch_sampler: the size of its first batch
        batch_size = max(1, len(next(iter(loader.batch_sampler))))
    else:  # no automatic batching: each item is a batch
        batch_size = 1
    items, wall, cpu, timed = _items(loader, deadline, batches * batch_size)
    if batching:
        chunk = items[:batch_size]
        full = (chunk * math.ceil(batch_size / len(chunk)))[:batch_size]
        collates = [_timed(lambda: loader.collate_fn(full)) for _ in range(3)]  # median of three
        batch, collate_s, collate_cpu = sorted(collates, key=lambda c: c[1])[1]
    else:
        full = items[0]
        batch, collate_s, collate_cpu = _timed(lambda: loader.collate_fn(full))
    cost = ItemCost(timed, wall / timed, cpu / timed, collate_s, collate_cpu, batch_size, batch, full)
    logger.debug("items: %.5f s each (CPU share %.2f), collate %.5f s", cost.item_s, cost.cpu_share, collate_s)
    return cost


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


def probe_pinning(batch: Any) -> float | None:
    """Seconds to pin the batch's tensors, or None where pinning does nothing (no accelerator)."""
    if not torch.accelerator.is_available():
        return None
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
    start = time.perf_counter()
    for tensor in tensors:
        tensor.pin_memory()
    return time.perf_counter() - start
