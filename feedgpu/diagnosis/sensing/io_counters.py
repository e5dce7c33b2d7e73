"""What the loop reads: the bytes a process has read, from the kernel's own count.

Linux counts every byte a process reads through ``read()`` and its kin (``readv``,
``pread``: the ``read(2)`` family), from a disk, the page cache, a network file system
(NFS, SMB and FUSE mounts are read that way) or a pipe alike (``rchar`` in
``/proc/<pid>/io``, ``proc_pid_io(5)``, which psutil gives as ``read_chars``).
``read_bytes`` of the same file counts only what reached the block device, so it misses
the page cache and network file systems: the diagnosis uses ``rchar``. A socket read with
``recv`` or ``recv_into`` is not in ``rchar`` (64 KiB received by ``socket.recv`` here
raised it by 106 bytes, by ``os.read`` of a pipe by 65,642): Python's HTTP clients
(``http.client``, urllib3, requests, boto3) read a plain-HTTP connection that way, so a
loader that fetches its items over plain HTTP (the course's local object store) shows no
reads and ``storage-bound`` cannot be named for it; where its requests queue on one
service, the measured points name ``serialised`` (:mod:`~feedgpu.diagnosis.causes`). Over
TLS the same clients' bytes are counted: OpenSSL reads its socket with ``read(2)`` (1 MiB
received through Python's ``ssl`` raised ``rchar`` by more than 1 MiB), and boto3 speaks
HTTPS to S3 unless told otherwise. Where the platform has no such count (macOS, Windows), it is None and
``storage-bound`` is never named.

The time a process waited for block I/O (``delayacct_blkio_ticks`` in ``/proc/<pid>/stat``,
psutil's ``cpu_times().iowait``) is counted only where the kernel's delay accounting is on
(``/proc/sys/kernel/task_delayacct`` is 1, or the ``delayacct`` boot option; off by
default since Linux 5.14): elsewhere the kernel reports 0 whatever the waits, so
:func:`io_wait_s` gives None, never a 0 that would read as "no wait". It counts waits on a
local disk, not on a network file system or a socket: it supports ``storage-bound`` where
it is there, and names nothing alone.
"""

from __future__ import annotations

from pathlib import Path

import psutil

__all__ = ["read_chars", "delay_accounting", "io_wait_s"]

#: Where Linux says whether it counts each task's I/O wait.
DELAY_ACCOUNTING = Path("/proc/sys/kernel/task_delayacct")


def read_chars(pid: int) -> int | None:
    """Bytes process ``pid`` has read so far (``rchar``), or None where it cannot be read."""
    try:
        counters = psutil.Process(pid).io_counters()
    except (psutil.NoSuchProcess, psutil.ZombieProcess, psutil.AccessDenied, AttributeError, NotImplementedError):
        return None
    return getattr(counters, "read_chars", None)


def delay_accounting() -> bool:
    """Whether the kernel counts each process's block I/O wait (Linux's delay accounting)."""
    try:
        return DELAY_ACCOUNTING.read_text().strip() == "1"
    except OSError:
        return False


def io_wait_s(pid: int, counted: bool | None = None) -> float | None:
    """Seconds process ``pid`` has waited for block I/O so far, or None where the kernel
    does not count it (``counted``: :func:`delay_accounting`, read here if not given)."""
    if not (delay_accounting() if counted is None else counted):
        return None
    try:
        return getattr(psutil.Process(pid).cpu_times(), "iowait", None)
    except (psutil.NoSuchProcess, psutil.ZombieProcess, psutil.AccessDenied):
        return None
