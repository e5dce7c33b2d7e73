"""The workers' thread pools: how many threads a worker keeps busy, and one thread per pool.

PyTorch sets its own pool to one thread in every DataLoader worker (the pinned
``torch/utils/data/_utils/worker.py``: ``torch.set_num_threads(1)``). Other libraries'
pools keep their defaults: numpy's BLAS (OpenBLAS in the pip wheels), OpenMP, OpenCV start
one thread per core. ``W`` workers that call them can then run ``W x cores`` threads on
``cores`` cores, which take turns and (OpenBLAS) spin while they wait for each other:
notebook 02 measured a 169x slower loop for it with 16 workers on 16 cores.

* :func:`busy_threads`: the threads of a process that ran at least :data:`BUSY_THREAD_SHARE`
  of a span, from two readings of each thread's CPU time (psutil).
* :class:`OneThreadPerPool`: a ``worker_init_fn`` that keeps every pool of the worker at
  one thread (threadpoolctl's ``threadpool_limits``), after the loader's own
  ``worker_init_fn``. Environment variables (``OMP_NUM_THREADS``, ``OPENBLAS_NUM_THREADS``)
  come too late after *fork*: the libraries read them when they load, in the parent.
* :func:`one_thread_pools`: the same limit in this process meanwhile, to time items as such
  a worker would.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import psutil

__all__ = ["BUSY_THREAD_SHARE", "thread_cpu_s", "busy_threads", "OneThreadPerPool", "one_thread_pools",
           "can_limit_pools", "pool_threads"]

logger = logging.getLogger(__name__)

#: A thread is busy over a span when it ran at least this share of it on a CPU.
BUSY_THREAD_SHARE = 0.10


def thread_cpu_s(pid: int) -> dict[int, float]:
    """``{thread id: CPU seconds so far}`` of process ``pid``; empty when it cannot be read
    (the process ended, or the platform does not let us)."""
    try:
        return {t.id: t.user_time + t.system_time for t in psutil.Process(pid).threads()}
    except (psutil.NoSuchProcess, psutil.ZombieProcess, psutil.AccessDenied):
        return {}


def busy_threads(before: dict[int, float], after: dict[int, float], span_s: float) -> int:
    """How many threads ran at least :data:`BUSY_THREAD_SHARE` of ``span_s`` between two
    readings of :func:`thread_cpu_s` (a thread born in between counts from zero)."""
    if span_s <= 0:
        return 0
    return sum(1 for tid, cpu in after.items() if cpu - before.get(tid, 0.0) >= BUSY_THREAD_SHARE * span_s)


def can_limit_pools() -> bool:
    """Whether threadpoolctl is installed (it limits the pools)."""
    try:
        import threadpoolctl  # noqa: F401
    except ImportError:
        return False
    return True


def pool_threads() -> float:
    """The threads of this process's largest BLAS or OpenMP pool (threadpoolctl), which a
    forked worker inherits; NaN without threadpoolctl, 1 without such a pool."""
    if not can_limit_pools():
        return math.nan
    from threadpoolctl import threadpool_info

    return float(max((p.get("num_threads", 1) for p in threadpool_info()), default=1))


class OneThreadPerPool:
    """A ``worker_init_fn``: the loader's own one first (if any), then every thread pool of
    the worker limited to one thread for the rest of its life (threadpoolctl). Picklable
    when the wrapped function is, so it works under *spawn* too."""

    def __init__(self, init: Callable[[int], Any] | None = None) -> None:
        self.init = init

    def __call__(self, worker_id: int) -> None:
        if self.init is not None:
            self.init(worker_id)
        from threadpoolctl import threadpool_limits

        threadpool_limits(limits=1)  # kept: nothing restores it

    def __repr__(self) -> str:
        inner = "" if self.init is None else f"{getattr(self.init, '__name__', type(self.init).__name__)}, then "
        return f"OneThreadPerPool({inner}every pool at one thread)"


@contextmanager
def one_thread_pools() -> Iterator[None]:
    """Every thread pool of this process at one thread meanwhile (threadpoolctl), restored
    afterwards; nothing when threadpoolctl is not installed."""
    if not can_limit_pools():
        logger.debug("threadpoolctl is not installed: the pools keep their threads")
        yield
        return
    from threadpoolctl import threadpool_limits

    with threadpool_limits(limits=1):
        yield
