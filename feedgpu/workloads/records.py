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
  loader's worker processes without asking the DataLoader's private state.

DataLoader workers import these by name (*spawn*), so they live in a module.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import numpy as np
from torch.utils.data import Dataset

__all__ = ["make_python_records", "RecordListDataset", "RecordArrayDataset", "PidDataset"]


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
