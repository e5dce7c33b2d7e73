"""Items that are arrays of a chosen shape and dtype, and the two ways to collate them.

* :func:`make_array` is the course's one filler: item ``i`` is an array filled with
  ``i % 256``, so a test can tell which items a batch holds and in what order;
  :func:`make_records` makes a batch's worth of them.
* :class:`SleepArrayDataset`: items are numpy arrays, each after a sleep of known length
  (optionally jittered), like the Stack Overflow question's iterable that sleeps, then
  returns ``np.random.random((1000, 150))``.
* :func:`collate_list` (the question's collate: the batch stays a list of arrays) and
  :func:`collate_tensor` (one contiguous tensor, as ``default_collate`` makes it).

DataLoader workers import these by name, so they live in a module (*spawn*).
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from torch.utils.data import Dataset, default_collate

__all__ = [
    "make_array",
    "make_records",
    "SleepArrayDataset",
    "collate_list",
    "collate_tensor",
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
            :func:`feedgpu.model.draw_load_times`), drawn from a generator seeded by
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
