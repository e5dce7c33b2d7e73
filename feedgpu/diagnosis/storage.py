"""What the loop reads: the bytes a process has read, from the kernel's own count.

Linux counts every byte a process reads through ``read()`` and its kin, from a disk, the
page cache, a network file system or a pipe alike (``rchar`` in ``/proc/<pid>/io``, which
psutil gives as ``read_chars``). ``read_bytes`` of the same file counts only what reached
the block device, so it misses the page cache and network file systems: the diagnosis
uses ``rchar``. Where the platform has no such count (macOS, Windows), it is None and
``storage-bound`` is never named.
"""

from __future__ import annotations

import psutil

__all__ = ["read_chars"]


def read_chars(pid: int) -> int | None:
    """Bytes process ``pid`` has read so far (``rchar``), or None where it cannot be read."""
    try:
        counters = psutil.Process(pid).io_counters()
    except (psutil.NoSuchProcess, psutil.ZombieProcess, psutil.AccessDenied, AttributeError, NotImplementedError):
        return None
    return getattr(counters, "read_chars", None)
