"""Start a script on several processes with ``torchrun``, from Python, and leave nothing behind.

``torchrun`` (the same program as ``python -m torch.distributed.run``) starts one *agent* per
machine, which starts ``--nproc-per-node`` copies of your script, tells each its rank
through environment variables, restarts or stops them together, and reports the first
failure. :func:`run_torchrun` runs it on this machine with a time limit and collects what
every rank printed; :func:`torchrun_command` writes the command line for one machine or
several, for a README or a terminal.

Nothing may survive a run: a hung rank, or a DataLoader worker of a crashed one, would keep
a core busy and a port open. torchrun starts every rank in a session of its own, so
killing torchrun's process group is not enough. Every process of a launch carries a
marker in its environment (inherited by ranks and their workers alike), and at the end
every process that still carries it is stopped: ``SIGTERM``, a grace period, ``SIGKILL``.

How long a launch may take depends on how the ranks' DataLoader workers start
(:func:`worker_start_method`, :func:`launch_time_limit_s`): a rank is a new Python
process, so a start method set in this one does not reach it, and under *spawn* (macOS,
Windows) or *forkserver* (Linux from Python 3.14) each of its workers imports PyTorch again.

On native Windows torchrun does not start in the PyTorch we pin: its rendezvous creates a
``TCPStore`` without saying ``use_libuv`` (``torch/distributed/elastic/rendezvous/
c10d_rendezvous_backend.py`` and ``static_tcp_rendezvous.py``), whose default is libuv,
and the Windows builds have no libuv (``torch/distributed/rendezvous.py`` says so where it
turns libuv off for ``env://`` on Windows). ``USE_LIBUV=0`` does not reach those two
stores. Run the course in WSL there.
"""

from __future__ import annotations

import json
import logging
import multiprocessing
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from ..base.checks import check_int, check_seconds

__all__ = [
    "LaunchError",
    "LaunchResult",
    "torchrun_command",
    "run_torchrun",
    "marked_processes",
    "free_port",
    "REIMPORTING",
    "REIMPORT_S",
    "worker_start_method",
    "launch_time_limit_s",
]

logger = logging.getLogger(__name__)

MARKER = "FEEDGPU_LAUNCH_ID"  # environment variable every process of one launch inherits
SCRIPT = "feedgpu.distributed.epoch_script"


#: Start methods under which a DataLoader worker is a new Python process that imports
#: PyTorch again, instead of a copy of its rank (*fork*).
REIMPORTING = frozenset({"spawn", "forkserver"})

#: Seconds a launch's time limit allows for each worker that imports PyTorch again:
#: importing it took about 2 s on a 2-core machine without other load; five times that
#: covers a busy laptop.
REIMPORT_S = 10.0

#: Seconds a launch's time limit allows for torchrun, its ranks and their work: a launch of
#: the course's plans took 7 to 25 s on a 2-core machine under load.
LAUNCH_BASE_S = 90.0


def worker_start_method() -> str:
    """How DataLoader workers start in torchrun's ranks on this machine: fork, spawn or forkserver.

    The ranks are new Python processes, so a start method set in this one
    (``multiprocessing.set_start_method``) does not reach them: they use the platform's
    default, the first of ``multiprocessing.get_all_start_methods()``: *fork* on Linux up
    to Python 3.13, *forkserver* on Linux from 3.14, *spawn* on macOS and Windows. (The
    epoch script's ``--worker-start-method`` chooses another.)
    """
    return multiprocessing.get_all_start_methods()[0]


def launch_time_limit_s(reimporting_workers: int = 0, *, base_s: float = LAUNCH_BASE_S) -> float:
    """A time limit for one launch whose ranks start ``reimporting_workers`` DataLoader
    workers (counted over every rank and every run) that import PyTorch again.

    A limit, not a prediction: a launch that passes it has hung. ``base_s`` covers
    torchrun, its ranks and their work; each such worker adds :data:`REIMPORT_S`.

    Raises:
        ValueError: a negative or fractional number of workers, or ``base_s`` negative or
            not finite (:mod:`feedgpu.base.checks`).
    """
    return check_seconds("base_s", base_s) + REIMPORT_S * check_int("reimporting_workers", reimporting_workers)


class LaunchError(RuntimeError):
    """A torchrun launch failed or ran out of time; the message says which rank and why."""


@dataclass
class LaunchResult:
    """What one torchrun launch did.

    Attributes:
        command: the command line that ran.
        returncode: torchrun's exit status (0: every rank succeeded; negative: killed by
            that signal, after a timeout).
        elapsed_s: seconds from the start until every process had stopped.
        timed_out: the launch ran past ``timeout_s`` and was stopped.
        stdout, stderr: torchrun's own output (its agent's log, the failure summary).
        rank_stdout, rank_stderr: what each rank printed, by local rank (the global rank
            on one machine).
        rank_errors: for each rank that raised, the exception and traceback it recorded.
        rank_exitcodes: each failed rank's exit status from torchrun's summary (``-15``: a
            rank torchrun stopped with SIGTERM because another one failed).
        failed_rank: the rank torchrun names as the first failure (the root cause), or
            the earliest rank that recorded an error; None if no rank failed.
        leftovers: processes still alive once torchrun had exited, which were then stopped.
        launch_id: the marker in every process's environment (see :func:`marked_processes`).
        started_at: ``time.time()`` at the start, to compare with times the ranks record.
    """

    command: list[str]
    returncode: int | None
    elapsed_s: float
    timed_out: bool
    stdout: str = ""
    stderr: str = ""
    rank_stdout: dict[int, str] = field(default_factory=dict)
    rank_stderr: dict[int, str] = field(default_factory=dict)
    rank_errors: dict[int, str] = field(default_factory=dict)
    rank_exitcodes: dict[int, int] = field(default_factory=dict)
    failed_rank: int | None = None
    leftovers: int = 0
    launch_id: str = ""
    started_at: float = 0.0

    @property
    def ok(self) -> bool:
        """Whether every rank finished without error in time."""
        return self.returncode == 0 and not self.timed_out

    def report(self, lines: int = 15) -> str:
        """A few lines saying what happened, with the failed rank's last ``lines`` of stderr."""
        if self.ok:
            return f"torchrun: {len(self.rank_stdout)} ranks finished in {self.elapsed_s:.1f} s"
        head = (f"torchrun stopped after {self.elapsed_s:.1f} s (time limit reached)"
                if self.timed_out else
                f"torchrun exited with status {self.returncode} after {self.elapsed_s:.1f} s")
        if "without libuv support" in self.stderr:  # native Windows (see the module's docstring)
            head += ("; its rendezvous store needs libuv, which PyTorch lacks on native Windows: "
                     "run the course in WSL")
        rank = self.failed_rank
        if rank is None:
            tail = "\n".join(self.stderr.splitlines()[-lines:])
            return f"{head}; no rank recorded an error. torchrun's last lines:\n{tail}"
        text = self.rank_errors.get(rank) or self.rank_stderr.get(rank, "")
        tail = "\n".join(text.rstrip().splitlines()[-lines:])
        return f"{head}; rank {rank} failed first:\n{tail}"

    def check(self) -> LaunchResult:
        """Return self if :attr:`ok`, else raise :class:`LaunchError` with :meth:`report`."""
        if not self.ok:
            raise LaunchError(self.report())
        return self


#: The ports :func:`free_port` draws from: below the range the system hands out to the
#: outgoing connections of every program and to ``bind(port 0)`` (Linux: 32768-60999 by
#: default, ``/proc/sys/net/ipv4/ip_local_port_range``; macOS and Windows: 49152-65535).
QUIET_PORTS = range(20000, 32768)
#: Where Linux says which ports it hands out.
EPHEMERAL_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")


def _quiet_ports() -> range:
    """:data:`QUIET_PORTS`, less any of them this machine hands out itself."""
    try:
        low = int(EPHEMERAL_RANGE.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return QUIET_PORTS
    return range(QUIET_PORTS.start, min(QUIET_PORTS.stop, low))


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that is free now, drawn at random from ports the system never hands out
    by itself (:data:`QUIET_PORTS`).

    A port the system handed out (``bind`` to port 0) is one it may hand out again, to any
    connection a program opens, before yours is bound: a plan's later phases bind theirs
    tens of seconds after it is written, and while the course was graded two notebooks at
    a time, notebook 08's phase found its port taken (``EADDRINUSE``, port 40201). Only a
    program that binds the very same port on purpose can still take it first. Drawn with the
    system's randomness, not :mod:`random`, which a notebook may have seeded as another
    has. Where no quiet port is free, the system's choice.
    """
    draw = secrets.SystemRandom()
    ports = _quiet_ports()
    for _ in range(50 if ports else 0):
        port = draw.choice(ports)
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind((host, port))
            except OSError:
                continue
            return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def _target(script_or_module: str | os.PathLike, module: bool | None) -> list[str]:
    """``["-m", name]`` for a module, ``[path]`` for a script file."""
    text = os.fspath(script_or_module)
    if module is None:
        module = not (text.endswith(".py") or os.sep in text or Path(text).is_file())
    return ["-m", text] if module else [text]


def torchrun_command(script_or_module: str | os.PathLike = SCRIPT, args: Sequence[str] = (), *,
                     nproc_per_node: int = 2, nnodes: int = 1, node_rank: int | None = None,
                     rdzv_endpoint: str | None = None, rdzv_id: str = "feedgpu",
                     module: bool | None = None, log_dir: str | os.PathLike | None = None,
                     launcher: Sequence[str] = ("torchrun",)) -> list[str]:
    """The torchrun command line that runs ``script_or_module`` on one machine or several.

    * One machine (``nnodes=1``, no ``rdzv_endpoint``): ``--standalone``, which starts its
      own rendezvous on a free port of this machine, so two runs side by side never collide.
    * Several machines, elastic (``rdzv_endpoint="host:port"``, no ``node_rank``): the same
      command on every machine; they meet at the c10d rendezvous on ``host`` (one of the
      machines, which holds its store). Once enough have joined, the rendezvous numbers
      them by sorting their host names (then the agents' process ids), not by arrival
      (``torch/distributed/elastic/rendezvous/dynamic_rendezvous.py``,
      ``_mark_rendezvous_complete``), and machine ``k`` runs ranks ``k * nproc_per_node``
      onwards. ``rdzv_id`` names the job: the same on all.
    * Several machines, static (``node_rank`` given): machine ``node_rank`` of ``nnodes``;
      ranks ``node_rank * nproc_per_node ...`` run there. ``rdzv_endpoint`` is the address
      of machine 0, which must run with ``node_rank=0``.

    Args:
        script_or_module: a ``.py`` file, or a module name run as ``python -m`` would.
        args: the script's own arguments, after the target.
        module: force module (True) or script (False); by default guessed from the name.
        log_dir: if given, each rank's stdout and stderr go to files under it
            (``--redirects 3``), and a failing rank's error file too.
        launcher: the program: ``("torchrun",)`` for a README, or
            ``(sys.executable, "-m", "torch.distributed.run")`` for this very environment.

    Raises:
        ValueError: several machines without an ``rdzv_endpoint``, or a ``node_rank`` out
            of range.
    """
    cmd = [*launcher, f"--nproc-per-node={nproc_per_node}"]
    if nnodes == 1 and rdzv_endpoint is None:
        cmd.append("--standalone")
    elif rdzv_endpoint is None:
        raise ValueError(f"{nnodes} machines need a meeting point: pass "
                         "rdzv_endpoint='<address of one machine>:<free port>', e.g. '10.0.0.1:29400'")
    elif node_rank is None:
        cmd += [f"--nnodes={nnodes}", "--rdzv-backend=c10d",
                f"--rdzv-endpoint={rdzv_endpoint}", f"--rdzv-id={rdzv_id}"]
    else:
        if not 0 <= node_rank < nnodes:
            raise ValueError(f"node_rank must be in 0..{nnodes - 1}, got {node_rank}")
        host, _, port = rdzv_endpoint.rpartition(":")
        cmd += [f"--nnodes={nnodes}", f"--node-rank={node_rank}", "--rdzv-backend=static",
                f"--master-addr={host}", f"--master-port={port}"]
    if log_dir is not None:
        cmd += [f"--log-dir={os.fspath(log_dir)}", "--redirects=3"]
    return cmd + _target(script_or_module, module) + [str(a) for a in args]


def marked_processes(launch_id: str) -> list[psutil.Process]:
    """Every live process (other than this one) whose environment carries ``launch_id``."""
    found = []
    for proc in psutil.process_iter():
        if proc.pid == os.getpid():
            continue
        try:
            if proc.environ().get(MARKER) == launch_id and proc.status() != psutil.STATUS_ZOMBIE:
                found.append(proc)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess, OSError):
            pass  # gone, or another user's process: not ours
    return found


def _stop(procs: list[psutil.Process], grace_s: float) -> None:
    """SIGTERM ``procs``, wait up to ``grace_s``, SIGKILL what is left, and reap."""
    for sig, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 5.0)):
        for p in procs:
            try:
                p.send_signal(sig)
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                pass
        _, procs = psutil.wait_procs(procs, timeout=wait_s)
        if not procs:
            return
    logger.warning("processes %s survived SIGKILL", [p.pid for p in procs])


def _stop_torchrun(proc: subprocess.Popen, grace_s: float) -> None:
    """Ask torchrun's process group to stop (it passes SIGTERM on to its ranks), then force it."""
    def signal_group(sig: int) -> None:
        try:
            if hasattr(os, "killpg"):
                os.killpg(proc.pid, sig)
            else:  # Windows: no process groups
                proc.send_signal(sig)
        except (ProcessLookupError, PermissionError):
            pass

    signal_group(signal.SIGTERM)
    try:
        proc.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        signal_group(getattr(signal, "SIGKILL", signal.SIGTERM))
        proc.wait()


def _rank_logs(log_dir: Path) -> tuple[dict[int, str], dict[int, str], dict[int, str], dict[int, float]]:
    """Each rank's stdout, stderr, recorded error (with traceback) and when it recorded it,
    from the newest attempt under torchrun's ``--log-dir``.

    The time of an error is its error file's modification time: torchrun's own timestamp
    counts whole seconds, too coarse to tell a crash from the failures it causes.
    """
    out: dict[int, str] = {}
    err: dict[int, str] = {}
    errors: dict[int, str] = {}
    when: dict[int, float] = {}
    attempts = sorted(log_dir.glob("*/attempt_*"), key=lambda p: int(p.name.split("_")[-1]))
    if not attempts:
        return out, err, errors, when
    for rank_dir in attempts[-1].iterdir():
        if not rank_dir.name.isdigit():
            continue
        rank = int(rank_dir.name)
        out[rank], err[rank] = _read(rank_dir / "stdout.log"), _read(rank_dir / "stderr.log")
        error_file = rank_dir / "error.json"
        if error_file.is_file():
            when[rank] = error_file.stat().st_mtime
            try:
                message = json.loads(_read(error_file))["message"]
                errors[rank] = message["extraInfo"]["py_callstack"] or message["message"]
            except (ValueError, KeyError, TypeError):
                errors[rank] = _read(error_file)
    return out, err, errors, when


def _read(path: Path) -> str:
    return path.read_text(errors="replace") if path.is_file() else ""


# torchrun's failure summary: "rank      : 1 (local_rank: 1)" then "exitcode  : -15 (pid: ...)"
_FAILURE = re.compile(r"rank\s*:\s*\d+ \(local_rank: (\d+)\)\s*\n\s*exitcode\s*:\s*(-?\d+)")
_ROOT_CAUSE = re.compile(r"Root Cause \(first observed failure\):.*?local_rank: (\d+)\)", re.S)


def _exit_codes(torchrun_stderr: str) -> dict[int, int]:
    """Each failed rank's exit status, from torchrun's failure summary (by local rank)."""
    return {int(rank): int(code) for rank, code in _FAILURE.findall(torchrun_stderr)}


def _failed_rank(torchrun_stderr: str, when: dict[int, float]) -> int | None:
    """The rank that failed first.

    The first to write an error file (ranks that lose a peer fail a moment later);
    without error files, the one rank that torchrun did not have to stop with SIGTERM;
    else the root cause in torchrun's summary.
    """
    if when:
        return min(when, key=lambda r: (when[r], r))
    codes = _exit_codes(torchrun_stderr)
    own = [r for r, code in codes.items() if code != -signal.SIGTERM]
    if len(own) == 1:
        return own[0]
    match = _ROOT_CAUSE.search(torchrun_stderr)
    return int(match.group(1)) if match else (min(own) if own else None)


def run_torchrun(script_or_module: str | os.PathLike = SCRIPT, args: Sequence[str] = (), *,
                 nproc_per_node: int = 2, timeout_s: float = 120.0,
                 env: Mapping[str, str] | None = None, workdir: str | os.PathLike | None = None,
                 module: bool | None = None, grace_s: float = 5.0,
                 **command_options) -> LaunchResult:
    """Run ``script_or_module`` on ``nproc_per_node`` processes with torchrun; wait; clean up.

    torchrun runs in a session of its own, from this environment's Python
    (``python -m torch.distributed.run``), with ``--standalone`` (a rendezvous on a free
    port: launches side by side do not collide). Each rank's output goes to its own log
    file, read back into the result. Whatever happens (success, a failed rank, the time
    limit, an interrupt of this call) every process of the launch is stopped before it
    returns.

    Args:
        script_or_module: a ``.py`` file, or a module name (the course's
            :mod:`~feedgpu.distributed.epoch_script` by default).
        args: the script's arguments.
        timeout_s: seconds before the launch is stopped (``timed_out`` is then True).
        env: variables added to this process's environment for the launch.
        workdir: the working directory of torchrun and its ranks (a module there can be
            imported by name); the current one by default.
        grace_s: after the time limit, seconds between SIGTERM and SIGKILL.
        **command_options: passed to :func:`torchrun_command` (``nnodes``,
            ``rdzv_endpoint``, ``node_rank``, ``rdzv_id``), to start one machine's share of
            a multi-machine run (here, usually two "machines" on one host).

    Returns:
        A :class:`LaunchResult`; call ``.check()`` on it to raise if a rank failed.
    """
    launch_id = uuid.uuid4().hex
    full_env = {**os.environ, **(env or {}), MARKER: launch_id, "PYTHONUNBUFFERED": "1"}
    log_dir = Path(tempfile.mkdtemp(prefix="torchrun-logs-"))
    cmd = torchrun_command(script_or_module, args, nproc_per_node=nproc_per_node, module=module,
                           log_dir=log_dir,
                           launcher=(sys.executable, "-m", "torch.distributed.run"),
                           **command_options)
    logger.info("starting %s", " ".join(cmd))
    timed_out = False
    started_at, start = time.time(), time.perf_counter()
    try:
        with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
            proc = subprocess.Popen(cmd, cwd=workdir, env=full_env, stdout=out, stderr=err,
                                    stdin=subprocess.DEVNULL, start_new_session=True)
            try:
                proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                timed_out = True
                logger.warning("torchrun passed its %.0f s limit: stopping every rank", timeout_s)
            finally:  # also on KeyboardInterrupt
                if proc.poll() is None:
                    _stop_torchrun(proc, grace_s)
                leftovers = marked_processes(launch_id)
                _stop(leftovers, grace_s)
            out.seek(0)
            err.seek(0)
            stdout, stderr = out.read(), err.read()
        rank_out, rank_err, rank_errors, when = _rank_logs(log_dir)
    finally:
        shutil.rmtree(log_dir, ignore_errors=True)
    return LaunchResult(cmd, proc.returncode, time.perf_counter() - start, timed_out,
                        stdout, stderr, rank_out, rank_err, rank_errors, _exit_codes(stderr),
                        _failed_rank(stderr, when), len(leftovers), launch_id, started_at)
