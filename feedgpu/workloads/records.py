"""Datasets held in memory, for watching what DataLoader workers do to it.

A dataset built in the main process before the workers start is, with *fork*, shared
with every worker, page by page, until someone writes to a page. Reading a Python object
is such a write: it changes the object's reference count. So a worker that reads every
record of a list of Python objects slowly copies the whole list (*copy-on-write*), while
a worker that reads rows of one numpy array writes nothing of it.

* :func:`make_python_records`: ``n`` small Python objects (ints), about 28 bytes each;
* :class:`RecordListDataset`: items are records of a Python list (copied on read);
* :class:`RecordArrayDataset`: items are rows of one numpy array (not copied on read);
* :class:`PidDataset`: each item says which process built it, so a test knows the
  loader's worker processes without asking the DataLoader's private state;
* :func:`serialize_records` and :class:`SerializedRecordDataset`: every record pickled
  into one ``uint8`` buffer with an ``int64`` offsets array (the fix detectron2 uses), and
  the dataset that unpickles record ``i`` from them: two objects, whatever the number of
  records, so nothing is copied on read. Held as numpy arrays, spawn and forkserver copy
  the buffer into every worker; held as torch tensors, they send it through shared memory;
* :func:`collate_touch`: a collate that reads every value of every item (as a real
  collate does) and hands back only their count, so the workers' copies show and the
  batches cost nothing to send;
* :func:`freeze_gc`: a ``worker_init_fn`` that freezes the garbage collector in each
  worker, so it never walks (and so copies) the objects the worker inherited: from the
  main process with *fork*, from the server (torch, if preloaded) with *forkserver*.

DataLoader workers import these by name (*spawn*), so they live in a module.
"""

from __future__ import annotations

import gc
import os
import pickle
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from torch.utils.data import Dataset

__all__ = ["make_python_records", "RecordListDataset", "RecordArrayDataset", "PidDataset",
           "serialize_records", "SerializedRecordDataset", "collate_touch", "freeze_gc"]


def _position(index: int, n: int) -> int:
    """``index`` as a position in ``0 .. n-1`` (negative counts from the end)."""
    position = index + n if index < 0 else index
    if not 0 <= position < n:
        raise IndexError(f"index {index} out of range for a dataset of {n} items")
    return position


def make_python_records(n: int) -> list[int]:
    """``n`` distinct Python ints, each its own object (28 bytes, plus 8 in the list).

    Record ``i`` is ``2**40 + i``: large enough that Python never shares it with a cached
    small int, so reading it writes to memory that only this list uses.

    Raises:
        ValueError: if ``n`` is negative.
    """
    if int(n) != n or n < 0:
        raise ValueError(f"n must be an integer >= 0, got {n!r}")
    return [2**40 + i for i in range(int(n))]


class RecordListDataset(Dataset):
    """Items are the records of a Python list: ``dataset[i]`` returns ``records[i]``.

    Returning the record takes a new reference to it, which writes its reference count:
    in a forked worker, that copies the record's page of memory.

    Args:
        records: any sequence of Python objects, e.g. :func:`make_python_records`.
    """

    def __init__(self, records: Sequence[Any]) -> None:
        self.records = records

    def __len__(self) -> int:
        return len(self.records)

    def __getitem__(self, index: int) -> Any:
        return self.records[_position(index, len(self.records))]


class RecordArrayDataset(Dataset):
    """Items are rows of one numpy array: ``dataset[i]`` returns ``int(array[i])`` (for a
    1-d array) or a copy of row ``i``.

    Reading a row makes a new object and only reads the array's memory, so forked workers
    keep sharing it.

    Args:
        array: a numpy array; its first axis indexes the items.
    """

    def __init__(self, array: np.ndarray) -> None:
        self.array = np.asarray(array)

    def __len__(self) -> int:
        return len(self.array)

    def __getitem__(self, index: int) -> Any:
        row = self.array[_position(index, len(self.array))]
        return row.item() if np.ndim(row) == 0 else np.array(row)


class PidDataset(Dataset):
    """``dataset[i]`` returns ``os.getpid()`` of the process that built item ``i``.

    With a DataLoader, the batches then list the pids of its workers (or of the main
    process when ``num_workers=0``).

    Args:
        n: number of items.

    Raises:
        ValueError: if ``n`` is negative.
    """

    def __init__(self, n: int) -> None:
        if int(n) != n or n < 0:
            raise ValueError(f"n must be an integer >= 0, got {n!r}")
        self.n = int(n)

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, index: int) -> int:
        _position(index, self.n)
        return os.getpid()


def serialize_records(records: list[Any] | tuple[Any, ...]) -> tuple[np.ndarray, np.ndarray]:
    """Every record pickled (``pickle.HIGHEST_PROTOCOL``), end to end, into one buffer.

    Returns:
        ``(buffer, offsets)``: ``buffer`` a 1-d ``uint8`` array that owns its memory,
        ``offsets`` ``len(records) + 1`` ``int64`` positions from 0 to ``len(buffer)``:
        record ``i`` is ``pickle.loads(buffer[offsets[i]:offsets[i + 1]])``, the layout
        :class:`SerializedRecordDataset` reads.

    Raises:
        TypeError: ``records`` is not a list or a tuple (a generator could be read only once).
    """
    if not isinstance(records, (list, tuple)):
        raise TypeError(f"records must be a list or a tuple, got {type(records).__name__}")
    blobs = [pickle.dumps(r, protocol=pickle.HIGHEST_PROTOCOL) for r in records]
    offsets = np.zeros(len(blobs) + 1, dtype=np.int64)
    np.cumsum([len(b) for b in blobs], out=offsets[1:])
    return np.frombuffer(b"".join(blobs), dtype=np.uint8).copy(), offsets


class SerializedRecordDataset(Dataset):
    """Items are pickled records in one buffer: ``dataset[i]`` is
    ``pickle.loads(buffer[offsets[i]:offsets[i + 1]])``, a new object each time.

    The records live in two arrays instead of millions of Python objects: reading one
    writes no reference count of the others, so forked workers keep sharing the buffer.

    Under *spawn* or *forkserver* the DataLoader pickles the dataset into each worker
    (``multiprocessing_context.Process(..., args=(..., dataset, ...))``, pickled by
    multiprocessing's ``ForkingPickler``). Numpy arrays are pickled as their bytes, so
    each worker gets its own copy of the buffer: compact, and never growing. Torch
    tensors are pickled by torch's reductions for multiprocessing
    (``torch/multiprocessing/reductions.py``, registered with ``ForkingPickler`` when
    torch is imported): the tensor's storage is moved into shared memory once, in this
    process, and each worker maps the same pages. So pass tensors
    (``torch.from_numpy(buffer)``, ``torch.from_numpy(offsets)``) to share the buffer
    under every start method.

    Args:
        buffer: the pickled records one after another: a 1-d ``uint8`` numpy array or
            torch tensor.
        offsets: ``n + 1`` non-decreasing positions in ``buffer``, from 0 to
            ``len(buffer)``: record ``i`` is ``buffer[offsets[i]:offsets[i + 1]]``. An
            integer numpy array with a numpy buffer (kept as ``int64``), an integer torch
            tensor with a tensor buffer (kept as ``torch.int64``).

    Raises:
        TypeError: ``buffer`` is neither a 1-d uint8 array nor a 1-d uint8 tensor, or
            ``offsets`` is not a 1-d integer array (tensor) like ``buffer``.
        ValueError: ``offsets`` is empty, does not start at 0, decreases, or does not end
            at ``len(buffer)``.
    """

    def __init__(self, buffer: np.ndarray | torch.Tensor, offsets: np.ndarray | torch.Tensor) -> None:
        if isinstance(buffer, torch.Tensor):
            if buffer.dtype != torch.uint8 or buffer.dim() != 1:
                raise TypeError(f"a buffer tensor must be 1-d of torch.uint8, got {_describe(buffer)}")
            if (not isinstance(offsets, torch.Tensor) or offsets.dim() != 1
                    or offsets.dtype.is_floating_point or offsets.dtype.is_complex or offsets.dtype == torch.bool):
                raise TypeError(f"with a buffer tensor, offsets must be a 1-d integer tensor, got {_describe(offsets)}")
            offsets = offsets.to(torch.int64)
            positions = offsets.numpy()
        else:
            if not isinstance(buffer, np.ndarray) or buffer.dtype != np.uint8 or buffer.ndim != 1:
                raise TypeError(f"buffer must be a 1-d numpy array of uint8, got {_describe(buffer)}")
            if not isinstance(offsets, np.ndarray) or offsets.dtype.kind not in "iu" or offsets.ndim != 1:
                raise TypeError(f"offsets must be a 1-d numpy array of integers, got {_describe(offsets)}")
            offsets = positions = offsets.astype(np.int64, copy=False)
        if (len(positions) == 0 or positions[0] != 0 or positions[-1] != len(buffer)
                or np.any(np.diff(positions) < 0)):
            raise ValueError("offsets must hold n + 1 non-decreasing positions from 0 to len(buffer) "
                             f"= {len(buffer)}, got {len(positions)} values from "
                             f"{positions[0] if len(positions) else None} to "
                             f"{positions[-1] if len(positions) else None}")
        self.buffer = buffer
        self.offsets = offsets

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def __getitem__(self, index: int) -> Any:
        i = _position(index, len(self.offsets) - 1)
        buffer, offsets = self.buffer, self.offsets
        if isinstance(buffer, torch.Tensor):
            # numpy views of the same memory (no copy), made anew for each item: a view kept
            # would point to the old memory after torch moves the storage into shared memory
            buffer, offsets = buffer.numpy(), offsets.numpy()
        return pickle.loads(buffer[offsets[i]:offsets[i + 1]])


def _describe(value: Any) -> str:
    if isinstance(value, np.ndarray):
        return f"a {value.ndim}-d array of {value.dtype}"
    if isinstance(value, torch.Tensor):
        return f"a {value.dim()}-d tensor of {value.dtype}"
    return type(value).__name__


def _touch(value: Any) -> int:
    if isinstance(value, dict):
        return sum(_touch(v) for v in value.values())
    if isinstance(value, (list, tuple)):
        return sum(_touch(v) for v in value)
    return 1


def collate_touch(batch: Sequence[Any]) -> int:
    """The number of items in ``batch``, after reading every value of every item.

    A real collate (``default_collate``) reads every field of every record, which writes
    each object's reference count; this one does the same reading and returns one int,
    so that what a worker copies shows, and the batches cost nothing to send back.
    """
    for item in batch:
        _touch(item)
    return len(batch)


def freeze_gc(worker_id: int) -> None:
    """A DataLoader ``worker_init_fn``: ``gc.freeze()`` in the worker, before it reads any item.

    A full collection walks every container object the process holds and writes to each
    one's header. In a worker that shares memory with the process it was forked from (the
    main process with *fork*, the forkserver with *forkserver*), that copies every page
    holding an inherited object as soon as the worker makes enough objects of its own to
    trigger one. Freezing moves the inherited objects into a generation the collector
    never visits; the worker's own objects are collected as usual. (With *fork*, calling
    ``gc.freeze()`` in the main process before the workers start does the same.)

    Args:
        worker_id: the worker's number (DataLoader passes it; unused).
    """
    gc.freeze()
