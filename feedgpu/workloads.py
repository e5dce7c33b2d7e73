"""Datasets whose cost per item is known, for measuring data loaders.

Autograded cells and tests must never compare a raw time with a fixed number, because a
student's laptop may be slow or busy. Instead they load items whose cost we chose, and
check ratios against that cost. Two kinds of cost are provided:

* :class:`SleepDataset` waits (``time.sleep``) a fixed time per item. It stands for I/O:
  reading from a disk or a network. Waiting uses no CPU, so workers speed it up even when
  there are more workers than cores.
* :class:`SpinDataset` burns a fixed amount of CPU time per item. It stands for decoding
  and augmentation. Workers speed it up only up to the number of free cores.

Both live in this importable module, not in a notebook cell, because on macOS and Windows
DataLoader workers are started with *spawn*: each worker imports the dataset's class by
name, and a class defined in a notebook cell cannot be found that way.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import torch
from torch.utils.data import Dataset

__all__ = ["SleepDataset", "SpinDataset", "make_item", "spin_cpu"]


def spin_cpu(seconds: float) -> None:
    """Keep the calling thread busy until it has used ``seconds`` of CPU time.

    The cost is counted in CPU time of this thread (``time.thread_time``), not wall-clock
    time, so it is a fixed amount of *work*: when more threads or processes than cores
    compete, each spin takes longer on the wall clock, as real decoding would.

    Args:
        seconds: CPU seconds to burn; 0 returns at once.

    Raises:
        ValueError: if ``seconds`` is negative.

    Note:
        On Windows the thread clock ticks about every 15.6 ms, so spins shorter than
        that are rounded up to a tick there.
    """
    if seconds < 0:
        raise ValueError(f"seconds must be >= 0, got {seconds!r}")
    deadline = time.thread_time() + seconds
    x = 0
    while time.thread_time() < deadline:
        for _ in range(200):  # a little arithmetic between clock reads
            x = (x * 1103515245 + 12345) & 0x7FFFFFFF


def make_item(index: int, shape: tuple[int, ...], as_numpy: bool) -> torch.Tensor | np.ndarray:
    """Build the payload of item ``index``: an array of ``shape`` filled with ``index``.

    Filling with the index lets a test check which items a batch holds and in what order.

    Args:
        index: the item's index.
        shape: the array's shape; ``()`` gives a scalar (a 0-d array).
        as_numpy: return a ``float32`` numpy array instead of a ``float32`` tensor.

    Returns:
        A ``float32`` tensor or numpy array of ``shape``, every element equal to ``index``.
    """
    if as_numpy:
        return np.full(shape, index, dtype=np.float32)
    return torch.full(shape, float(index), dtype=torch.float32)


class _CostDataset(Dataset):
    """Shared wiring: ``n`` items, each an array from :func:`make_item`."""

    def __init__(self, n: int, item_shape: tuple[int, ...] = (), as_numpy: bool = False) -> None:
        if int(n) != n or n < 0:
            raise ValueError(f"n must be a non-negative integer, got {n!r}")
        self.n = int(n)
        self.item_shape = tuple(int(s) for s in item_shape)
        self.as_numpy = bool(as_numpy)

    def __len__(self) -> int:
        return self.n

    def _check_index(self, index: int) -> int:
        if index < 0:
            index += self.n
        if not 0 <= index < self.n:
            raise IndexError(f"index {index} out of range for a dataset of {self.n} items")
        return index

    def _cost(self) -> None:  # pragma: no cover - overridden
        raise NotImplementedError

    def __getitem__(self, index: int) -> Any:
        """Pay the item's cost, then return its payload (see :func:`make_item`)."""
        index = self._check_index(index)
        self._cost()
        return make_item(index, self.item_shape, self.as_numpy)


class SleepDataset(_CostDataset):
    """A dataset whose items each take ``seconds_per_item`` of waiting (I/O-like).

    Args:
        n: number of items.
        seconds_per_item: how long ``__getitem__`` sleeps.
        item_shape: shape of each item's payload (default a scalar). A large shape makes
            the batch expensive to send from a worker to the main process.
        as_numpy: return numpy arrays instead of tensors (numpy batches are pickled
            between processes; tensors go through shared memory).

    Raises:
        ValueError: if ``n`` or ``seconds_per_item`` is negative.

    ``dataset[i]`` sleeps, then returns a ``float32`` array of ``item_shape`` filled with
    ``i``; with the default collate a batch of ``B`` scalar items is a tensor of shape
    ``(B,)`` holding the item indices.
    """

    def __init__(
        self,
        n: int,
        seconds_per_item: float,
        item_shape: tuple[int, ...] = (),
        as_numpy: bool = False,
    ) -> None:
        super().__init__(n, item_shape, as_numpy)
        if seconds_per_item < 0:
            raise ValueError(f"seconds_per_item must be >= 0, got {seconds_per_item!r}")
        self.seconds_per_item = float(seconds_per_item)

    def _cost(self) -> None:
        if self.seconds_per_item > 0:
            time.sleep(self.seconds_per_item)

    def __repr__(self) -> str:
        return f"SleepDataset(n={self.n}, seconds_per_item={self.seconds_per_item})"


class SpinDataset(_CostDataset):
    """A dataset whose items each cost ``seconds`` of CPU time (compute-like).

    Args:
        n: number of items.
        seconds: CPU seconds burnt per item (see :func:`spin_cpu`).
        item_shape: shape of each item's payload (default a scalar).
        as_numpy: return numpy arrays instead of tensors.

    Raises:
        ValueError: if ``n`` or ``seconds`` is negative.

    ``dataset[i]`` spins, then returns a ``float32`` array of ``item_shape`` filled with
    ``i``. On an idle machine a spin takes ``seconds`` of wall-clock time; with more busy
    workers than cores it takes longer, which is the lesson.
    """

    def __init__(
        self,
        n: int,
        seconds: float,
        item_shape: tuple[int, ...] = (),
        as_numpy: bool = False,
    ) -> None:
        super().__init__(n, item_shape, as_numpy)
        if seconds < 0:
            raise ValueError(f"seconds must be >= 0, got {seconds!r}")
        self.seconds = float(seconds)

    def _cost(self) -> None:
        spin_cpu(self.seconds)

    def __repr__(self) -> str:
        return f"SpinDataset(n={self.n}, seconds={self.seconds})"
