"""How much memory the main process and each DataLoader worker use, over an epoch.

Three numbers per process, because they answer different questions:

* **RSS** (resident set size): every page of memory the process can touch right now.
  A page that forked workers share with their parent is counted in *each* of them, so
  the RSS of a family of processes adds up to far more than the machine really uses.
* **USS** (unique set size): the pages only this process holds. Its growth in a forked
  worker is exactly *copy-on-write*: pages the worker shared with its parent until it
  wrote to them (a Python object's reference count is a write, even on a read).
* **PSS** (proportional set size): the process's private pages plus its share of each
  shared page (a page shared by three processes counts a third in each). The PSS of a
  family sums to what the family really uses.

A student's use, with a DataLoader::

    from feedgpu.measure.memory import MemoryProbe, worker_growth_mb, peak_total_mb

    with MemoryProbe(interval_s=0.05) as probe:
        for batch in probe.watch(loader):   # or `in loader`: see MemoryProbe.watch
            ...
    table = probe.table()        # one row per process per sample (see MemoryProbe.table)
    print("worker USS growth (MB):", worker_growth_mb(table))
    print("peak summed PSS (MB):", peak_total_mb(table))

and :func:`feedgpu.plots.plot_memory` draws ``table`` over time, one line per process.

The probe samples in a background thread and finds the loader's workers by itself: every
Python child of this process (or of its forkserver) is a ``'worker'``, the process
itself is ``'main'``, and multiprocessing's helpers (the forkserver, the resource
tracker) and anything else are ``'other'`` (see :func:`process_roles`).

**What reading costs.** RSS is a counter the kernel keeps: reading it costs ~20 us.
USS and PSS are not kept anywhere: the kernel walks every page the process maps, which
for a process that imported torch (its libraries alone are ~500 MB of mapped pages) costs
~10 ms of CPU, whether it is read from ``/proc/<pid>/smaps_rollup`` directly or with
``psutil``'s ``memory_full_info()`` (which reads the same file, measured on 2 cores:
7-10 ms either way). This module reads ``smaps_rollup`` itself, because one read gives
RSS, USS and PSS from the same walk (so PSS <= RSS always holds), and falls back to psutil
where the file is absent (macOS, Windows, old kernels). So that sampling does not slow
the loader, the probe keeps its own CPU time within ``max_overhead`` (3% by default) of
one core and of the CPU the loader's processes use, and stretches its interval when it
must: with ``interval_s=0.05`` and two torch workers, expect a sample about every second,
plus one as soon as a worker appears (and one after the last batch with ``watch``).

**Where USS and PSS do not exist.** macOS and Windows report USS but no PSS; where a
number cannot be read, its column holds NaN and the probe logs a warning once
(:func:`available_kinds` says what this machine offers). RSS is always there.

**The libraries' share.** PSS (and USS) also count the pages of the libraries a process
maps from files: torch's code, ~200 MB resident, shared by *every* process on the machine
that imported the same torch. When another such process starts or exits, each process's
share of those pages moves by up to a hundred MB, with no change in its own data (measured
on 2 cores: the main process's PSS rose 104 MB mid-epoch as another torch process exited).
Where that matters, ask the probe for ``"pss_anon"`` too (:data:`EXTRA_KINDS`): the PSS of
anonymous memory only (heaps, arrays, Python objects: where a dataset lives), from
``smaps_rollup``'s ``Pss_Anon`` (Linux 5.9 and later; NaN elsewhere).

**One object's pages** (Linux). USS and PSS are totals over a whole process, so a figure
made from them (a worker's USS less that of a worker of an empty dataset) is a difference
of two noisy totals and can come out below zero. :func:`object_regions` lists where an
object lives in memory (each Python object of a container's tree, each array's or
tensor's data) and :func:`page_use` reads, page by page from ``/proc/<pid>/pagemap``,
which of those pages a process has in memory and which it maps *alone* (its own copy:
copied on write, or unpickled into it): a count of pages, so never below zero.

Units: :func:`memory_of` and :func:`read_memory` return **bytes**; the table and the
summaries are in **MB, meaning 2**20 bytes** (MiB), as in the grader's sandbox; each
column says its unit (``rss_mb``).
"""

from __future__ import annotations

import logging
import os
import statistics
import sys
import threading
import time
from collections.abc import Iterable, Iterator, Sequence
from typing import Any, NamedTuple

import psutil

__all__ = [
    "KINDS",
    "EXTRA_KINDS",
    "COLUMNS",
    "ROLES",
    "MB",
    "MAX_OVERHEAD",
    "MetricUnavailable",
    "Memory",
    "family_memory_of",
    "available_kinds",
    "read_memory",
    "memory_of",
    "process_roles",
    "MemoryProbe",
    "summarize",
    "worker_growth_mb",
    "sample_totals_mb",
    "peak_total_mb",
    "PageUse",
    "object_regions",
    "page_use",
    "probe_overhead",
]


logger = logging.getLogger(__name__)


#: The three memory numbers, as ``kind`` arguments.
KINDS: tuple[str, ...] = ("rss", "uss", "pss")

#: Numbers a probe reads only when asked (``kinds=KINDS + EXTRA_KINDS``): ``"pss_anon"``, the
#: PSS of anonymous memory only, without the libraries mapped from files (see the module's
#: docstring). Its table column, ``pss_anon_mb``, follows :data:`COLUMNS`.
EXTRA_KINDS: tuple[str, ...] = ("pss_anon",)

#: The columns of :meth:`MemoryProbe.table`, in order.
COLUMNS: tuple[str, ...] = ("process", "role", "time_s", "rss_mb", "uss_mb", "pss_mb")

#: The roles a process can have in the table.
ROLES: tuple[str, ...] = ("main", "worker", "other")

#: Bytes in the MB of the table (MiB, as the sandbox counts).
MB: int = 2**20

# The command lines of multiprocessing's helper processes: they are no workers.
_HELPERS = ("multiprocessing.resource_tracker", "multiprocessing.semaphore_tracker")
_FORKSERVER = "multiprocessing.forkserver"
# PyTorch names its DataLoader workers so (torch >= 2.3 sets the thread name at start).
_TORCH_WORKER_NAME = "pt_data_worker"


class MetricUnavailable(NotImplementedError):
    """This platform cannot report the memory number asked for (PSS on macOS/Windows)."""


class Memory(NamedTuple):
    """One process's memory at one moment, in bytes; None where the platform has no such number."""

    rss: int
    uss: int | None
    pss: int | None
    pss_anon: int | None = None  # PSS of anonymous memory only (Linux 5.9+: smaps_rollup's Pss_Anon)


def _check_kind(kind: str) -> str:
    if kind not in KINDS + EXTRA_KINDS:
        raise ValueError(f"kind must be one of {KINDS + EXTRA_KINDS}, got {kind!r}")
    return kind


_WARNED = False  # the warning that USS/PSS are missing here is logged once per process


def _warned() -> None:
    global _WARNED
    _WARNED = True


_ROLLUP: bool | None = None  # can this machine read /proc/<pid>/smaps_rollup? (known after one try)
_AVAILABLE: tuple[str, ...] | None = None


def available_kinds(extra: bool = False) -> tuple[str, ...]:
    """The memory numbers this machine can report: ``("rss", "uss", "pss")`` on Linux,
    ``("rss", "uss")`` on macOS and Windows (psutil has no PSS there).

    Args:
        extra: also list those of :data:`EXTRA_KINDS` this machine offers (``"pss_anon"``
            where ``/proc/self/smaps_rollup`` has a ``Pss_Anon`` line).
    """
    global _AVAILABLE
    if _AVAILABLE is None:
        try:
            fields = psutil.Process().memory_full_info()._fields
        except (psutil.AccessDenied, NotImplementedError):  # e.g. a locked-down macOS
            fields = ()
        _AVAILABLE = ("rss",) + tuple(k for k in ("uss", "pss") if k in fields)
        logger.debug("memory numbers available here: %s", _AVAILABLE)
    if not extra:
        return _AVAILABLE
    try:
        anon = _read_rollup(os.getpid()).pss_anon is not None
    except OSError:
        anon = False
    return _AVAILABLE + (("pss_anon",) if anon else ())


def _read_rollup(pid: int) -> Memory:
    """RSS, USS and PSS from ``/proc/<pid>/smaps_rollup``: one page walk for all three.

    USS is the sum of the ``Private_*`` lines (clean, dirty, hugetlb), as psutil counts it;
    ``pss_anon`` is the ``Pss_Anon`` line (None on kernels before 5.9, which lack it).
    Raises OSError where the file cannot be read (then ask psutil).
    """
    rss = pss = uss = 0
    pss_anon = None
    with open(f"/proc/{pid}/smaps_rollup", "rb") as f:
        for line in f:
            if line.startswith(b"Private_"):
                uss += int(line.split()[1])
            elif line.startswith(b"Pss:"):
                pss = int(line.split()[1])
            elif line.startswith(b"Pss_Anon:"):
                pss_anon = int(line.split()[1])
            elif line.startswith(b"Rss:"):
                rss = int(line.split()[1])
    return Memory(rss * 1024, uss * 1024, pss * 1024,  # the file counts kB (KiB)
                  None if pss_anon is None else pss_anon * 1024)


def _read_psutil(pid: int, full: bool) -> Memory:
    proc = psutil.Process(pid)
    if not full:
        return Memory(int(proc.memory_info().rss), None, None)
    info = proc.memory_full_info()
    uss, pss = getattr(info, "uss", None), getattr(info, "pss", None)
    return Memory(int(info.rss), None if uss is None else int(uss), None if pss is None else int(pss))


def read_memory(process: int | psutil.Process, kinds: Iterable[str] = KINDS) -> Memory | None:
    """One process's RSS, USS and PSS now, in bytes.

    Asking for ``kinds=("rss",)`` reads only RSS, a counter (~20 us); USS or PSS make the
    kernel walk the process's pages (~10 ms for a process that imported torch). On Linux
    the three come from one read of ``/proc/<pid>/smaps_rollup``; elsewhere, or where that
    file cannot be read, from psutil.

    Args:
        process: a pid or a ``psutil.Process``.
        kinds: the numbers wanted, from :data:`KINDS` or :data:`EXTRA_KINDS`; the others may
            come back as None.

    Returns:
        A :class:`Memory` (None in the fields this platform cannot report), or None when
        the process has exited or may not be read (another user's process).

    Raises:
        ValueError: an unknown kind.
    """
    global _ROLLUP
    pid = process.pid if isinstance(process, psutil.Process) else int(process)
    full = any(_check_kind(k) != "rss" for k in kinds)
    try:
        if full and _ROLLUP is not False:
            try:
                memory = _read_rollup(pid)
                _ROLLUP = True
                return memory
            except FileNotFoundError:
                if _ROLLUP is None and not os.path.exists("/proc/self/smaps_rollup"):
                    _ROLLUP = False  # not Linux, or a kernel before 4.14: psutil from now on
            except OSError as err:  # exited, or refused (psutil knows the fallbacks)
                logger.debug("smaps_rollup of %d unreadable (%s); asking psutil", pid, err)
        return _read_psutil(pid, full)
    except (psutil.NoSuchProcess, psutil.ZombieProcess, psutil.AccessDenied):
        return None


def _as_pids(processes: Any) -> list[int]:
    if isinstance(processes, (int, psutil.Process)):
        processes = [processes]
    return [p.pid if isinstance(p, psutil.Process) else int(p) for p in processes]


def memory_of(processes: int | psutil.Process | Iterable[int | psutil.Process], kind: str = "rss",
              *, fallback: str | None = None) -> int:
    """The memory of ``processes`` together, in bytes: the one reading the probe and the
    grader's sandbox share.

    Processes that have exited or may not be read count 0, so a watchdog polling a family
    of processes never fails on one that just ended.

    Args:
        processes: a pid, a ``psutil.Process``, or an iterable of them.
        kind: ``"rss"`` (cheap, but counts shared pages once per process: an upper
            bound), ``"uss"`` (private pages only: a lower bound) or ``"pss"`` (shared
            pages split between their sharers: the family's real use).
        fallback: a kind to use instead where this platform has no ``kind`` (the sandbox
            passes ``"rss"``: no PSS on macOS, so judge by the upper bound); None raises.

    Returns:
        The sum, in bytes.

    Raises:
        ValueError: an unknown kind or fallback.
        MetricUnavailable: ``kind`` cannot be read here and no fallback was given.
    """
    _check_kind(kind)
    if kind not in available_kinds(extra=kind in EXTRA_KINDS):
        if fallback is None:
            raise MetricUnavailable(
                f"{kind.upper()} cannot be read on {sys.platform} (available: "
                f"{', '.join(available_kinds())}); pass fallback='rss' to use an upper bound"
            )
        logger.debug("%s unavailable here; using %s", kind, fallback)
        kind = _check_kind(fallback)
    total = 0
    for pid in _as_pids(processes):
        memory = read_memory(pid, (kind,))
        value = None if memory is None else getattr(memory, kind)
        total += value or 0
    return total


def family_memory_of(processes: int | psutil.Process | Iterable[int | psutil.Process]) -> int:
    """What a family of processes (a notebook's kernel and its DataLoader workers) uses
    together, in bytes, by the best reading this platform has.

    * PSS where it can be read (Linux): shared pages split between their sharers.
    * Else, with USS (macOS, Windows): each process's private pages (USS), plus the pages
      they share counted once, as the process that maps most of them does (its RSS less
      its USS). Forked workers share their parent's pages; RSS would count them once per
      worker, and a grader judging by RSS kills a notebook for memory it does not use.
    * Else RSS: an upper bound.
    """
    kinds = available_kinds()
    if "pss" in kinds:
        return memory_of(processes, "pss")
    if "uss" not in kinds:
        return memory_of(processes, "rss")
    private, shared = 0, 0
    for pid in _as_pids(processes):
        memory = read_memory(pid, ("rss", "uss"))
        if memory is None:
            continue
        uss = memory.uss if memory.uss is not None else memory.rss
        private += uss
        shared = max(shared, memory.rss - uss)
    return private + shared


# Linux lists a thread's children in /proc/<pid>/task/<tid>/children (CONFIG_PROC_CHILDREN).
_CHILDREN_FILES = os.path.exists(f"/proc/{os.getpid()}/task/{os.getpid()}/children")


def _children(pid: int) -> list[int]:
    """Direct children of ``pid``: from ``/proc/<pid>/task/*/children`` on Linux (~20 us a
    thread), else psutil (which reads every process on the machine: ~2 ms)."""
    if _CHILDREN_FILES:
        try:
            tids = os.listdir(f"/proc/{pid}/task")
        except FileNotFoundError:
            return []  # gone
        found: set[int] = set()
        try:
            for tid in tids:
                try:
                    with open(f"/proc/{pid}/task/{tid}/children", "rb") as f:
                        found.update(int(c) for c in f.read().split())
                except FileNotFoundError:
                    continue  # the thread ended meanwhile
            return sorted(found)
        except OSError as err:  # refused: psutil may still know
            logger.debug("children of %d unreadable (%s); asking psutil", pid, err)
    try:
        return sorted(c.pid for c in psutil.Process(pid).children())
    except (psutil.NoSuchProcess, psutil.ZombieProcess, psutil.AccessDenied):
        return []


def _describe(pid: int) -> tuple[str, str, str] | None:
    """(name, command line, executable) of ``pid``, or None if it is gone."""
    try:
        proc = psutil.Process(pid)
        with proc.oneshot():
            return proc.name(), " ".join(proc.cmdline()), proc.exe()
    except (psutil.NoSuchProcess, psutil.ZombieProcess):
        return None
    except psutil.AccessDenied:
        return "", "", ""


def _shares_memory_with(child: int, parent: int) -> bool:
    """Whether ``child`` still runs in ``parent``'s memory: a child made with ``vfork``
    (how Python starts a *spawn* worker or the resource tracker) until it calls ``exec``.

    Memory counters belong to the memory, not to the process, so the two processes'
    ``/proc/<pid>/statm`` lines are then identical; a forked child's never are, because
    fork does not copy the page tables of mapped files. Always False off Linux.
    """
    try:
        with open(f"/proc/{child}/statm", "rb") as f:
            mine = f.read()
        with open(f"/proc/{parent}/statm", "rb") as f:
            theirs = f.read()
    except OSError:
        return False
    return mine == theirs


def process_roles(pid: int | None = None) -> dict[int, str]:
    """The process ``pid`` (default: this one) and its descendants, each with its role.

    * ``'main'``: ``pid`` itself;
    * ``'worker'``: a process PyTorch named ``pt_data_worker``, or a child of ``pid`` (or
      of its forkserver) running the same Python: what multiprocessing starts with
      *fork*, *spawn* or *forkserver*, as DataLoader workers are;
    * ``'other'``: multiprocessing's helpers (the forkserver itself, the resource
      tracker, which *spawn* and *forkserver* start once and keep), the children of
      workers, and any other program.

    Returns:
        ``{pid: role}``, the main process first, then the others by pid. Processes that
        end while they are looked at are left out, and so is a child that does not yet
        have memory of its own (between ``vfork`` and ``exec``, its memory is its parent's).
    """
    main = os.getpid() if pid is None else int(pid)
    main_info = _describe(main)
    roles: dict[int, str] = {main: "main"}
    if main_info is None:
        return roles
    forkservers: set[int] = set()
    found: dict[int, int] = {}  # child -> parent, parents before their children
    queue = [(child, main) for child in _children(main)]
    while queue:
        child, parent = queue.pop(0)
        if child != main and child not in found:
            found[child] = parent
            queue.extend((grandchild, child) for grandchild in _children(child))
    for child, parent in found.items():
        info = _describe(child)
        if info is None or _shares_memory_with(child, parent):
            continue
        name, cmdline, exe = info
        if name == _TORCH_WORKER_NAME:
            role = "worker"
        elif any(helper in cmdline for helper in _HELPERS):
            role = "other"
        elif _FORKSERVER in cmdline and parent not in forkservers:
            forkservers.add(child)  # the server; the processes it forks are the workers
            role = "other"
        elif (parent == main or parent in forkservers) and exe == main_info[2]:
            role = "worker"
        else:
            role = "other"
        roles[child] = role
    return {main: "main", **{p: roles[p] for p in sorted(roles) if p != main}}


def _cpu_s(pid: int) -> float | None:
    """User plus system CPU seconds of ``pid`` (None if it is gone)."""
    try:
        times = psutil.Process(pid).cpu_times()
    except (psutil.NoSuchProcess, psutil.ZombieProcess, psutil.AccessDenied):
        return None
    return times.user + times.system


def _idle_s() -> float:
    """Idle CPU seconds of the whole machine since boot, all cores together."""
    return float(psutil.cpu_times().idle)


#: The default share of CPU a :class:`MemoryProbe` may spend (see ``max_overhead``).
MAX_OVERHEAD: float = 0.03


class MemoryProbe:
    """Sample the memory of this process and its workers in a background thread.

    Use it as a context manager around an epoch (or call :meth:`start` and :meth:`stop`)::

        with MemoryProbe(interval_s=0.05) as probe:
            for batch in loader:
                ...
        table = probe.table()

    A sample is taken when the probe starts, whenever a new process appears (within
    ``interval_s``), every ``interval_s`` as long as the probe's own CPU time stays within
    ``max_overhead`` (reading USS and PSS is costly: see the module's docstring), and when
    it stops. The DataLoader shuts its workers down as the ``for``
    loop ends, before the probe stops; to record the workers' final state too, loop over
    ``probe.watch(loader)`` (or call :meth:`sample` after the last batch)::

        with MemoryProbe() as probe:
            for batch in probe.watch(loader):
                ...

    An exception raised inside the ``with`` block stops the probe and goes on as it was.

    Args:
        interval_s: the shortest time between samples, in seconds.
        pid: the main process (default: this one).
        kinds: the numbers to read, from :data:`KINDS` (default all three), and any of
            :data:`EXTRA_KINDS` (each adds its column to the table, after :data:`COLUMNS`).
            With only ``("rss",)`` every sample is cheap and the interval is kept.
        max_overhead: the share of CPU the probe may spend on sampling (0.03 = 3%): of one
            core's time, and no more than that share of the CPU its processes used or the
            machine left idle since it started. So a loader that keeps every core busy
            loses at most this share of its CPU, even on a machine others load too (where
            a fixed share of a core would cost a slowed loader more), while a loader that
            waits on I/O next to idle cores is still sampled at one core's share.

    Attributes:
        unavailable: the kinds asked for that this platform cannot report (their columns
            are NaN).
        cpu_s: CPU seconds the background thread has spent sampling (after :meth:`stop`).

    A probe can be started again after it stopped: its table goes on, and ``time_s``
    keeps counting from the first start.

    Raises:
        ValueError: a non-positive ``interval_s``, an unknown kind, or ``max_overhead``
            outside (0, 1].
    """

    def __init__(self, interval_s: float = 0.05, *, pid: int | None = None,
                 kinds: Sequence[str] = KINDS, max_overhead: float = MAX_OVERHEAD) -> None:
        if not interval_s > 0:
            raise ValueError(f"interval_s must be > 0 seconds, got {interval_s!r}")
        if not 0 < max_overhead <= 1:
            raise ValueError(f"max_overhead must be a share of one core in (0, 1], got {max_overhead!r}")
        self.interval_s = float(interval_s)
        self.pid = os.getpid() if pid is None else int(pid)
        self.kinds = tuple(_check_kind(k) for k in kinds) or ("rss",)
        self.max_overhead = float(max_overhead)
        self.unavailable = tuple(k for k in self.kinds if k not in available_kinds(extra=True))
        self.extra = tuple(k for k in EXTRA_KINDS if k in self.kinds)  # their columns follow COLUMNS
        if self.unavailable and not _WARNED:
            _warned()
            logger.warning("%s cannot be read on %s: those columns will be NaN (RSS is always read)",
                           "/".join(k.upper() for k in self.unavailable), sys.platform)
        self._rows: list[tuple[Any, ...]] = []  # COLUMNS, then one value per kind of self.extra
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None
        self._seen: set[int] = set()
        self._t0 = 0.0
        self._rounds = 0
        self.cpu_s = 0.0  # CPU time the background thread spent, added up at each stop()

    # -- running -------------------------------------------------------------------
    def start(self) -> MemoryProbe:
        """Take a first sample now and start sampling in the background."""
        if self._thread is not None:
            raise RuntimeError("this MemoryProbe is already running; stop() it first")
        self._stop.clear()
        self._error = None
        if not self._rounds:  # started again, the table goes on: time counts from the first start
            self._t0 = time.perf_counter()
        self.sample()
        self._thread = threading.Thread(target=self._run, name="feedgpu-memory-probe", daemon=True)
        self._thread.start()
        return self

    def stop(self, *, final_sample: bool = True) -> None:
        """Stop the thread (and wait for it), then take a last sample unless told not to.

        Raises:
            RuntimeError: the background thread failed (the cause is chained).
        """
        thread, self._thread = self._thread, None
        if thread is None:
            return
        self._stop.set()
        thread.join()
        if final_sample:
            self.sample()
        if self._error is not None:
            error, self._error = self._error, None
            raise RuntimeError(f"the memory probe's thread failed: {error!r}") from error

    def __enter__(self) -> MemoryProbe:
        return self.start()

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> bool:
        if exc_type is None:
            self.stop()
        else:  # the block's own exception goes on; a failure of the probe is only logged
            try:
                self.stop()
            except Exception as err:  # noqa: BLE001 - must not replace the block's exception
                logger.warning("the memory probe failed too: %s", err)
        return False

    @property
    def running(self) -> bool:
        """Whether the background thread is sampling."""
        return self._thread is not None and self._thread.is_alive()

    @property
    def samples(self) -> int:
        """How many sampling rounds were taken so far."""
        return self._rounds

    # -- sampling ------------------------------------------------------------------
    def sample(self) -> None:
        """Take one sample of every process now, from the calling thread."""
        roles = process_roles(self.pid)
        self._record(roles)

    def watch(self, loader: Iterable[Any]) -> Iterator[Any]:
        """Yield ``loader``'s batches, and take a sample as the last one arrives.

        ``for batch in probe.watch(loader):`` records the workers' final state: the
        DataLoader shuts its workers down as the loop asks for a batch after the last,
        which a sample taken at :meth:`stop` comes too late to see. Needs ``len(loader)``;
        without it the batches pass through and no extra sample is taken.
        """
        try:
            last = len(loader) - 1  # type: ignore[arg-type]
        except TypeError:
            last = None
        for i, batch in enumerate(loader):
            if i == last:
                self.sample()
            yield batch

    def _record(self, roles: dict[int, str]) -> None:
        with self._lock:
            t = time.perf_counter() - self._t0
            for pid, role in roles.items():
                memory = read_memory(pid, self.kinds)
                if memory is None or memory.rss == 0:  # gone, or exited and not yet reaped
                    continue
                self._rows.append((
                    pid, role, t, memory.rss / MB,
                    memory.uss / MB if memory.uss is not None and "uss" in self.kinds else float("nan"),
                    memory.pss / MB if memory.pss is not None and "pss" in self.kinds else float("nan"),
                    *(float("nan") if getattr(memory, kind) is None else getattr(memory, kind) / MB
                      for kind in self.extra),
                ))
            self._seen.update(roles)
            self._rounds += 1

    def _run(self) -> None:
        cpu0, start = time.thread_time(), time.perf_counter()
        wait, sample_s = self.interval_s, 0.0
        try:
            idle0 = _idle_s()
            used0 = {pid: c for pid in process_roles(self.pid) if (c := _cpu_s(pid)) is not None}
            used = dict(used0)  # each process's CPU seconds, the last known (kept after it ends)
            while not self._stop.wait(wait):
                before = time.thread_time()
                roles = process_roles(self.pid)
                for pid in roles:
                    if (c := _cpu_s(pid)) is not None:
                        used[pid] = c
                spent = time.thread_time() - cpu0  # this thread's CPU, part of the main process's
                work = sum(used.values()) - sum(used0.values()) - spent
                idle = _idle_s() - idle0
                allowed = self.max_overhead * min(time.perf_counter() - start, max(work, idle))
                look_s = time.thread_time() - before
                # sample if the next one, costing what the last did, stays within the share
                if spent + sample_s <= allowed or not self._seen.issuperset(roles):
                    before = time.thread_time()
                    self._record(roles)
                    sample_s = time.thread_time() - before
                # looking for processes may use at most half of one core's share
                wait = max(self.interval_s, 2 * look_s / self.max_overhead)
        except BaseException as err:  # noqa: BLE001 - handed to stop(), which raises it
            logger.debug("memory probe thread failed", exc_info=True)
            self._error = err
        finally:
            self.cpu_s += time.thread_time() - cpu0

    # -- results -------------------------------------------------------------------
    def table(self) -> Any:
        """The samples so far, as a pandas DataFrame with the columns of :data:`COLUMNS`:

        * ``process``: the pid;
        * ``role``: ``'main'``, ``'worker'`` or ``'other'`` (see :func:`process_roles`;
          a process keeps the role it was last seen with);
        * ``time_s``: seconds since the probe started, when that sample began (all the
          rows of one sample share it), non-decreasing down the table;
        * ``rss_mb``, ``uss_mb``, ``pss_mb``: memory in MB (2**20 bytes); NaN where not
          read (see ``kinds`` and :attr:`unavailable`);
        * then, only if ``kinds`` asked for them, a column per kind of :data:`EXTRA_KINDS`
          (``pss_anon_mb``).

        One row per process per sample, sorted by time, then by pid.
        """
        import pandas as pd  # imported on use: workers importing feedgpu need not load it

        with self._lock:
            rows = list(self._rows)
        extra = [f"{kind}_mb" for kind in self.extra]
        table = pd.DataFrame(rows, columns=[*COLUMNS, *extra])
        last_role = {pid: role for pid, role, *_ in rows}
        table["role"] = table["process"].map(last_role)
        table = table.sort_values(["time_s", "process"], kind="stable").reset_index(drop=True)
        return table.astype({"process": "int64", "role": "object", "time_s": "float64",
                             "rss_mb": "float64", "uss_mb": "float64", "pss_mb": "float64",
                             **{column: "float64" for column in extra}})


def _column(metric: str) -> str:
    name = metric[:-3] if metric.endswith("_mb") else metric
    return f"{_check_kind(name)}_mb"


def summarize(table: Any, metric: str = "uss") -> Any:
    """One row per process of a :meth:`MemoryProbe.table`: how ``metric`` went.

    Columns: ``process`` (index), ``role``, ``samples``, ``first_mb``, ``last_mb``,
    ``peak_mb``, and ``growth_mb`` = last minus first (what a worker added over the
    epoch: with fork, its copy-on-write). NaN samples are left out.

    Args:
        table: a table from :meth:`MemoryProbe.table`.
        metric: ``"rss"``, ``"uss"`` or ``"pss"`` (or the column name, ``"uss_mb"``), or
            one of :data:`EXTRA_KINDS` the probe read.
    """
    column = _column(metric)
    rows = table.dropna(subset=[column]).sort_values("time_s", kind="stable")
    grouped = rows.groupby("process", sort=True)
    summary = grouped.agg(role=("role", "last"), samples=(column, "size"), first_mb=(column, "first"),
                          last_mb=(column, "last"), peak_mb=(column, "max"))
    summary["growth_mb"] = summary["last_mb"] - summary["first_mb"]
    return summary


def worker_growth_mb(table: Any, metric: str = "uss") -> float:
    """Summed growth (last minus first sample) of ``metric`` over the workers, in MB.

    With *fork*, a worker's USS growth is the memory it copied on write: the number
    notebook 06 compares between a list of Python objects and its fix. 0.0 without workers.
    """
    summary = summarize(table, metric)
    return float(summary.loc[summary["role"] == "worker", "growth_mb"].sum())


def sample_totals_mb(table: Any, metric: str = "pss", roles: Sequence[str] = ("main", "worker"),
                     *, complete: int | None = None) -> Any:
    """The sum of ``metric`` over the processes of ``roles`` at each sample, in MB.

    Args:
        table: a table from :meth:`MemoryProbe.table`.
        metric: as for :func:`summarize`.
        roles: the roles added up (by default the loader's family: main and workers).
        complete: keep only the samples that read this many such processes (with a value
            of ``metric``), e.g. ``1 + num_workers`` for the samples that saw the whole
            family; None keeps every sample.

    Returns:
        A pandas Series of floats indexed by ``time_s``, in time order; NaN values are
        left out of the sums, and a sample without any value is absent.
    """
    column = _column(metric)
    rows = table[table["role"].isin(list(roles))].dropna(subset=[column])
    grouped = rows.groupby("time_s")[column]
    totals = grouped.sum().astype(float)
    if complete is not None:
        totals = totals[grouped.count() == complete]
    return totals


def peak_total_mb(table: Any, metric: str = "pss", roles: Sequence[str] = ("main", "worker")) -> float:
    """The largest sum of ``metric`` over the processes of ``roles`` in one sample, in MB
    (the largest of :func:`sample_totals_mb`; 0.0 for a table without values).

    With PSS this is the most memory the loader's family of processes really used at
    once (shared pages counted once); with RSS it overstates by counting them per process.
    """
    totals = sample_totals_mb(table, metric, roles)
    return float(totals.max()) if len(totals) else 0.0


# --------------------------------------------------------------------------- one object's pages

#: ``type.__flags__`` bit of the types whose objects carry the collector's header just
#: before them in memory (CPython's ``Py_TPFLAGS_HAVE_GC``).
_HAVE_GC = 1 << 14
#: Bytes of that header (CPython 3.8 and later, 64-bit: two pointers).
_GC_HEAD = 2 * 8 if sys.maxsize > 2**32 else 2 * 4


def _shared_singleton(obj: Any) -> bool:
    """Objects every part of the interpreter shares: no container owns their pages."""
    return obj is None or isinstance(obj, bool) or (type(obj) is int and -5 <= obj <= 256)


def object_regions(obj: Any) -> list[tuple[int, int]]:
    """Where ``obj`` lives in this process's memory: ``(address, bytes)`` regions.

    Walks ``obj`` and what it holds: the values of dicts (not their keys, usually strings
    that every record shares), the items of lists and tuples, the attributes of other
    objects (a Dataset's). Each Python object contributes the memory at its address
    (with the collector's header just before it), which is where reading it writes its
    reference count; a numpy array or a torch tensor contributes its data. Objects the
    whole interpreter shares (``None``, booleans, small ints) are left out; an object met
    twice counts once. The buffers of dicts and lists (their hash tables and item
    arrays) live elsewhere and are not listed: reading a record only reads them.

    Walking takes a reference to every object, which writes its reference count: in a
    forked child that copies the pages walked, so walk in the parent before the fork
    (the addresses are the same in the child).
    """
    import numpy as np

    try:
        import torch
    except ImportError:  # pragma: no cover - the course always has torch
        torch = None
    regions: list[tuple[int, int]] = []
    seen: set[int] = set()
    stack = [obj]
    while stack:
        o = stack.pop()
        if id(o) in seen or _shared_singleton(o):
            continue
        seen.add(id(o))
        if isinstance(o, np.ndarray):
            regions.append((o.__array_interface__["data"][0], o.nbytes))
            continue
        if torch is not None and isinstance(o, torch.Tensor):
            storage = o.untyped_storage()
            regions.append((storage.data_ptr(), storage.nbytes()))
            continue
        head = _GC_HEAD if type(o).__flags__ & _HAVE_GC else 0
        inline = type(o).__basicsize__ if isinstance(o, (dict, list, set)) else sys.getsizeof(o) - head
        regions.append((id(o) - head, inline + head))
        if isinstance(o, dict):
            stack.extend(o.values())
        elif isinstance(o, (list, tuple, set, frozenset)):
            stack.extend(o)
        elif hasattr(o, "__dict__") and not isinstance(o, type):
            stack.extend(vars(o).values())
    return regions


class PageUse(NamedTuple):
    """How one process holds the pages of some regions of memory, in bytes."""

    total: int    # the pages the regions cover
    present: int  # those the process has in memory now
    alone: int    # those it maps alone: its own copy, shared with no other process


_PAGE_BYTES = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
_PRESENT, _EXCLUSIVE = 1 << 63, 1 << 56  # /proc/<pid>/pagemap's flags (Linux 4.2 and later)


def page_use(regions: Iterable[tuple[int, int]], pid: int | None = None) -> PageUse:
    """Which pages of ``regions`` the process ``pid`` (default: this one) holds, and alone.

    Reads ``/proc/<pid>/pagemap``, one 64-bit entry per page: bit 63 says the page is in
    memory, bit 56 that this process is the only one mapping it. A page a forked child
    still shares with its parent is present but not alone; once either of them writes to
    it, the writer's copy is alone. Counts of pages, so never below zero.

    Args:
        regions: ``(address, bytes)`` pairs in that process's memory, e.g. from
            :func:`object_regions` (called in that process, or in the parent it was forked
            from before the fork).
        pid: the process; another process's pagemap needs the right to trace it.

    Returns:
        A :class:`PageUse` in bytes (pages times the page size).

    Raises:
        MetricUnavailable: no ``/proc/<pid>/pagemap`` here (macOS, Windows).
    """
    import numpy as np

    where = f"/proc/{'self' if pid is None else int(pid)}/pagemap"
    if not os.path.exists(where):
        raise MetricUnavailable(f"page-by-page memory needs Linux's {where}, absent on {sys.platform}")
    spans = np.array([(address, size) for address, size in regions if size > 0], dtype=np.int64).reshape(-1, 2)
    if not len(spans):
        return PageUse(0, 0, 0)
    first = spans[:, 0] // _PAGE_BYTES
    counts = (spans[:, 0] + spans[:, 1] - 1) // _PAGE_BYTES + 1 - first
    starts = np.repeat(np.cumsum(counts) - counts, counts)  # where each region's pages begin in the list
    pages = np.unique(np.repeat(first, counts) + np.arange(int(counts.sum()), dtype=np.int64) - starts)
    present = alone = 0
    # read runs of nearby pages at once: one seek per run, not per page
    breaks = np.flatnonzero(np.diff(pages) > 512) + 1
    with open(where, "rb") as f:
        for run in np.split(pages, breaks):
            f.seek(int(run[0]) * 8)
            entries = np.frombuffer(f.read((int(run[-1]) - int(run[0]) + 1) * 8), dtype=np.uint64)
            entries = entries[run - run[0]]
            is_present = (entries & np.uint64(_PRESENT)) != 0
            present += int(is_present.sum())
            alone += int((is_present & ((entries & np.uint64(_EXCLUSIVE)) != 0)).sum())
    return PageUse(len(pages) * _PAGE_BYTES, present * _PAGE_BYTES, alone * _PAGE_BYTES)


def probe_overhead(rounds: int = 6, *, items: int = 240, seconds_per_item: float = 0.008,
                   num_workers: int = 2, batch_size: int = 4, interval_s: float = 0.05,
                   max_overhead: float = MAX_OVERHEAD, dataset: Any = None) -> dict[str, Any]:
    """How much a :class:`MemoryProbe` slows a loader: paired epochs with and without it.

    The loader reads a :class:`~feedgpu.workloads.SpinDataset` (``seconds_per_item`` of
    CPU per item) with persistent workers, so the workers keep the cores busy and every
    bit of CPU the probe takes shows, and start-up is paid once, in a warm-up epoch. Each
    round times one epoch without the probe and one with it, in alternating order so that
    a drift of the machine's load hits both alike; the overhead is the median over rounds
    of (with / without) - 1. Only the loop over the loader is timed: the probe's first
    and last samples (taken in the calling thread, ~10 ms a torch process) come before
    and after it. Run it on a quiet machine: other programs' load moves single epochs by
    more than the probe does.

    Args:
        rounds: paired epochs.
        items, seconds_per_item: the SpinDataset's size and CPU seconds per item.
        num_workers, batch_size: the DataLoader's.
        interval_s, max_overhead: the probe's (see :class:`MemoryProbe`).
        dataset: another dataset to load instead (``items`` and ``seconds_per_item`` are
            then unused), e.g. a :class:`~feedgpu.workloads.SleepDataset` to see the cost
            that is not CPU (locks, the GIL) on a loader that leaves cores free.

    Returns:
        ``{"overhead": median relative slowdown (0.02 = 2%), "ratios": per round,
        "quartiles": the ratios' 25th and 75th percentiles (their spread is the
        machine's noise), "without_s", "with_s": epoch times, "samples": mean samples
        per probed epoch, "probe_cpu_s": mean CPU time of the probe's thread per epoch,
        "probe_cpu_share": that CPU time over the probed epochs' time, as a share of one
        core}``.

    Raises:
        ValueError: ``rounds`` below 1.
    """
    from torch.utils.data import DataLoader

    from ..workloads import SpinDataset
    from .timing import shutdown_workers

    if int(rounds) != rounds or rounds < 1:
        raise ValueError(f"rounds must be an integer >= 1, got {rounds!r}")
    dataset = SpinDataset(items, seconds_per_item) if dataset is None else dataset
    loader = DataLoader(dataset, batch_size=batch_size,
                        num_workers=num_workers, persistent_workers=num_workers > 0)

    def epoch(probed: bool) -> tuple[float, MemoryProbe | None]:
        probe = MemoryProbe(interval_s, max_overhead=max_overhead).start() if probed else None
        try:  # only the loop is timed: the probe's first and last samples are not the loader's
            start = time.perf_counter()
            for _ in loader:
                pass
            seconds = time.perf_counter() - start
        finally:
            if probe is not None:
                probe.stop()
        return seconds, probe

    without, with_, samples, cpu = [], [], [], []
    try:
        epoch(False)  # warm-up: starts the workers
        for r in range(int(rounds)):
            for probed in ((False, True) if r % 2 == 0 else (True, False)):
                seconds, probe = epoch(probed)
                (with_ if probed else without).append(seconds)
                if probe is not None:
                    samples.append(probe.samples)
                    cpu.append(probe.cpu_s)
    finally:
        shutdown_workers(loader)
    ratios = [w / wo for w, wo in zip(with_, without)]
    quartiles = statistics.quantiles(ratios, n=4) if len(ratios) > 1 else [ratios[0]] * 3
    result = {"overhead": statistics.median(ratios) - 1, "ratios": ratios,
              "quartiles": (quartiles[0], quartiles[2]), "without_s": without, "with_s": with_,
              "samples": statistics.mean(samples), "probe_cpu_s": statistics.mean(cpu),
              "probe_cpu_share": sum(cpu) / sum(with_)}
    logger.info("memory probe overhead: %+.1f%% (median of %d paired epochs)", 100 * result["overhead"], rounds)
    return result


if __name__ == "__main__":  # python -m feedgpu.measure.memory [rounds] [sleep]: the overhead here
    logging.basicConfig(level=logging.INFO)
    extra: dict[str, Any] = {}
    if "sleep" in sys.argv[2:]:
        from ..workloads import SleepDataset

        extra["dataset"] = SleepDataset(240, 0.008)
    found = probe_overhead(int(sys.argv[1]) if len(sys.argv) > 1 else 6, **extra)
    print(f"overhead {100 * found['overhead']:+.1f}% (quartiles of with/without "
          f"{found['quartiles'][0]:.3f}-{found['quartiles'][1]:.3f} over {len(found['ratios'])} rounds); "
          f"{found['samples']:.1f} samples and {1e3 * found['probe_cpu_s']:.0f} ms of probe CPU per epoch "
          f"of {statistics.mean(found['without_s']):.2f} s: {100 * found['probe_cpu_share']:.1f}% of one core")
