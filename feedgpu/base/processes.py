"""Processes and cores: how many cores this process may use, and DataLoader workers stopped.

Both are used by rooms on every floor (the workloads, the instruments, the diagnosis), so
they live here, below them all.
"""

from __future__ import annotations

import logging
import os
from typing import Any

__all__ = ["usable_cores", "shutdown_workers"]

logger = logging.getLogger(__name__)


def usable_cores() -> int:
    """The number of cores this process may run on (at least 1).

    ``os.process_cpu_count()`` (Python 3.13+) or ``len(os.sched_getaffinity(0))`` (Linux)
    where available, else ``os.cpu_count()``.
    """
    count = getattr(os, "process_cpu_count", None)
    if count is not None:
        n = count()
        if n:
            return int(n)
    if hasattr(os, "sched_getaffinity"):
        try:
            return max(1, len(os.sched_getaffinity(0)))
        except OSError as err:  # some sandboxes refuse the call
            logger.debug("sched_getaffinity failed: %s", err)
    return os.cpu_count() or 1


def shutdown_workers(iterator_or_loader: Any) -> None:
    """Stop the worker processes behind a DataLoader iterator (or a loader's persistent one).

    Dropping the last reference to an iterator normally stops its workers, but a
    reference kept alive by a traceback (an exception in a notebook) can keep them
    running. This stops them now. Single-process iterators and loaders without
    persistent workers are left as they are.

    Args:
        iterator_or_loader: a DataLoader iterator, or a DataLoader whose
            ``persistent_workers`` iterator should be stopped and forgotten.
    """
    target = iterator_or_loader
    is_loader = hasattr(target, "_get_iterator")
    if is_loader:  # a DataLoader: its persistent iterator, if any
        target = getattr(target, "_iterator", None)
    # ``_shutdown_workers`` is private, but it is the only way to stop workers now,
    # and it is safe to call twice.
    stop = getattr(target, "_shutdown_workers", None)
    if callable(stop):
        try:
            stop()
        except RuntimeError as err:
            if "killed by signal" not in str(err) and "exited unexpectedly" not in str(err):
                raise
            # A worker started with *spawn* exits through Python's shutdown (fork's exit
            # skips it); when its queue's feeder thread is still sending a tensor then, the
            # worker can abort (SIGABRT) on its way out, and PyTorch reports that while it
            # waits for the worker. The pass was over and nothing is lost: the rest of the
            # shutdown (PyTorch's ``finally``) has run.
            logger.debug("a worker died while it was stopped: %s", err)
    if is_loader and target is not None:
        iterator_or_loader._iterator = None
