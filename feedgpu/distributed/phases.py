"""Several runs of the epoch script in one torchrun launch, and functions of your own in them.

Starting torchrun costs seconds (torchrun and every rank import torch), far more than a
run of :mod:`~feedgpu.distributed.epoch_script` over a few dozen ids. So a launch runs a
*plan*: a list of **phases**, each one ordinary run of the epoch script (its own process
group, its own ``--out`` folder), one after the other in the same rank processes::

    torchrun --standalone --nproc-per-node=2 -m feedgpu.distributed.phases plan.json

``plan.json`` holds ``{"lobby_port": P, "phases": [{"name", "port", "args"}, ...]}``.

* Each phase joins a process group of its own on ``port`` (hosted by rank 0): the store
  torchrun set up still holds the previous group's keys and cannot serve a second one.
* Before each phase every rank waits in a *lobby* (a small key-value store hosted by rank 0
  on ``lobby_port``), so all ranks start a phase together even when the previous one
  failed on some of them at different times (a hang ended by the gloo timeout, a function
  that raised). A failed phase is recorded and the next one runs.
* Each rank writes ``<out>/phase-rank-<rank>.json`` for each phase: ``ok``, the error with
  its traceback, and when the phase started and ended.

:class:`PhaseRunner` runs plans from a notebook: it writes functions of yours (a
student's) into a module in its work folder, so that every rank and every DataLoader
worker can import them by name, and it remembers which phases already ran with which
source, so asking again for the same phase costs nothing.
"""

from __future__ import annotations

import ast
import hashlib
import inspect
import json
import logging
import os
import sys
import textwrap
import time
import traceback
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path

from .launch import (
    REIMPORTING,
    LaunchResult,
    free_port,
    launch_time_limit_s,
    run_torchrun,
    worker_start_method,
)
from ..base.files import write_atomically, write_json_atomically
from .seen import read_ranks, read_seen

__all__ = ["PhaseRunner", "PhasesRun", "write_plan", "function_module", "phase_status", "main"]

logger = logging.getLogger(__name__)

MODULE = "feedgpu.distributed.phases"
#: what a module of your functions starts with: they may use these names
MODULE_HEADER = '"""Functions copied from a notebook, for every rank to import."""\nimport math\n\nimport torch\n\n'


# --------------------------------------------------------------------------- in every rank


def _lobby(rank: int, world_size: int, port: int, timeout_s: float):
    """The lobby: a TCPStore on rank 0 (all ranks reach it at ``MASTER_ADDR``)."""
    from torch.distributed import TCPStore

    return TCPStore(os.environ.get("MASTER_ADDR", "127.0.0.1"), port, world_size, rank == 0,
                    timeout=timedelta(seconds=timeout_s))


def _wait_for_all(store, key: str, world_size: int, timeout_s: float) -> None:
    """Count this rank in at ``key`` and wait until every rank has."""
    store.add(key, 1)
    deadline = time.monotonic() + timeout_s
    while store.add(key, 0) < world_size:
        if time.monotonic() > deadline:
            raise TimeoutError(f"lobby: only {store.add(key, 0)} of {world_size} ranks reached {key}")
        time.sleep(0.01)


def main(argv: list[str] | None = None) -> None:
    """Run every phase of the plan on this rank (the entry point under torchrun)."""
    import torch.distributed as dist

    from . import epoch_script

    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        raise SystemExit("usage: python -m feedgpu.distributed.phases PLAN.json")
    plan = json.loads(Path(argv[0]).read_text())
    rank, world_size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    lobby_s = float(plan.get("lobby_timeout_s", 300.0))
    store = _lobby(rank, world_size, int(plan["lobby_port"]), lobby_s)
    run_once = getattr(epoch_script.main, "__wrapped__", epoch_script.main)  # no error file per phase
    os.environ["TORCHELASTIC_USE_AGENT_STORE"] = "False"  # rank 0 hosts each phase's store
    for k, phase in enumerate(plan["phases"]):
        name, args = phase["name"], [str(a) for a in phase["args"]]
        out = Path(args[args.index("--out") + 1])
        _wait_for_all(store, f"phase/{k}", world_size, lobby_s)
        os.environ["MASTER_PORT"] = str(phase["port"])
        status = {"phase": name, "rank": rank, "ok": False, "error": None, "started_at": time.time()}
        print(f"== phase {name} started", flush=True)
        try:
            run_once(args)
            status["ok"] = True
            print(f"== phase {name} finished", flush=True)
        except Exception:  # recorded; the next phase still runs
            status["error"] = traceback.format_exc()
            # The traceback's frames hold the failed phase's DataLoader, in a reference cycle:
            # cleared, its workers are stopped now, not whenever the garbage collector runs
            # (in a later phase, which then waits for them)
            traceback.clear_frames(sys.exc_info()[2])
            print(f"== phase {name} failed", flush=True)
            print(f"phase {name} failed on rank {rank}:\n{status['error']}", file=sys.stderr, flush=True)
            if dist.is_initialized():
                dist.destroy_process_group()
        status["finished_at"] = time.time()
        write_json_atomically(out / f"phase-rank-{rank}.json", status)
    # rank 0 hosts the lobby: it leaves last, once every other rank has left
    _wait_for_all(store, "end", world_size, lobby_s) if rank == 0 else store.add("end", 1)


# --------------------------------------------------------------------------- in the notebook


def _is_stub(source: str) -> bool:
    """Whether the function defined in ``source`` does nothing but raise NotImplementedError
    (after its docstring): a release's unanswered stub."""
    try:
        tree = ast.parse(textwrap.dedent(source))
    except SyntaxError:
        return False
    defs = [node for node in tree.body if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))]
    if not defs:
        return False
    body = defs[0].body
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
            and isinstance(body[0].value.value, str):
        body = body[1:]  # the docstring
    if len(body) != 1 or not isinstance(body[0], ast.Raise) or body[0].exc is None:
        return False
    exc = body[0].exc.func if isinstance(body[0].exc, ast.Call) else body[0].exc
    return isinstance(exc, ast.Name) and exc.id == "NotImplementedError"


def function_module(folder: str | os.PathLike, functions: Sequence[Callable],
                    prefix: str = "mine") -> str:
    """Write the source of ``functions`` into a module in ``folder``; return its name.

    The name carries a hash of the source (``mine_1a2b3c4d``): a changed function gets a
    new module, never a stale import. The module starts with :data:`MODULE_HEADER`, so the
    functions may use ``math`` and ``torch``; anything else they need they must import
    themselves (a notebook's other names do not exist in the ranks).

    Raises:
        TypeError: something in ``functions`` has no source (a builtin, a lambda in a
            larger expression is fine, a C function is not).
        NotImplementedError: a function is still a stub, whose body only raises
            NotImplementedError: every rank would fail on it, after seconds of start-up.
    """
    sources = []
    for fn in functions:
        try:
            sources.append(inspect.getsource(fn))
        except (OSError, TypeError) as e:
            raise TypeError(f"cannot read the source of {fn!r}: define it with def in a cell") from e
        if _is_stub(sources[-1]):
            raise NotImplementedError(f"{fn.__name__} only raises NotImplementedError: write it first (nothing "
                                      "was launched; every rank would have failed on it)")
    text = MODULE_HEADER + "\n\n".join(sources)
    name = f"{prefix}_{hashlib.sha256(text.encode()).hexdigest()[:10]}"
    path = Path(folder) / f"{name}.py"
    if not path.is_file():
        write_atomically(path, text)  # a rank never imports half a file
    return name


def write_plan(path: str | os.PathLike, phases: Sequence[tuple[str, Sequence[str]]],
               lobby_timeout_s: float = 300.0) -> Path:
    """Write a plan: each phase gets a free port for its process group, the lobby one more."""
    plan = {"lobby_port": free_port(), "lobby_timeout_s": lobby_timeout_s,
            "phases": [{"name": name, "port": free_port(), "args": [str(a) for a in args]}
                       for name, args in phases]}
    path = Path(path)
    write_json_atomically(path, plan)
    return path


def phase_status(outdir: str | os.PathLike) -> list[dict]:
    """Each rank's status for the phase whose ``--out`` was ``outdir`` (sorted by rank)."""
    paths = sorted(Path(outdir).glob("phase-rank-*.json"))
    return sorted((json.loads(p.read_text()) for p in paths), key=lambda s: s["rank"])


@dataclass
class PhasesRun:
    """The phases asked for, where they wrote, and the launch that ran them (if any ran)."""

    folders: dict[str, Path]
    world_size: int
    launch: LaunchResult | None = None
    launched: list[str] = field(default_factory=list)

    def out(self, name: str) -> Path:
        """The phase's ``--out`` folder (``rank-*.json``, ``phase-rank-*.json``)."""
        return self.folders[name]

    def ok(self, name: str) -> bool:
        """Whether every rank finished the phase without an error."""
        status = phase_status(self.out(name))
        return len(status) == self.world_size and all(s["ok"] for s in status)

    def problem(self, name: str) -> str:
        """Why the phase did not finish ('' if it did): the first rank's error, or the launch's."""
        status = phase_status(self.out(name))
        for s in status:
            if not s["ok"]:
                lines = s["error"].rstrip().splitlines()
                return f"phase {name}, rank {s['rank']}:\n" + "\n".join(lines[-6:])
        if len(status) < self.world_size:
            launch = self.launch.report() if self.launch else "no launch"
            return f"phase {name}: {len(status)} of {self.world_size} ranks got to its end; {launch}"
        return ""

    def records(self, name: str) -> list[dict]:
        """Each rank's record (:func:`~feedgpu.distributed.seen.read_ranks`)."""
        return read_ranks(self.out(name))

    def seen(self, name: str):
        """One row per sample seen (:func:`~feedgpu.distributed.seen.read_seen`)."""
        return read_seen(self.out(name))


class PhaseRunner:
    """Run phases of the epoch script with torchrun, each at most once per source.

    Args:
        workdir: the work folder: modules of functions, plans, and one folder per phase
            under ``runs/``. The ranks run in it, so they import its modules by name.
        nproc_per_node: ranks (processes) on this machine.
        timeout_s: the time limit of one launch; past it every process is stopped. None:
            :meth:`time_limit_s` of the phases it runs, longer where the ranks' DataLoader
            workers import PyTorch again.
    """

    def __init__(self, workdir: str | os.PathLike, *, nproc_per_node: int = 2,
                 timeout_s: float | None = None):
        self.workdir = Path(workdir).resolve()
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.nproc_per_node = nproc_per_node
        self.timeout_s = timeout_s
        self.launches: list[LaunchResult] = []
        self._done: dict[str, Path] = {}  # phase key -> its folder

    def time_limit_s(self, phases: Mapping[str, Sequence[str]]) -> float:
        """The time limit of a launch that runs ``phases``: ``timeout_s`` if given, else
        :func:`~feedgpu.distributed.launch.launch_time_limit_s` counting every DataLoader
        worker that imports PyTorch again: ``--num-workers`` in each rank and each epoch (a
        loader starts its workers anew every epoch), under spawn or forkserver
        (``--worker-start-method``, else :func:`worker_start_method`)."""
        if self.timeout_s is not None:
            return self.timeout_s
        from . import epoch_script  # imports torch: only when a limit is computed

        reimporting = 0
        for args in phases.values():
            options = epoch_script.parse_args(["--out", "-", *(str(a) for a in args)])
            if (options.worker_start_method or worker_start_method()) in REIMPORTING:
                reimporting += self.nproc_per_node * options.num_workers * options.epochs
        return launch_time_limit_s(reimporting)

    def _key(self, name: str, args: Sequence[str]) -> str:
        return hashlib.sha256(json.dumps([name, list(args), self.nproc_per_node]).encode()).hexdigest()[:12]

    def run(self, phases: Mapping[str, Sequence[str]], functions: Sequence[Callable] = ()
            ) -> PhasesRun:
        """Run the ``phases`` not run before (one launch for all of them); return them all.

        Args:
            phases: name -> the epoch script's arguments, without ``--out``. The text
                ``{module}`` in an argument becomes the name of the module holding
                ``functions`` (``--indices-fn {module}:shard_indices``).
            functions: your functions, written into that module (see
                :func:`function_module`).

        A phase already run with the same arguments (and so the same functions' source)
        is not run again. The phases run in the given order: put one that may hang last.
        """
        module = function_module(self.workdir, functions) if functions else ""
        todo, folders = [], {}
        for name, args in phases.items():
            args = [str(a).replace("{module}", module) for a in args]
            key = self._key(name, args)
            folder = self.workdir / "runs" / f"{name}-{key}"
            folders[name] = folder
            if key not in self._done:
                todo.append((name, ["--out", str(folder), *args], key, folder))
        result = PhasesRun(folders, self.nproc_per_node)
        if todo:
            for _, _, _, folder in todo:  # a phase that ran before and failed: start afresh
                for old in folder.glob("*.json"):
                    old.unlink()
            timeout_s = self.time_limit_s({name: phases[name] for name, _, _, _ in todo})
            plan = write_plan(self.workdir / f"plan-{len(self.launches)}.json",
                              [(name, args) for name, args, _, _ in todo],
                              lobby_timeout_s=timeout_s)
            logger.info("launching %d phases: %s", len(todo), [t[0] for t in todo])
            result.launch = run_torchrun(MODULE, [str(plan)], nproc_per_node=self.nproc_per_node,
                                         timeout_s=timeout_s, workdir=self.workdir)
            self.launches.append(result.launch)
            result.launched = [t[0] for t in todo]
            for _, _, key, folder in todo:  # the same source gives the same result: once is enough
                self._done[key] = folder
        return result


if __name__ == "__main__":
    main()
