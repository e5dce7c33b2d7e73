"""Items that are numpy arrays of a chosen shape and dtype, and the two ways to collate them.

* :func:`make_array` is the course's one filler (defined with the datasets in
  :mod:`~feedgpu.workloads.cost`, re-exported here): item ``i`` is an array filled with
  ``i % 256``, so a test can tell which items a batch holds and in what order;
  :func:`make_records` makes a batch's worth of them.
* :class:`SleepArrayDataset`: a :class:`~feedgpu.workloads.cost.SleepDataset` whose items
  are numpy arrays, each after a sleep of known length (optionally jittered), like the
  Stack Overflow question's iterable that sleeps, then returns
  ``np.random.random((1000, 150))``.
* :func:`collate_list` (the question's collate: the batch stays a list of arrays) and
  :func:`collate_tensor` (one contiguous tensor, as ``default_collate`` makes it).

DataLoader workers import these by name, so they live in a module (*spawn*).
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from torch.utils.data import default_collate

from ..base.checks import check_int, check_number
from .cost import SleepDataset, make_array

__all__ = [
    "make_array",
    "make_records",
    "SleepArrayDataset",
    "collate_list",
    "collate_tensor",
]


def make_records(n: int, shape: Sequence[int], dtype: Any = "float64") -> list[np.ndarray]:
    """``n`` items as a worker's dataset would return them: ``[make_array(i, ...)]``.

    This is what a ``collate_fn`` receives: a list of ``batch_size`` records.

    Args:
        n: how many records.
        shape: each record's shape.
        dtype: each record's dtype.

    Returns:
        A list of ``n`` numpy arrays; record ``i`` is filled with ``i % 256``.

    Raises:
        ValueError: if ``n`` is negative or not a whole number.
    """
    return [make_array(i, shape, dtype) for i in range(check_int("n", n))]


class SleepArrayDataset(SleepDataset):
    """A map-style dataset whose items are numpy arrays, each after a known sleep.

    ``dataset[i]`` sleeps ``item_seconds(i)`` (I/O-like: it uses no CPU, so workers beyond
    the core count still help), then returns ``make_array(i, shape, dtype)``.

    Args:
        n: number of items.
        seconds_per_item: mean sleep per item, in seconds.
        shape: shape of each item (the question's small item is ``(10, 150)``, its large
            one ``(1000, 150)``).
        dtype: dtype of each item (the question's ``np.random.random`` gives float64).
        jitter: coefficient of variation of the sleep (0 = always ``seconds_per_item``).
            Sleeps follow a gamma distribution (see
            :func:`feedgpu.models.pipeline.draw_load_times`), drawn from a generator seeded by
            ``seed`` and the index, so item ``i`` sleeps the same in every run and in
            every worker.
        seed: seed for the jittered sleeps (any integer).

    Raises:
        ValueError: if ``n``, ``seconds_per_item`` or ``jitter`` is negative, or a time
            or the jitter is not finite.

    With ``batch_size=None`` in the DataLoader, each item is a whole "batch": use that,
    with the batch's load time as ``seconds_per_item``, to give every batch its own
    random load time.
    """

    as_numpy = True

    def __init__(
        self,
        n: int,
        seconds_per_item: float,
        shape: Sequence[int] = (10, 150),
        dtype: Any = "float64",
        jitter: float = 0.0,
        seed: int = 0,
    ) -> None:
        super().__init__(n, seconds_per_item, item_shape=shape)
        self.dtype = np.dtype(dtype)
        self.jitter = check_number("jitter", jitter)
        self.seed = check_int("seed", seed, minimum=None)

    @property
    def shape(self) -> tuple[int, ...]:
        """The shape of every item (``item_shape``)."""
        return self.item_shape

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
