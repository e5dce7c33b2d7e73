"""Run a command with a wall-clock limit, a memory limit and a process limit, and leave
no process behind.

Grading runs students' code: an infinite loop, a memory bomb, a fork bomb of DataLoader
workers or a hung worker must cost one submission a bounded time, never the class. The
command runs in a session of its own; a watchdog polls its processes (psutil) and kills
them all when a limit is passed. Processes are followed by *session*, not only by
parentage: a Jupyter kernel starts in a session of its own, and workers orphaned by a
crashed kernel are re-parented to init but keep their session, so nothing escapes.

If the process that runs the watchdog dies itself (a Dask worker killed in the middle of a
grading), its command is killed with it on Linux (the parent-death signal), and every
session it was watching is listed in a small file under :data:`REGISTRY`:
:func:`reap_orphans`, called before each grading on the machine and at the end of a
class, kills the sessions of owners that are gone.
"""

from __future__ import annotations

import ctypes
import json
import logging
import os
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from ...base.files import write_json_atomically
from ...measure.memory import family_memory_of, memory_of

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Limits:
    """What one command may use. The defaults fit a 2-core, 8 GB laptop and the course."""

    wall_s: float = 900.0
    memory_mb: float = 4096.0  # resident memory of all its processes together
    max_processes: int = 48
    poll_s: float = 0.1


@dataclass
class Outcome:
    """What happened to one command."""

    returncode: int | None
    stdout: str
    stderr: str
    seconds: float
    peak_memory_mb: float  # peak RSS of all processes together (an upper bound; see _memory_mb)
    peak_processes: int
    killed_for: str | None = None  # "time", "memory" or "processes"
    leftovers_killed: int = 0  # processes still alive after the command ended
    sessions: set[int] = field(default_factory=set)


def _session_of(pid: int) -> int | None:
    try:
        return os.getsid(pid)
    except OSError:
        return None


def processes_in(sessions: set[int]) -> list[psutil.Process]:
    """Every live process whose session is one of ``sessions``."""
    found = []
    for proc in psutil.process_iter(["pid"]):
        if proc.pid != os.getpid() and _session_of(proc.pid) in sessions:
            found.append(proc)
    return found


def _track(root: psutil.Process, sessions: set[int]) -> list[psutil.Process]:
    """Add the sessions of ``root``'s descendants to ``sessions``; return all processes in them."""
    try:
        for child in root.children(recursive=True):
            sid = _session_of(child.pid)
            if sid is not None:
                sessions.add(sid)
    except psutil.NoSuchProcess:
        pass
    return processes_in(sessions)


def _memory_mb(procs: list[psutil.Process], proportional: bool = False) -> float:
    """Resident memory of ``procs`` together, in MB.

    RSS counts the pages that forked DataLoader workers share with their parent once per
    process, so it overstates; PSS splits shared pages fairly but costs ~10 ms a process
    to read. The watchdog polls RSS and confirms with PSS before it kills; where PSS cannot
    be read (macOS, Windows), with the private pages plus the shared ones counted once
    (:func:`~feedgpu.measure.memory.family_memory_of`), never with RSS alone.
    """
    return (family_memory_of(procs) if proportional else memory_of(procs, "rss")) / 2**20


def kill_sessions(sessions: set[int], created_before: float | None = None) -> int:
    """SIGKILL every process of ``sessions`` (only those started before the time
    ``created_before``, when given); return how many were alive."""
    killed: set[int] = set()
    for _ in range(20):  # again, until none is left: a fork bomb forks between a look and a kill
        procs = [p for p in processes_in(sessions) if p.pid not in killed
                 and (created_before is None or _created(p) < created_before)]
        if not procs:
            break
        for p in procs:
            try:
                p.send_signal(signal.SIGKILL)
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                pass
        psutil.wait_procs(procs, timeout=5)
        killed.update(p.pid for p in procs)
    return len(killed)


#: One file per running command, listing the sessions its watchdog follows.
REGISTRY = Path(tempfile.gettempdir()) / f"feedgpu-sandbox-{os.getuid()}"

_PR_SET_PDEATHSIG = 1
_LIBC = ctypes.CDLL(None, use_errno=True) if sys.platform == "linux" else None


def _die_with_parent() -> None:
    """Runs in the child between fork and exec: SIGKILL it when the thread that started
    it dies (that thread waits in :func:`run_limited` until the command ends)."""
    _LIBC.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


def _created(proc: psutil.Process) -> float:
    try:
        return proc.create_time()
    except psutil.Error:
        return float("inf")


def _owner() -> str:
    """This process, as a registry file names it: pid and start time (pids are reused)."""
    return f"{os.getpid()}-{psutil.Process().create_time():.3f}"


def _write_registry(path: Path, sessions: set[int]) -> None:
    write_json_atomically(path, sorted(sessions))


def reap_orphans() -> int:
    """Kill the sessions of every command whose watchdog's process is gone; return how
    many processes were alive in them.

    The watchdog touches its file every second, so a process started well after the file's
    last change is no part of that command (a session id reused since) and is spared.
    """
    killed = 0
    for path in sorted(REGISTRY.glob("*.json")) if REGISTRY.is_dir() else []:
        try:
            pid, started, _ = path.name.split("-", 2)
            owner = psutil.Process(int(pid))
            if f"{owner.create_time():.3f}" == started and owner.status() != psutil.STATUS_ZOMBIE:
                continue  # its watchdog still runs
        except (ValueError, psutil.NoSuchProcess):
            pass
        try:
            sessions, last_seen = set(json.loads(path.read_text())), path.stat().st_mtime
        except (OSError, ValueError):
            sessions, last_seen = set(), 0.0
        found = kill_sessions(sessions, created_before=last_seen + 5.0)
        if found:
            logger.warning("killed %d processes left by a grading whose process died", found)
        killed += found
        path.unlink(missing_ok=True)
    return killed


def run_limited(cmd: list[str], limits: Limits = Limits(), *, cwd: str | os.PathLike | None = None,
                env: dict[str, str] | None = None) -> Outcome:
    """Run ``cmd`` under ``limits``; kill all its processes at the end, whatever happened.

    Returns:
        The :class:`Outcome`; ``killed_for`` says which limit ended it, if one did.
    """
    start = time.perf_counter()
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        REGISTRY.mkdir(parents=True, exist_ok=True)
        fd, name = tempfile.mkstemp(prefix=_owner() + "-", suffix=".json", dir=REGISTRY)
        os.close(fd)
        registry = Path(name)
        try:
            proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=out, stderr=err,
                                    stdin=subprocess.DEVNULL, start_new_session=True,
                                    preexec_fn=_die_with_parent if _LIBC is not None else None)
        except BaseException:
            registry.unlink(missing_ok=True)
            raise
        root = psutil.Process(proc.pid)
        sessions = {proc.pid}
        _write_registry(registry, sessions)
        killed_for, peak_mb, peak_n, last_pss, last_touch = None, 0.0, 1, 0.0, time.time()
        try:
            while proc.poll() is None:
                known = len(sessions)
                procs = _track(root, sessions)
                if len(sessions) != known or time.time() - last_touch > 1.0:
                    _write_registry(registry, sessions)  # also says "still watching"
                    last_touch = time.time()
                rss = _memory_mb(procs)
                peak_mb, peak_n = max(peak_mb, rss), max(peak_n, len(procs))
                now = time.perf_counter()
                if now - start > limits.wall_s:
                    killed_for = "time"
                elif len(procs) > limits.max_processes:
                    killed_for = "processes"
                elif rss > limits.memory_mb and now - last_pss > 1.0:
                    last_pss = now
                    pss = _memory_mb(procs, proportional=True)
                    if pss > limits.memory_mb:
                        killed_for, peak_mb = "memory", pss
                if killed_for:
                    logger.warning("killing %s: over its %s limit", cmd[:2], killed_for)
                    kill_sessions(sessions)
                    break
                time.sleep(limits.poll_s)
            proc.wait()
        finally:
            leftovers = kill_sessions(sessions)
            registry.unlink(missing_ok=True)
        out.seek(0)
        err.seek(0)
        return Outcome(proc.returncode, out.read(), err.read(), time.perf_counter() - start,
                       peak_mb, peak_n, killed_for, leftovers, sessions)


def describe(outcome: Outcome, limits: Limits) -> str:
    """A one-line reason for a command that a limit stopped."""
    return {
        "time": f"stopped after {limits.wall_s:.0f} s (time limit per submission)",
        "memory": f"stopped at {outcome.peak_memory_mb:.0f} MB (memory limit {limits.memory_mb:.0f} MB)",
        "processes": f"stopped with {outcome.peak_processes} processes (limit {limits.max_processes})",
    }.get(outcome.killed_for or "", "")


if __name__ == "__main__":  # a quick manual check: python -m feedgpu.workflows.grading.sandbox CMD ...
    import sys

    o = run_limited(sys.argv[1:])
    print(o.returncode, o.killed_for, f"{o.seconds:.1f}s", f"{o.peak_memory_mb:.0f}MB", o.stdout[-500:], o.stderr[-500:])
