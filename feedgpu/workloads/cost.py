"""Datasets whose cost per item is known, for measuring data loaders.

Autograded cells and tests must never compare a raw time with a fixed number, because a
student's laptop may be slow or busy. Instead they load items whose cost we chose, and
check ratios against that cost. The two pure kinds of cost:

* :class:`SleepDataset` waits (``time.sleep``) a fixed time per item. It stands for I/O:
  reading from a disk or a network. Waiting uses no CPU, so workers speed it up even when
  there are more workers than cores.
* :class:`SpinDataset` burns a fixed amount of CPU time per item. It stands for decoding
  and augmentation. Workers speed it up only up to the number of free cores.

Real items do both, and workers have pools of threads; this module also has:

* :class:`MixedDataset`: each item waits, then computes, in a proportion you choose;
* :class:`SlowStartDataset`: a :class:`SleepDataset` whose first items are slow, as after
  a cold cache, to test that a timing harness leaves its warm-up out;
* :class:`MatmulDataset`: each item multiplies numpy matrices, so it runs on numpy's
  BLAS thread pool, which PyTorch does not limit inside workers;
* :class:`ThreadReportDataset`: each item reports the thread pools of the process that
  built it, so a notebook can see what a worker really runs with;
* :class:`ThrottledReadDataset`: each item reads its bytes through one storage channel of
  known bandwidth that every process shares, as a network file system at its limit;
* :class:`LockedDataset`: a share of each item's wait under one lock that every process
  shares, as one HDF5 file or one database connection makes it;
* :class:`RateLimitedDataset`: each item is one request to a service that takes so many
  requests a second, whoever sends them;
* :func:`limit_worker_threads`: a ``worker_init_fn`` that limits a worker's pools to one
  thread.

Every item's payload comes from one filler, :func:`make_array`: item ``i`` is an array
filled with ``i % 256``, so a test can tell which items a batch holds and in what order.
The sleeping datasets are one family: :class:`SleepDataset` sleeps
:meth:`SleepDataset.item_seconds` and returns a tensor; :class:`SlowStartDataset` and
:class:`~feedgpu.workloads.arrays.SleepArrayDataset` (numpy items, jittered sleeps) only
change how long an item sleeps and what its payload is.

Everything here lives in an importable module, not in a notebook cell, because on macOS
and Windows DataLoader workers are started with *spawn*: each worker imports the dataset's
class by name, and a class defined in a notebook cell cannot be found that way.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import time
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from torch.utils.data import Dataset, get_worker_info

from ..base.checks import check_int, check_seconds
from ..base.spin import spin_cpu

__all__ = [
    "spin_cpu",
    "make_array",
    "SleepDataset",
    "SpinDataset",
    "MixedDataset",
    "SlowStartDataset",
    "MatmulDataset",
    "ThrottledReadDataset",
    "LockedDataset",
    "RateLimitedDataset",
    "blas_threads",
    "ThreadReportDataset",
    "limit_worker_threads",
]


logger = logging.getLogger(__name__)


def make_array(index: int, shape: Sequence[int], dtype: Any = "float64") -> np.ndarray:
    """The payload of item ``index``: an array of ``shape`` and ``dtype`` filled with
    ``index % 256`` (so it fits uint8 and every wider dtype; for int8 the value wraps
    around as numpy's cast does, so the 256 fills stay distinct).

    This is the course's one filler: every dataset here, and
    :func:`~feedgpu.workloads.arrays.make_records`, builds its items with it. Filling is
    much cheaper than drawing random numbers, so building an item costs almost nothing
    next to its sleep or spin; the bytes to move are the same either way.

    Args:
        index: the item's index.
        shape: the array's shape; ``()`` gives a 0-d array (one number).
        dtype: a numpy dtype or its name (``"float64"``, ``"float32"``, ``"uint8"``, ...).

    Returns:
        A C-contiguous numpy array.
    """
    fill = np.array(index % 256).astype(np.dtype(dtype))  # a cast wraps where a fill would overflow
    return np.full(tuple(int(s) for s in shape), fill, dtype=np.dtype(dtype))


def _position(index: int, n: int) -> int:
    """``index`` as a position in ``0 .. n-1`` (negative counts from the end).

    Raises:
        IndexError: if it is out of range, as a list's index would be.
    """
    position = index + n if index < 0 else index
    if not 0 <= position < n:
        raise IndexError(f"index {index} out of range for a dataset of {n} items")
    return position


class _CostDataset(Dataset):
    """Shared wiring: ``n`` items; item ``i`` pays ``_cost(i)``, then returns its payload.

    The payload is ``make_array(i, item_shape, dtype)``: a tensor, or the numpy array
    itself when ``as_numpy`` (set by subclasses whose items are numpy arrays).
    """

    dtype: np.dtype = np.dtype("float32")
    as_numpy: bool = False

    def __init__(self, n: int, item_shape: Sequence[int] = ()) -> None:
        self.n = check_int("n", n)
        self.item_shape = tuple(check_int("item_shape", s) for s in item_shape)

    def __len__(self) -> int:
        return self.n

    def _check_index(self, index: int) -> int:
        return _position(index, self.n)

    def _cost(self, index: int) -> None:  # pragma: no cover - overridden
        raise NotImplementedError

    def payload(self, index: int) -> torch.Tensor | np.ndarray:
        """What item ``index`` returns, without its cost (see :func:`make_array`)."""
        array = make_array(index, self.item_shape, self.dtype)
        return array if self.as_numpy else torch.from_numpy(array)

    def __getitem__(self, index: int) -> Any:
        """Pay the item's cost, then return its payload (see :meth:`payload`)."""
        index = self._check_index(index)
        self._cost(index)
        return self.payload(index)


class SleepDataset(_CostDataset):
    """A dataset whose items each take ``seconds_per_item`` of waiting (I/O-like).

    Args:
        n: number of items.
        seconds_per_item: how long ``__getitem__`` sleeps.
        item_shape: shape of each item's payload (default a scalar). A large shape makes
            the batch expensive to send from a worker to the main process.

    Raises:
        ValueError: if ``n`` or ``seconds_per_item`` is negative (or not finite).

    ``dataset[i]`` sleeps :meth:`item_seconds`, then returns a ``float32`` tensor of
    ``item_shape`` filled with ``i % 256`` (see :func:`make_array`); with the default
    collate a batch of ``B`` scalar items is a tensor of shape ``(B,)`` holding the item
    indices (modulo 256). For numpy items see
    :class:`~feedgpu.workloads.arrays.SleepArrayDataset`.
    """

    def __init__(self, n: int, seconds_per_item: float, item_shape: Sequence[int] = ()) -> None:
        super().__init__(n, item_shape)
        self.seconds_per_item = check_seconds("seconds_per_item", seconds_per_item)

    def item_seconds(self, index: int) -> float:
        """How long item ``index`` sleeps: ``seconds_per_item`` (subclasses vary it).

        Raises:
            IndexError: if ``index`` is out of range, as ``dataset[index]`` would.
        """
        self._check_index(index)
        return self.seconds_per_item

    def _cost(self, index: int) -> None:
        seconds = self.item_seconds(index)
        if seconds > 0:
            time.sleep(seconds)

    def __repr__(self) -> str:
        return f"SleepDataset(n={self.n}, seconds_per_item={self.seconds_per_item})"


class SpinDataset(_CostDataset):
    """A dataset whose items each cost ``seconds`` of CPU time (compute-like).

    Args:
        n: number of items.
        seconds: CPU seconds burnt per item (see :func:`spin_cpu`).
        item_shape: shape of each item's payload (default a scalar).

    Raises:
        ValueError: if ``n`` or ``seconds`` is negative (or not finite).

    ``dataset[i]`` spins, then returns a ``float32`` tensor of ``item_shape`` filled with
    ``i % 256``. On an idle machine a spin takes ``seconds`` of wall-clock time; with more
    busy workers than cores it takes longer, which is the lesson.
    """

    def __init__(self, n: int, seconds: float, item_shape: Sequence[int] = ()) -> None:
        super().__init__(n, item_shape)
        self.seconds = check_seconds("seconds", seconds)

    def _cost(self, index: int) -> None:
        spin_cpu(self.seconds)

    def __repr__(self) -> str:
        return f"SpinDataset(n={self.n}, seconds={self.seconds})"


class MixedDataset(_CostDataset):
    """A dataset whose items each wait ``wait_s`` (I/O), then burn ``cpu_s`` of CPU time.

    Args:
        n: number of items.
        cpu_s: CPU seconds per item (see :func:`spin_cpu`), like decoding.
        wait_s: seconds of sleep per item, like reading a file or a network reply.
        item_shape: shape of each item's payload (default a scalar).

    Raises:
        ValueError: if ``n``, ``cpu_s`` or ``wait_s`` is negative (or not finite).

    ``dataset[i]`` sleeps, spins, then returns a ``float32`` tensor of ``item_shape``
    filled with ``i % 256`` (see :func:`make_array`).
    """

    def __init__(self, n: int, cpu_s: float, wait_s: float, item_shape: Sequence[int] = ()) -> None:
        super().__init__(n, item_shape)
        self.cpu_s = check_seconds("cpu_s", cpu_s)
        self.wait_s = check_seconds("wait_s", wait_s)

    @property
    def cpu_fraction(self) -> float:
        """The share of an item's cost that needs a core: ``cpu_s / (cpu_s + wait_s)``.

        0 for pure waiting, 1 for pure computing; 0 when the item costs nothing.
        """
        total = self.cpu_s + self.wait_s
        return self.cpu_s / total if total > 0 else 0.0

    def _cost(self, index: int) -> None:
        if self.wait_s > 0:
            time.sleep(self.wait_s)
        spin_cpu(self.cpu_s)

    def __repr__(self) -> str:
        return f"MixedDataset(n={self.n}, cpu_s={self.cpu_s}, wait_s={self.wait_s})"


class SlowStartDataset(SleepDataset):
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
        ValueError: if a count or a time is negative (or a time not finite).

    ``dataset[i]`` sleeps ``slow_seconds`` if ``i < slow_items``, else ``seconds_per_item``,
    then returns a scalar ``float32`` tensor equal to ``i % 256``.
    """

    def __init__(self, n: int, seconds_per_item: float, slow_items: int, slow_seconds: float) -> None:
        super().__init__(n, seconds_per_item)
        self.slow_items = check_int("slow_items", slow_items)
        self.slow_seconds = check_seconds("slow_seconds", slow_seconds)

    def item_seconds(self, index: int) -> float:
        """``slow_seconds`` for the first ``slow_items`` items, else ``seconds_per_item``."""
        index = self._check_index(index)
        return self.slow_seconds if index < self.slow_items else self.seconds_per_item

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
        self.n = check_int("n", n)
        self.size = check_int("size", size, minimum=1)
        self.rounds = check_int("rounds", rounds, minimum=1)

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, index: int) -> float:
        """Compute item ``index`` (see the class docstring) and return its mean."""
        index = _position(index, self.n)
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
        self.n = check_int("n", n)

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, index: int) -> dict[str, int]:
        """Report this process's pools (the index only selects the item)."""
        _position(index, self.n)
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
    threads = check_int("threads", threads, minimum=1)
    torch.set_num_threads(threads)
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:
        logger.debug("threadpoolctl is not installed: only PyTorch's threads were limited")
        return
    # The limit holds for the rest of the worker's life: nothing restores it.
    threadpool_limits(limits=threads)


class ThrottledReadDataset(Dataset):
    """Items read through one storage channel of ``bytes_per_s``, shared by every process.

    Each item reads ``item_bytes`` for real (from ``/dev/zero``, so the kernel counts them
    as read, as it counts a disk's, the page cache's or a network file system's bytes),
    then waits until the channel has delivered them: the channel serves one item after
    another, whichever process asks, so the items of all workers together arrive at
    ``bytes_per_s`` at most. One process alone fetches an item in ``item_bytes /
    bytes_per_s``; ``W`` workers fetch ``W`` items in ``W`` times that. The channel's clock
    (when it is next free) is a shared value made here, which the workers inherit (*fork*)
    or receive as they start (*spawn*).

    Args:
        n: number of items.
        item_bytes: bytes per item.
        bytes_per_s: the channel's bandwidth.

    ``dataset[i]`` returns ``i`` and the bytes read, as a 2-element int64 tensor (a cheap
    hand-over: the bytes stay in the worker).
    """

    def __init__(self, n: int, item_bytes: int = 256 * 1024, bytes_per_s: float = 32e6) -> None:
        self.n = check_int("n", n)
        self.item_bytes = check_int("item_bytes", item_bytes, minimum=1)
        self.bytes_per_s = float(bytes_per_s)
        if not self.bytes_per_s > 0:
            raise ValueError(f"bytes_per_s must be above 0, got {bytes_per_s!r}")
        self._free_at = multiprocessing.get_context().Value("d", 0.0)  # time.monotonic(): system-wide

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, index: int) -> torch.Tensor:
        """Read item ``index`` through the channel (see the class docstring)."""
        index = _position(index, self.n)
        with self._free_at.get_lock():
            start = max(time.monotonic(), self._free_at.value)
            done = start + self.item_bytes / self.bytes_per_s
            self._free_at.value = done
        fd = os.open(os.devnull if not os.path.exists("/dev/zero") else "/dev/zero", os.O_RDONLY)
        try:
            got = len(os.read(fd, self.item_bytes))
        finally:
            os.close(fd)
        time.sleep(max(done - time.monotonic(), 0.0))
        return torch.tensor([index, got], dtype=torch.int64)

    def __repr__(self) -> str:
        return f"ThrottledReadDataset(n={self.n}, item_bytes={self.item_bytes}, bytes_per_s={self.bytes_per_s:g})"


class LockedDataset(_CostDataset):
    """Items that each wait ``seconds_per_item``, ``locked_share`` of it holding one lock
    that every process shares: one HDF5 file, one database connection or one client opened
    in ``__init__`` and used by every worker.

    The lock is made here (a :mod:`multiprocessing` lock of the default context), so the
    workers inherit it (*fork*) or receive it as they start (*spawn*). One process alone
    fetches an item in ``seconds_per_item``; ``W`` workers fetch at most one item every
    ``locked_share * seconds_per_item``, however many they are. The unlocked part comes
    first, then the locked part.

    Args:
        n: number of items.
        seconds_per_item: the item's whole wait (``time.sleep``).
        locked_share: the share of it under the lock (0 to 1).
        item_shape: shape of each item's payload (default a scalar).

    Raises:
        ValueError: a negative ``n`` or wait, or ``locked_share`` outside 0 to 1.

    ``dataset[i]`` returns a ``float32`` tensor of ``item_shape`` filled with ``i % 256``.
    """

    def __init__(self, n: int, seconds_per_item: float, locked_share: float = 1.0,
                 item_shape: Sequence[int] = ()) -> None:
        super().__init__(n, item_shape)
        self.seconds_per_item = check_seconds("seconds_per_item", seconds_per_item)
        if not 0.0 <= locked_share <= 1.0:
            raise ValueError(f"locked_share must be between 0 and 1, got {locked_share!r}")
        self.locked_share = float(locked_share)
        self._lock = multiprocessing.get_context().Lock()

    def _cost(self, index: int) -> None:
        locked = self.seconds_per_item * self.locked_share
        time.sleep(self.seconds_per_item - locked)
        with self._lock:
            time.sleep(locked)

    def __repr__(self) -> str:
        return (f"LockedDataset(n={self.n}, seconds_per_item={self.seconds_per_item}, "
                f"locked_share={self.locked_share})")


class RateLimitedDataset(_CostDataset):
    """Items that are each one request to a service taking ``requests_per_s`` requests a
    second from every process together, each answered ``latency_s`` after it is let in.

    The service lets requests in one every ``1 / requests_per_s`` seconds, in the order
    they come (a shared clock of when it next lets one in, made here, which the workers
    inherit or receive as they start, as :class:`ThrottledReadDataset`'s channel). One
    process alone waits ``latency_s`` (or the spacing, if longer) per item; any number of
    workers together fetch at most ``requests_per_s`` items a second. Nothing is read:
    the kernel counts no bytes for it.

    Args:
        n: number of items.
        requests_per_s: the service's limit.
        latency_s: the wait for an answer once let in.
        item_shape: shape of each item's payload (default a scalar).

    Raises:
        ValueError: a negative ``n`` or latency, or a limit not above 0.
    """

    def __init__(self, n: int, requests_per_s: float, latency_s: float = 0.001,
                 item_shape: Sequence[int] = ()) -> None:
        super().__init__(n, item_shape)
        self.requests_per_s = float(requests_per_s)
        if not self.requests_per_s > 0:
            raise ValueError(f"requests_per_s must be above 0, got {requests_per_s!r}")
        self.latency_s = check_seconds("latency_s", latency_s)
        self._next_at = multiprocessing.get_context().Value("d", 0.0)  # time.monotonic(): system-wide

    def _cost(self, index: int) -> None:
        with self._next_at.get_lock():
            let_in = max(time.monotonic(), self._next_at.value)
            self._next_at.value = let_in + 1.0 / self.requests_per_s
        time.sleep(max(let_in - time.monotonic(), 0.0) + self.latency_s)

    def __repr__(self) -> str:
        return (f"RateLimitedDataset(n={self.n}, requests_per_s={self.requests_per_s:g}, "
                f"latency_s={self.latency_s})")
