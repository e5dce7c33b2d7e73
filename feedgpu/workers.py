"""Workloads and worker helpers for notebook 02 (single vs multi-process loading).

:mod:`feedgpu.workloads` has items that only wait (:class:`~feedgpu.workloads.SleepDataset`)
or only compute (:class:`~feedgpu.workloads.SpinDataset`). Real items do both: a file is
read (waiting), then decoded (computing). This module adds:

* :class:`MixedDataset`: each item waits, then computes, in a proportion you choose;
* :class:`SlowStartDataset`: the first items of every pass are slow, as after a cold
  cache, to test that a timing harness leaves its warm-up out;
* :class:`MatmulDataset`: each item multiplies numpy matrices, so it runs on numpy's
  BLAS thread pool, which PyTorch does not limit inside workers;
* :class:`ThreadReportDataset`: each item reports the thread pools of the process that
  built it, so a notebook can see what a worker really runs with;
* :func:`limit_worker_threads`: a ``worker_init_fn`` that limits a worker's pools to one
  thread.

Everything here is used by DataLoader workers, so it lives in an importable module: with
*spawn* (macOS, Windows) a worker imports classes and functions by name, and one defined
in a notebook cell cannot be found that way.
"""

from __future__ import annotations

import logging
import time
from typing import Any

import numpy as np
import torch
from torch.utils.data import Dataset, get_worker_info

from .workloads import _CostDataset, spin_cpu

logger = logging.getLogger(__name__)

__all__ = [
    "MixedDataset",
    "SlowStartDataset",
    "MatmulDataset",
    "ThreadReportDataset",
    "blas_threads",
    "limit_worker_threads",
]


class MixedDataset(_CostDataset):
    """A dataset whose items each wait ``wait_s`` (I/O), then burn ``cpu_s`` of CPU time.

    Args:
        n: number of items.
        cpu_s: CPU seconds per item (see :func:`~feedgpu.workloads.spin_cpu`), like decoding.
        wait_s: seconds of sleep per item, like reading a file or a network reply.
        item_shape: shape of each item's payload (default a scalar).
        as_numpy: return numpy arrays instead of tensors.

    Raises:
        ValueError: if ``n``, ``cpu_s`` or ``wait_s`` is negative.

    ``dataset[i]`` sleeps, spins, then returns a ``float32`` array of ``item_shape``
    filled with ``i`` (see :func:`~feedgpu.workloads.make_item`).
    """

    def __init__(
        self,
        n: int,
        cpu_s: float,
        wait_s: float,
        item_shape: tuple[int, ...] = (),
        as_numpy: bool = False,
    ) -> None:
        super().__init__(n, item_shape, as_numpy)
        if cpu_s < 0 or wait_s < 0:
            raise ValueError(f"cpu_s and wait_s must be >= 0, got cpu_s={cpu_s!r}, wait_s={wait_s!r}")
        self.cpu_s = float(cpu_s)
        self.wait_s = float(wait_s)

    @property
    def cpu_fraction(self) -> float:
        """The share of an item's cost that needs a core: ``cpu_s / (cpu_s + wait_s)``.

        0 for pure waiting, 1 for pure computing; 0 when the item costs nothing.
        """
        total = self.cpu_s + self.wait_s
        return self.cpu_s / total if total > 0 else 0.0

    def _cost(self) -> None:
        if self.wait_s > 0:
            time.sleep(self.wait_s)
        spin_cpu(self.cpu_s)

    def __repr__(self) -> str:
        return f"MixedDataset(n={self.n}, cpu_s={self.cpu_s}, wait_s={self.wait_s})"


class SlowStartDataset(_CostDataset):
    """Items that sleep ``seconds_per_item``, except the first ``slow_items``, which sleep longer.

    A pass over the dataset in order starts with slow items and then runs steadily, as a
    loader does while caches warm up. A timing harness that leaves its warm-up batches out
    measures the steady cost; one that times from the start does not.

    Args:
        n: number of items.
        seconds_per_item: sleep of a normal item.
        slow_items: how many items, counted from index 0, are slow.
        slow_seconds: sleep of a slow item.

    Raises:
        ValueError: if a count or a time is negative.

    ``dataset[i]`` sleeps ``slow_seconds`` if ``i < slow_items``, else ``seconds_per_item``,
    then returns a scalar ``float32`` tensor equal to ``i``.
    """

    def __init__(self, n: int, seconds_per_item: float, slow_items: int, slow_seconds: float) -> None:
        super().__init__(n)
        if seconds_per_item < 0 or slow_seconds < 0:
            raise ValueError(
                f"times must be >= 0, got seconds_per_item={seconds_per_item!r}, "
                f"slow_seconds={slow_seconds!r}"
            )
        if int(slow_items) != slow_items or slow_items < 0:
            raise ValueError(f"slow_items must be a non-negative integer, got {slow_items!r}")
        self.seconds_per_item = float(seconds_per_item)
        self.slow_items = int(slow_items)
        self.slow_seconds = float(slow_seconds)

    def __getitem__(self, index: int) -> Any:
        """Sleep (long for the first ``slow_items`` indices), then return the index as a tensor."""
        index = self._check_index(index)
        time.sleep(self.slow_seconds if index < self.slow_items else self.seconds_per_item)
        return torch.tensor(float(index))

    def __repr__(self) -> str:
        return (
            f"SlowStartDataset(n={self.n}, seconds_per_item={self.seconds_per_item}, "
            f"slow_items={self.slow_items}, slow_seconds={self.slow_seconds})"
        )


class MatmulDataset(Dataset):
    """Items computed with numpy matrix products, so they run on numpy's BLAS threads.

    Item ``i`` draws a ``size x size`` matrix from a generator seeded with ``i`` and
    applies ``x = tanh(x @ x / size)`` ``rounds`` times. The product runs in numpy's BLAS
    library (OpenBLAS in the pip wheels), which keeps a thread pool of its own: PyTorch
    sets its own pool to one thread inside DataLoader workers, not this one.

    Args:
        n: number of items.
        size: side of the square matrices.
        rounds: matrix products per item.

    Raises:
        ValueError: if ``n`` is negative or ``size`` or ``rounds`` is below 1.

    ``dataset[i]`` returns the mean of the result as a Python float (the same on every
    run: the input comes from a seeded generator).
    """

    def __init__(self, n: int, size: int = 192, rounds: int = 3) -> None:
        if int(n) != n or n < 0:
            raise ValueError(f"n must be a non-negative integer, got {n!r}")
        if size < 1 or rounds < 1:
            raise ValueError(f"size and rounds must be >= 1, got size={size!r}, rounds={rounds!r}")
        self.n, self.size, self.rounds = int(n), int(size), int(rounds)

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, index: int) -> float:
        """Compute item ``index`` (see the class docstring) and return its mean."""
        if index < 0:
            index += self.n
        if not 0 <= index < self.n:
            raise IndexError(f"index {index} out of range for a dataset of {self.n} items")
        x = np.random.default_rng(index).standard_normal((self.size, self.size), dtype=np.float32)
        for _ in range(self.rounds):
            x = np.tanh(x @ x / self.size)
        return float(x.mean())

    def __repr__(self) -> str:
        return f"MatmulDataset(n={self.n}, size={self.size}, rounds={self.rounds})"


def blas_threads() -> int | None:
    """Threads of numpy's BLAS pool in this process, or None if it cannot be found out.

    Read with ``threadpoolctl`` (installed with scikit-learn); the largest pool counts
    when numpy links more than one BLAS library.
    """
    try:
        from threadpoolctl import threadpool_info
    except ImportError:  # a course dependency through scikit-learn, but stay usable without
        logger.debug("threadpoolctl is not installed: BLAS threads unknown")
        return None
    pools = [p["num_threads"] for p in threadpool_info() if p.get("user_api") == "blas"]
    return max(pools) if pools else None


class ThreadReportDataset(Dataset):
    """Each item reports the thread pools of the process that built it.

    Args:
        n: number of items.

    ``dataset[i]`` returns a dict: ``worker`` (the DataLoader worker's id, or -1 in the
    main process), ``torch_threads`` (``torch.get_num_threads()``) and ``blas_threads``
    (see :func:`blas_threads`; -1 when unknown).
    """

    def __init__(self, n: int) -> None:
        if int(n) != n or n < 0:
            raise ValueError(f"n must be a non-negative integer, got {n!r}")
        self.n = int(n)

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, index: int) -> dict[str, int]:
        """Report this process's pools (the index only selects the item)."""
        if not 0 <= index < self.n:
            raise IndexError(f"index {index} out of range for a dataset of {self.n} items")
        info = get_worker_info()
        blas = blas_threads()
        return {
            "worker": info.id if info is not None else -1,
            "torch_threads": torch.get_num_threads(),
            "blas_threads": -1 if blas is None else blas,
        }


def limit_worker_threads(worker_id: int, threads: int = 1) -> None:
    """A ``worker_init_fn`` that limits every thread pool of the worker to ``threads``.

    PyTorch already sets its own pool to one thread in each worker. Libraries with pools
    of their own, such as numpy's BLAS, keep their default (one thread per core), so
    ``W`` workers can run ``W x cores`` threads on ``cores`` cores. This limits those
    pools too (with ``threadpoolctl``, when installed) and PyTorch's.

    Use ``DataLoader(..., worker_init_fn=limit_worker_threads)``; for another number,
    ``functools.partial(limit_worker_threads, threads=2)``.

    Args:
        worker_id: given by the DataLoader (not used).
        threads: threads per pool, at least 1.

    Raises:
        ValueError: if ``threads`` is below 1.

    Warning:
        Do not raise PyTorch's pool above one thread in a *forked* worker: its OpenMP pool
        does not survive ``fork``, and a parallel operation can then wait forever.
    """
    if threads < 1:
        raise ValueError(f"threads must be >= 1, got {threads!r}")
    torch.set_num_threads(int(threads))
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:
        logger.debug("threadpoolctl is not installed: only PyTorch's threads were limited")
        return
    # The limit holds for the rest of the worker's life: nothing restores it.
    threadpool_limits(limits=int(threads))
