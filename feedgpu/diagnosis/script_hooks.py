"""Inside a script that ``feedgpu-diagnose run`` runs: find its training loop and measure it.

``feedgpu-diagnose run -- python train.py --workers 0`` (:mod:`.script`) starts this
module in a new process, which runs the script unchanged (:mod:`runpy`, its own
``sys.argv``), after two hooks on ``torch.utils.data.DataLoader``:

* ``__iter__``: every iterator the script takes from a DataLoader is watched. The
  *training loop* is the first one to reach its batches to time (``warmup`` untimed, two
  per worker, then up to :data:`TIMED` or its share of the budget): between two
  ``next()`` calls the script steps, inside one it waits for data. The loop's figures are
  then: seconds per batch, the wait, the step's wall time and its CPU (this thread's
  clock) and, on CUDA, the device's time between a pair of events recorded around each
  step (recording waits for nothing; they are read after the loop).
* ``__init__`` (the second run only): the loader built with the training loop's dataset
  and batch size gets the one setting to try (``--change``), so the script is never
  edited. A collate that carries arrays as tensors gives the script back what its own
  collate made (:func:`~feedgpu.diagnosis.collate.restore`).

The first run then diagnoses that loader (:func:`~feedgpu.diagnosis.procedure.diagnose`)
with the step its loop measured played again (:class:`~.accelerator.ReplayedStep`: the
step's CPU, then its wait), in the budget left; the second run only measures its loop.
Each writes its figures to ``--out`` (JSON) and ends the process at once, the script's
workers stopped; ``feedgpu-diagnose run`` stops anything left (the process group).
"""

from __future__ import annotations

import argparse
import atexit
import gc
import json
import math
import os
import runpy
import sys
import threading
import time
import weakref
from pathlib import Path
from typing import Any

from .report import json_ready

__all__ = ["TIMED", "loader_signature", "loop_figures", "timed_iterator", "main"]

#: Batches timed in a script's training loop at most (after its warm-up).
TIMED = 120
#: Share of the first run's budget its loop may take to be measured (the rest: the diagnosis).
MEASURE_SHARE = 0.35


def loader_signature(loader: Any) -> dict[str, Any]:
    """What finds the training loop's loader again in a second run: its dataset's class and
    length, and its batch size."""
    dataset = loader.dataset
    try:
        length = len(dataset)
    except TypeError:
        length = None
    return {"dataset": f"{type(dataset).__module__}.{type(dataset).__qualname__}", "length": length,
            "batch_size": loader.batch_size}


def loop_figures(waits: list[float], steps: list[float], step_cpus: list[float],
                 device: list[float] | None = None) -> dict[str, Any]:
    """A loop's figures per batch from its timed ``next()`` waits and the steps between them."""
    n = min(len(waits), len(steps))
    waits, steps, step_cpus = waits[-n:], steps[-n:], step_cpus[-n:]
    wait, step = sum(waits) / n, sum(steps) / n
    return {"timed_batches": n, "s_per_batch": wait + step, "wait_s": wait, "step_s": step,
            "step_cpu_s": sum(step_cpus) / n, "data_wait_share": wait / (wait + step) if wait + step > 0 else 0.0,
            "device_s": (sum(device[-n:]) / len(device[-n:])) if device else None}


class _State:
    """What the hooks share: the run's settings, its budget, and the loop found."""

    def __init__(self, out: Path, budget_s: float, change: dict[str, Any] | None, target: dict[str, Any] | None,
                 try_fix: bool) -> None:
        self.out, self.change, self.target, self.try_fix = out, change, target, try_fix
        self.budget_s = budget_s
        self.end = math.inf  # the budget counts from the script's first loop over a DataLoader, not its start-up
        self.done = False
        self.loops: weakref.WeakSet[_Watched] = weakref.WeakSet()  # a loop left by break lets its workers go
        self.applied = False

    def finish(self, watched: _Watched | None) -> None:
        """Write the figures (and, in the first run, the diagnosis) and end the process."""
        if self.done:
            return
        self.done = True
        record: dict[str, Any] = {"applied": self.applied}
        if watched is not None and watched.timed >= 3:
            record["loop"] = watched.figures()
            record["loader"] = loader_signature(watched.loader)
            watched.stop()
            if self.change is None:
                try:
                    record["diagnosis"] = self.diagnose(watched.loader, record["loop"])
                except Exception as err:  # noqa: BLE001 - said in one line by feedgpu-diagnose run
                    record["reason"] = f"the diagnosis of the script's loader failed: {type(err).__name__}: {err}"
        else:
            record["reason"] = ("the script ended, or its budget ran out, before a loop over a DataLoader took "
                                "enough batches to time (at least 3 after its warm-up)")
        _write(self.out, record)
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)

    def begin(self) -> None:
        """The budget starts: the script takes its first iterator from a DataLoader. The
        marker beside ``--out`` tells ``feedgpu-diagnose run`` so; a timer ends the run if no
        loop has been timed when the budget is out."""
        if not math.isfinite(self.end):
            self.end = time.perf_counter() + self.budget_s
            self.out.with_name(self.out.name + ".started").touch()
            timer = threading.Timer(self.budget_s + 1.0, self.out_of_time)
            timer.daemon = True
            timer.start()

    def out_of_time(self) -> None:
        """The budget is out and no loop finished the run: end it, saying why."""
        if not self.done:
            self.done = True
            _write(self.out, {"applied": self.applied, "reason": "the budget ran out before a loop over a "
                              "DataLoader took enough batches to time (at least 3 after its warm-up)"})
            os._exit(0)

    def window(self, now: float) -> float:
        """When a loop whose timed batches start ``now`` stops being measured: after its share
        of the budget in the first run (the diagnosis takes the rest), at the end in the second."""
        if self.change is not None:
            return self.end - 0.5
        return min(now + MEASURE_SHARE * self.budget_s, self.end - 0.4 * self.budget_s)

    def diagnose(self, loader: Any, loop: dict[str, Any]) -> dict[str, Any]:
        from .accelerator import ReplayedStep
        from .procedure import diagnose

        cpu = min(loop["step_cpu_s"], loop["step_s"])
        device = max(loop["step_s"] - cpu, (loop.get("device_s") or 0.0) - cpu, 0.0)
        left = max(self.end - time.perf_counter(), 2.0) if math.isfinite(self.end) else self.budget_s / 2
        # a loop with no accelerator waited off the CPU for torch's threads or a core, not a device
        step = ReplayedStep(cpu, device, accelerator=_accelerator())
        # The diagnosis forks its workers from the script's process after its loop ran, a heap the
        # script's own workers were not forked from. Unfrozen, a worker's first full collection
        # writes to the header of every inherited object the collector tracks (lists, instances,
        # dicts that hold containers; never a str, a number or a dict of them): a one-off copy of
        # the pages they lie on (80 MB a
        # worker on the reference-style script, whose own workers stay at 17-20 MB over an epoch)
        # that memory-growth would project over an epoch. Frozen, the workers copy what reading
        # items copies. This process ends after the diagnosis: nothing of the script's is changed.
        gc.freeze()
        result = diagnose(loader, step, max_seconds=left, try_fix=self.try_fix, progress=False)
        result.step = (f"the script's own step ({loop['step_s'] * 1e3:.3g} ms a batch, {cpu * 1e3:.3g} ms of it "
                       "CPU), played again")
        return result.to_dict()


class _Watched:
    """One iterator the script took from a DataLoader, timed."""

    def __init__(self, inner: Any, loader: Any, state: _State, restore: Any = None) -> None:
        self.inner, self.loader, self.state, self.restore = inner, loader, state, restore
        self.warmup = max(2, 2 * loader.num_workers)
        self.count = 0
        self.waits: list[float] = []
        self.steps: list[float] = []
        self.step_cpus: list[float] = []
        self.events: list[tuple[Any, Any]] = []
        self.cuda = _cuda()
        self._returned: float | None = None
        self._cpu = 0.0
        self._event: Any = None
        self._window_end = math.inf

    @property
    def timed(self) -> int:
        return min(len(self.waits), len(self.steps))

    def __iter__(self) -> _Watched:
        return self

    def __len__(self) -> int:
        return len(self.inner)

    def __getattr__(self, name: str) -> Any:  # the real iterator's attributes (Lightning reads some)
        return getattr(self.inner, name)

    def __next__(self) -> Any:
        now, cpu = time.perf_counter(), time.thread_time()
        timing = self.count > self.warmup
        if self._returned is not None and timing:
            self.steps.append(now - self._returned)
            self.step_cpus.append(cpu - self._cpu)
            if self._event is not None:
                end = self.cuda.Event(enable_timing=True)
                end.record()
                self.events.append((self._event, end))
        state = self.state
        if not state.done and self.timed >= 3 and (self.timed >= TIMED or now >= self._window_end):
            state.finish(self)
        try:
            batch = next(self.inner)
        except StopIteration:
            self._returned = None
            raise
        after = time.perf_counter()
        self.count += 1
        if self.count == self.warmup + 1:
            self._window_end = state.window(now)
        if self.count > self.warmup:
            self.waits.append(after - now)
        self._returned, self._cpu = after, time.thread_time()
        if self.cuda is not None and self.count >= self.warmup:
            self._event = self.cuda.Event(enable_timing=True)
            self._event.record()
        return self.restore(batch) if self.restore is not None else batch

    def figures(self) -> dict[str, Any]:
        device = None
        if self.events:
            self.cuda.synchronize()
            device = [start.elapsed_time(end) / 1e3 for start, end in self.events]
        return loop_figures(self.waits, self.steps, self.step_cpus, device)

    def stop(self) -> None:
        """Stop the loop's workers (what ``del iterator`` would)."""
        shutdown = getattr(self.inner, "_shutdown_workers", None)
        if shutdown is not None:
            shutdown()


def timed_iterator(loader: Any) -> _Watched:
    """An iterator over ``loader`` timed as the hooks time a script's loop, which never ends
    the process (what ``make bench`` weighs the hooks' cost with); ``.figures()`` after."""
    state = _State(Path(os.devnull), math.inf, None, None, False)
    state.done = True  # nothing to write, nothing to end
    return _Watched(iter(loader), loader, state)


def _cuda() -> Any:
    import torch

    return torch.cuda if torch.cuda.is_available() else None


def _accelerator() -> bool:
    """Whether this process has an accelerator (CUDA, ROCm, MPS, XPU...: ``torch.accelerator``)."""
    import torch

    found = getattr(torch, "accelerator", None)
    return bool(found.is_available()) if found is not None else torch.cuda.is_available()


def _write(path: Path, record: dict[str, Any]) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(json_ready(record), allow_nan=False, default=repr), encoding="utf-8")
    os.replace(tmp, path)


def _changed(kwargs: dict[str, Any], change: dict[str, Any]) -> tuple[dict[str, Any], Any]:
    """The loader's arguments with the one setting changed, and the restore for its batches."""
    from .collate import SharedTensorCollate, restore
    from .threads import OneThreadPerPool

    setting, value = change["setting"], change.get("value")
    kwargs = dict(kwargs)
    if setting == "num_workers":
        kwargs["num_workers"] = int(value)
        if int(value) == 0:  # a prefetch_factor or persistent workers need workers
            kwargs.pop("prefetch_factor", None)
            kwargs.pop("persistent_workers", None)
    elif setting == "persistent_workers":
        kwargs["persistent_workers"] = True
    elif setting == "worker_init_fn":
        kwargs["worker_init_fn"] = OneThreadPerPool(kwargs.get("worker_init_fn"))
    elif setting == "collate_fn":
        from torch.utils.data import default_collate

        kwargs["collate_fn"] = SharedTensorCollate(kwargs.get("collate_fn") or default_collate)
        return kwargs, restore
    return kwargs, None


def install(state: _State) -> None:
    """Put the hooks on ``DataLoader`` (see the module's docstring)."""
    import inspect

    from torch.utils.data import DataLoader

    original_iter, original_init = DataLoader.__iter__, DataLoader.__init__
    parameters = list(inspect.signature(original_init).parameters)[1:]

    def watched_iter(self: Any) -> Any:
        state.begin()
        inner = original_iter(self)
        if state.done:
            return inner
        watched = _Watched(inner, self, state, getattr(self, "_feedgpu_restore", None))
        state.loops.add(watched)
        return watched

    def changing_init(self: Any, *args: Any, **kwargs: Any) -> None:
        named = dict(zip(parameters, args)) | kwargs
        restore = None
        if state.change is not None and not state.applied and _matches(named, state.target):
            named, restore = _changed(named, state.change)
            state.applied = True
        original_init(self, **named)
        if restore is not None:
            self._feedgpu_restore = restore

    DataLoader.__iter__ = watched_iter
    if state.change is not None:
        DataLoader.__init__ = changing_init


def _matches(named: dict[str, Any], target: dict[str, Any] | None) -> bool:
    if not target:
        return False
    dataset = named.get("dataset")
    if dataset is None:
        return False
    batch_size = None if named.get("batch_sampler") is not None else named.get("batch_size", 1)
    probe = type("Probe", (), {"dataset": dataset, "batch_size": batch_size})()
    mine = loader_signature(probe)
    return all(mine[k] == target.get(k) for k in ("dataset", "length", "batch_size"))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m feedgpu.diagnosis.script_hooks")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--budget", type=float, required=True)
    parser.add_argument("--change", help="JSON: {setting, value, target} for the second run")
    parser.add_argument("--no-try", action="store_true")
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    change = json.loads(args.change) if args.change else None
    state = _State(args.out, args.budget, change, change.get("target") if change else None, not args.no_try)
    install(state)
    atexit.register(lambda: state.finish(max(list(state.loops), key=lambda w: w.timed, default=None)))
    sys.argv = command
    if command[0] == "-m":
        sys.argv = command[1:]
        runpy.run_module(command[1], run_name="__main__", alter_sys=True)
    else:
        sys.path.insert(0, str(Path(command[0]).resolve().parent))
        runpy.run_path(command[0], run_name="__main__")
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
