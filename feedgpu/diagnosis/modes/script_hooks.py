"""Inside a script that ``feedgpu-diagnose run`` runs: find its training loop and measure it.

``feedgpu-diagnose run -- python train.py --workers 0`` (:mod:`.script`) starts this
module in a new process, which runs the script unchanged (:mod:`runpy`, its own
``sys.argv``), after two hooks on ``torch.utils.data.DataLoader``:

* ``__init__``: every DataLoader is stamped with the place in the script that built it
  (file and line: its *site*; a loader a library builds again from the script's, as
  Lightning does to add its sampler, keeps the site of the script's loader over the same
  dataset), and in the second run every loader built at the training
  loop's site gets the one setting to try (``--change``), whatever its dataset or batch
  size (a loader made again every epoch, with the images growing, gets it every time), so
  the script is never edited. A collate that carries arrays as tensors gives the script
  back what its own collate made (:func:`~feedgpu.diagnosis.handover_fix.restore`).
* ``__iter__``: every iterator the script takes from a DataLoader is watched, and its
  batches counted by site. The *training loop* is the first site whose iterator gets
  past its warm-up (two batches per worker, untimed) outside another site's open pass (a
  validation pass inside the training loop is never it; in the second run, only the first
  run's site is); from then on the iterators of that
  site (each epoch's, for a loader made again every epoch, each with its own warm-up)
  are timed together, up to :data:`TIMED` batches or the loop's share of the budget:
  between two ``next()`` calls the script steps, inside one it waits for data. The
  loop's figures are then: seconds per batch, the wait, the step's wall time, its CPU
  (this thread's clock, and the process's: a step on torch's threads keeps more than one
  busy) and, on CUDA, the device's time between a pair of events recorded around each
  step (recording waits for nothing; they are read after the loop). Time the script
  spends iterating another loader between two training batches (a validation pass) is
  measured apart and left out of the step; so is a step far longer than the others
  (a checkpoint saved, say): :func:`loop_figures`.

The first run then diagnoses that loader (:func:`~feedgpu.diagnosis.modes.live.diagnose`)
with the step its loop measured played again (:class:`~feedgpu.diagnosis.sensing.steps.ReplayedStep`: the
step's CPU, the share of it its other threads ran played as parallel regions on torch's
threads (:func:`parallel_share`), then its wait), in the budget left; the second run only
measures its loop.
Each writes its figures to ``--out`` (JSON) and ends the process at once, the script's
workers stopped; ``feedgpu-diagnose run`` stops anything left (the process group).
"""

from __future__ import annotations

import argparse
import atexit
import functools
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

from ...base.files import write_json_atomically
from ..report import json_ready

__all__ = ["TIMED", "TOO_FEW", "loader_signature", "loop_figures", "parallel_share", "timed_iterator", "main"]

#: Batches timed in a script's training loop at most (after its warm-up).
TIMED = 120
#: Share of the first run's budget its loop may take to be measured (the rest: the diagnosis).
MEASURE_SHARE = 0.35
#: Why a run that timed fewer than 3 batches gave no diagnosis.
TOO_FEW = ("the script ended, or its budget ran out, before a loop over a DataLoader took enough batches to time "
           "(at least 3 after its warm-up)")


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


#: A step this many times the loop's median step (and :data:`OUTLIER_MIN_S` longer) did other
#: work besides (a checkpoint saved, a log written): measured apart, left out of the step.
OUTLIER_FACTOR = 10.0
OUTLIER_MIN_S = 0.1


def loop_figures(waits: list[float], steps: list[float], step_cpus: list[float],
                 device: list[float] | None = None, step_procs: list[float] | None = None,
                 other_s: float = 0.0, interrupted: int = 0, wait_helpers: list[float] | None = None
                 ) -> dict[str, Any]:
    """A loop's figures per batch from its timed ``next()`` waits and the steps between them.

    A step longer than :data:`OUTLIER_FACTOR` times the median (and :data:`OUTLIER_MIN_S`
    more) is left out with its wait, and counted apart (``outliers``, ``outlier_s``: the
    time beyond the median step). ``other_s`` and ``interrupted``: the time spent in other
    loaders' passes between two batches, already taken out of the steps, and how many steps
    it interrupted. ``step_threads``: the process's CPU over this thread's during the steps
    (1: the step runs on this thread alone; 2: torch's threads kept two busy).
    ``wait_helper_s``: the process's CPU beyond this thread's while it waited for a batch
    (torch's threads spinning after the step's last parallel region, or the pin thread).
    """
    n = min(len(waits), len(steps))
    waits, steps, step_cpus = waits[-n:], steps[-n:], step_cpus[-n:]
    procs = (step_procs or [])[-n:]
    median = sorted(steps)[n // 2] if n else 0.0
    kept = [k for k in range(n) if not (steps[k] > OUTLIER_FACTOR * median and steps[k] > median + OUTLIER_MIN_S)]
    outliers = n - len(kept)
    outlier_s = sum(steps[k] - median for k in range(n) if k not in set(kept))
    m = len(kept) or 1
    wait, step = sum(waits[k] for k in kept) / m, sum(steps[k] for k in kept) / m
    cpu = sum(step_cpus[k] for k in kept) / m
    proc = sum(procs[k] for k in kept) / m if len(procs) == n and n else None
    helpers = (wait_helpers or [])[-n:]
    helper = sum(helpers[k] for k in kept) / m if len(helpers) == n and n else None
    return {"timed_batches": len(kept), "s_per_batch": wait + step, "wait_s": wait, "step_s": step,
            "step_cpu_s": cpu, "data_wait_share": wait / (wait + step) if wait + step > 0 else 0.0,
            "device_s": (sum(device[-n:]) / len(device[-n:])) if device else None,
            "step_threads": max(proc / cpu, 1.0) if proc is not None and cpu > 0 else None,
            "wait_helper_s": helper,
            "outliers": outliers, "outlier_s": outlier_s, "other_s": other_s, "interrupted": interrupted}


class _Loop:
    """The batches of every iterator taken from loaders built at one site of the script."""

    def __init__(self, site: str, loader: Any) -> None:
        self.site, self.loader = site, loader
        self.waits: list[float] = []
        self.steps: list[float] = []
        self.step_cpus: list[float] = []
        self.step_procs: list[float] = []
        self.wait_helpers: list[float] = []  # the process's CPU beyond this thread's while it waited
        self.events: list[tuple[Any, Any]] = []
        self.other_s = 0.0
        self.interrupted = 0
        self.iterators = 0
        self.batches = 0

    @property
    def timed(self) -> int:
        return min(len(self.waits), len(self.steps))

    def figures(self, cuda: Any) -> dict[str, Any]:
        device = None
        if self.events and cuda is not None:
            cuda.synchronize()
            device = [start.elapsed_time(end) / 1e3 for start, end in self.events]
        return {**loop_figures(self.waits, self.steps, self.step_cpus, device, self.step_procs, self.other_s,
                               self.interrupted, self.wait_helpers), "site": self.site}

    def summary(self) -> dict[str, Any]:
        """Which loader this is, and how much of it the run saw."""
        return {**loader_signature(self.loader), "site": self.site, "num_workers": self.loader.num_workers,
                "iterators": self.iterators, "batches": self.batches, "timed": self.timed}


class _State:
    """What the hooks share: the run's settings, its budget, the loops seen, and the training loop."""

    def __init__(self, out: Path, budget_s: float, change: dict[str, Any] | None, target: dict[str, Any] | None,
                 try_fix: bool) -> None:
        self.out, self.change, self.target, self.try_fix = out, change, target, try_fix
        self.budget_s = budget_s
        self.spare_s = 0.0  # seconds the diagnosis's what-if may take past the budget (the second run's)
        self.began = math.nan
        self.end = math.inf  # the budget counts from the script's first loop over a DataLoader, not its start-up
        self.done = False
        self.iterators: weakref.WeakSet[_Watched] = weakref.WeakSet()  # a loop left by break lets its workers go
        self.sites: dict[str, _Loop] = {}
        self.training: _Loop | None = None
        self.window_end = math.inf
        self.passes: list[tuple[str, float, float]] = []  # (site, start, end) of other loaders' passes
        self.applied = 0

    def loop_of(self, loader: Any) -> _Loop:
        site = getattr(loader, "_feedgpu_site", None) or f"<unknown {id(loader)}>"
        found = self.sites.get(site)
        if found is None:
            found = self.sites[site] = _Loop(site, loader)
        found.loader = loader  # the latest loader built there (a loader made again every epoch)
        return found

    def may_train(self, watched: _Watched) -> bool:
        """Whether ``watched``'s loop may be the training loop: in the second run, only the
        first run's (its site); in the first, a loop not nested in another's pass (an
        iterator of another site, begun before it and still open: a validation pass inside
        the training loop, which reached its warm-up first)."""
        target = (self.target or {}).get("site")
        if self.change is not None and target:
            return watched.loop.site == target
        return not any(w.open and w.loop is not watched.loop and w.pass_start is not None
                       and watched.pass_start is not None and w.pass_start < watched.pass_start
                       for w in list(self.iterators))

    def other_between(self, start: float, end: float, site: str) -> float:
        """Seconds other sites' iterators were busy between ``start`` and ``end`` (their passes)."""
        spans = list(self.passes) + [(w.loop.site, w.pass_start, w.last_active) for w in list(self.iterators)
                                     if w.pass_start is not None and w.open]
        busy = 0.0
        for other, first, last in spans:
            if other != site:
                busy += max(0.0, min(last, end) - max(first, start))
        return min(busy, end - start)

    def finish(self, loop: _Loop | None) -> None:
        """Write the figures (and, in the first run, the diagnosis) and end the process."""
        if self.done:
            return
        self.done = True
        record: dict[str, Any] = {"applied": self.applied, "loaders": [lp.summary() for lp in self.sites.values()]}
        if loop is not None and loop.timed >= 3:
            record["loop"] = loop.figures(_cuda())
            record["loader"] = {**loader_signature(loop.loader), "site": loop.site}
            for w in list(self.iterators):
                w.stop()
            if self.change is None:
                try:
                    record["diagnosis"] = self.diagnose(loop.loader, record["loop"])
                except Exception as err:  # noqa: BLE001 - the loop's own figures stand: a partial diagnosis
                    why = f"the diagnosis of the script's loader failed: {type(err).__name__}: {err}"
                    record["diagnosis"] = loop_diagnosis(loop.loader, record["loop"], why)
        else:
            record["reason"] = TOO_FEW
            if loop is not None:
                record["partial"] = {"timed": loop.timed, "site": loop.site}
        record["used_s"] = time.perf_counter() - self.began if math.isfinite(self.began) else None
        _write(self.out, record)
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)

    def begin(self) -> None:
        """The budget starts: the script takes its first iterator from a DataLoader. The
        marker beside ``--out`` tells ``feedgpu-diagnose run`` so; a timer ends the run if no
        loop has been timed when the budget is out."""
        if not math.isfinite(self.end):
            self.began = time.perf_counter()
            self.end = self.began + self.budget_s
            self.out.with_name(self.out.name + ".started").touch()
            timer = threading.Timer(self.budget_s + 1.0, self.out_of_time)
            timer.daemon = True
            timer.start()

    def out_of_time(self) -> None:
        """The budget is out and no loop finished the run: end it with what was measured."""
        if not self.done:
            loop = self.training or max(self.sites.values(), key=lambda lp: lp.timed, default=None)
            self.finish(loop)

    def window(self, now: float) -> float:
        """When a loop whose timed batches start ``now`` stops being measured: after its share
        of the budget in the first run (the diagnosis takes the rest), at the end in the second."""
        if self.change is not None:
            return self.end - 0.5
        return min(now + MEASURE_SHARE * self.budget_s, self.end - 0.4 * self.budget_s)

    def diagnose(self, loader: Any, loop: dict[str, Any]) -> dict[str, Any]:
        from ..sensing.steps import ReplayedStep
        from .live import diagnose

        cpu = min(loop["step_cpu_s"], loop["step_s"])
        device = max(loop["step_s"] - cpu, (loop.get("device_s") or 0.0) - cpu, 0.0)
        left = max(self.end - time.perf_counter(), 2.0) if math.isfinite(self.end) else self.budget_s / 2
        step = ReplayedStep(cpu, device, accelerator=_accelerator(), parallel_share=parallel_share(loader, loop))
        # The diagnosis forks its workers from the script's process after its loop ran, a heap the
        # script's own workers were not forked from. Unfrozen, a worker's first full collection
        # writes to the header of every inherited object the collector tracks (lists, instances,
        # dicts that hold containers; never a str, a number or a dict of them): a one-off copy of
        # the pages they lie on (80 MB a
        # worker on the reference-style script, whose own workers stay at 17-20 MB over an epoch)
        # that memory-growth would project over an epoch. Frozen, the workers copy what reading
        # items copies. This process ends after the diagnosis: nothing of the script's is changed.
        gc.freeze()
        result = diagnose(loader, step, max_seconds=left, try_fix=self.try_fix, progress=False, spare_s=self.spare_s)
        result.step = (f"the script's own step ({loop['step_s'] * 1e3:.3g} ms a batch, {cpu * 1e3:.3g} ms of it "
                       "CPU), played again")
        return result.to_dict()


#: CPU seconds a batch the process's other threads spent while the loop waited, above which
#: the step is taken to have run on torch's threads (which spin-wait after a parallel region).
SPIN_MIN_S = 1e-4


def parallel_share(loader: Any, loop: dict[str, Any]) -> float:
    """The share of the step's CPU spent in torch's parallel regions, from the loop's figures:
    its other threads' CPU during the step over what all of torch's threads would add
    (``(step_threads - 1) / (torch threads - 1)``), and a least share where none was seen
    during the step but torch's threads spun while the loop waited (a step with one small
    region). 0 with one torch thread, or where the pin thread (workers that pin) could be
    what ran while the loop waited."""
    import torch

    threads = torch.get_num_threads()
    if threads <= 1:
        return 0.0
    share = min(max(((loop.get("step_threads") or 1.0) - 1.0) / (threads - 1), 0.0), 1.0)
    pinning = bool(getattr(loader, "pin_memory", False)) and loader.num_workers > 0
    if share < MIN_PARALLEL_SHARE and not pinning and (loop.get("wait_helper_s") or 0.0) > SPIN_MIN_S:
        share = MIN_PARALLEL_SHARE
    return share


#: The share played as parallel regions where torch's threads were seen to spin only.
MIN_PARALLEL_SHARE = 0.01


def loop_diagnosis(loader: Any, loop: dict[str, Any], why: str) -> dict[str, Any]:
    """A diagnosis of the script's loop from its own figures alone (its wait, its step), where
    the full one could not be made (``why``): the causes those figures show, as ``watch()``
    names them, and no model, item probe, scaling or what-if, said in a note."""
    from ..evidence import Evidence
    from ..sensing.cloning import loader_settings
    from ...measure.machine import usable_cores
    from ..conclusion import conclude

    ev = Evidence(num_workers=loader.num_workers, persistent_workers=loader.persistent_workers,
                  cores=usable_cores(), data_wait_share=loop["data_wait_share"], s_per_batch=loop["s_per_batch"],
                  wait_s=loop["wait_s"], step_s=loop["step_s"], startup_s=math.nan, one_batch_s=math.nan,
                  batches_per_epoch=None)
    note = (f"{why}: this rests on the script's own loop alone ({loop['timed_batches']} timed batches); the item "
            "probe, the model, the scaling runs and the what-if are missing")
    found = conclude(ev).diagnosis(breakdown={"step_s": loop["step_s"], "s_per_batch": loop["s_per_batch"],
                                              "wait_s": loop["wait_s"]},
                                   settings=loader_settings(loader), notes=[note], source="run",
                                   step=f"the script's own step ({loop['step_s'] * 1e3:.3g} ms a batch)")
    return found.to_dict()


class _Watched:
    """One iterator the script took from a DataLoader, timed into its site's :class:`_Loop`."""

    def __init__(self, inner: Any, loader: Any, state: _State, restore: Any = None) -> None:
        self.inner, self.loader, self.state, self.restore = inner, loader, state, restore
        self.loop = state.loop_of(loader)
        self.loop.iterators += 1
        self.warmup = max(2, 2 * loader.num_workers)
        self.count = 0
        self.cuda = _cuda()
        self.open = True
        self.pass_start: float | None = None
        self.last_active = 0.0
        self._returned: float | None = None
        self._cpu = self._proc = 0.0
        self._event: Any = None

    @property
    def timed(self) -> int:
        return self.loop.timed

    def __iter__(self) -> _Watched:
        return self

    def __len__(self) -> int:
        return len(self.inner)

    def __getattr__(self, name: str) -> Any:  # the real iterator's attributes (Lightning reads some)
        return getattr(self.inner, name)

    def __next__(self) -> Any:
        now, cpu, proc = time.perf_counter(), time.thread_time(), time.process_time()
        state, loop = self.state, self.loop
        if self.pass_start is None:
            self.pass_start = now
        self.last_active = now
        training = state.training is loop
        if training and self._returned is not None and self.count > self.warmup:
            other = state.other_between(self._returned, now, loop.site)  # a validation pass, say
            loop.steps.append(now - self._returned - other)
            loop.step_cpus.append(cpu - self._cpu)
            loop.step_procs.append(proc - self._proc)
            if other > 0:
                loop.other_s += other
                loop.interrupted += 1
            if self._event is not None:
                end = self.cuda.Event(enable_timing=True)
                end.record()
                loop.events.append((self._event, end))
        if training and not state.done and loop.timed >= 3 and (loop.timed >= TIMED or now >= state.window_end):
            state.finish(loop)
        try:
            batch = next(self.inner)
        except StopIteration:
            self._returned, self.open = None, False
            state.passes.append((loop.site, self.pass_start, time.perf_counter()))
            raise
        after = time.perf_counter()
        self.count += 1
        loop.batches += 1
        self.last_active = after
        if state.training is None and self.count > self.warmup and state.may_train(self):
            state.training, state.window_end = loop, state.window(now)  # the first loop past its warm-up
        if state.training is loop and self.count > self.warmup:
            loop.waits.append(after - now)
            loop.wait_helpers.append((time.process_time() - proc) - (time.thread_time() - cpu))
        self._returned, self._cpu, self._proc = after, time.thread_time(), time.process_time()
        if self.cuda is not None and self.count >= self.warmup and state.training in (None, loop):
            self._event = self.cuda.Event(enable_timing=True)
            self._event.record()
        return self.restore(batch) if self.restore is not None else batch

    def figures(self) -> dict[str, Any]:
        return self.loop.figures(self.cuda)

    def stop(self) -> None:
        """Stop the loop's workers (what ``del iterator`` would)."""
        self.open = False
        shutdown = getattr(self.inner, "_shutdown_workers", None)
        if shutdown is not None:
            shutdown()


def timed_iterator(loader: Any) -> _Watched:
    """An iterator over ``loader`` timed as the hooks time a script's loop, which never ends
    the process (what ``make bench`` weighs the hooks' cost with); ``.figures()`` after."""
    state = _State(Path(os.devnull), math.inf, None, None, False)
    state.done = True  # nothing to write, nothing to end
    watched = _Watched(iter(loader), loader, state)
    state.training = watched.loop
    return watched


def _cuda() -> Any:
    import torch

    return torch.cuda if torch.cuda.is_available() else None


def _accelerator() -> bool:
    """Whether this process has an accelerator (CUDA, ROCm, MPS, XPU...: ``torch.accelerator``)."""
    import torch

    found = getattr(torch, "accelerator", None)
    return bool(found.is_available()) if found is not None else torch.cuda.is_available()


def _write(path: Path, record: dict[str, Any]) -> None:
    write_json_atomically(path, json_ready(record), allow_nan=False, default=repr)


def _changed(kwargs: dict[str, Any], change: dict[str, Any]) -> tuple[dict[str, Any], Any]:
    """The loader's arguments with the one setting changed, and the restore for its batches."""
    from ..handover_fix import SharedTensorCollate, restore
    from ..sensing.threads import OneThreadPerPool

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


#: Where a loader is built from: the first frame outside these (torch's, the course's hooks).
_NOT_THE_SCRIPT = (os.sep + os.path.join("torch", "utils", "data") + os.sep, os.sep + "feedgpu" + os.sep + "diagnosis" + os.sep)


def _site() -> tuple[str, bool]:
    """The file and line of the script that is building a DataLoader now, and whether a
    library (an installed package: Lightning, say) builds it on the script's behalf: the
    first frame outside torch's and the hooks' own code, or past the libraries, the
    first of the script's."""
    frame = sys._getframe(2)
    while frame is not None and any(part in frame.f_code.co_filename for part in _NOT_THE_SCRIPT):
        frame = frame.f_back
    library = frame is not None and _in_library(frame.f_code.co_filename)
    mine = frame
    while mine is not None and _in_library(mine.f_code.co_filename):
        mine = mine.f_back
    found = mine or frame
    if found is None:
        return "<unknown>", False
    return f"{found.f_code.co_filename}:{found.f_lineno}", library


def _in_library(filename: str) -> bool:
    """Whether code lies in an installed package or Python's own library, not the script's."""
    return any(part in filename for part in (os.sep + "site-packages" + os.sep, os.sep + "dist-packages" + os.sep)) \
        or filename.startswith(_STDLIB) or filename.startswith("<frozen")


_STDLIB = os.path.dirname(os.__file__) + os.sep


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
        state.iterators.add(watched)
        return watched

    built_at: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # a dataset: the first site built over it

    def first_site(dataset: Any) -> str | None:
        try:
            return built_at.get(dataset)
        except TypeError:  # not hashable, or no weak reference to it: no site remembered
            return None

    @functools.wraps(original_init)  # its signature stays DataLoader's: the diagnosis clones loaders by it
    def stamping_init(self: Any, *args: Any, **kwargs: Any) -> None:
        site, library = _site()
        named = dict(zip(parameters, args)) | kwargs
        dataset = named.get("dataset")
        known = first_site(dataset) if dataset is not None else None
        if library and known is not None:  # rebuilt by a library (Lightning's, with its sampler): the script's site
            site = known
        elif dataset is not None and known is None:
            try:
                built_at[dataset] = site
            except TypeError:
                pass
        restore = None
        if state.change is not None and _matches(named, site, state.target):
            named, restore = _changed(named, state.change)
            state.applied += 1
        original_init(self, **named)
        self._feedgpu_site = site
        if restore is not None:
            self._feedgpu_restore = restore

    DataLoader.__iter__ = watched_iter
    DataLoader.__init__ = stamping_init


def _matches(named: dict[str, Any], site: str, target: dict[str, Any] | None) -> bool:
    """Whether a loader being built is the training loop's: built at its site (whatever its
    dataset or batch size), or, for a record without a site, with its dataset and batch size."""
    if not target:
        return False
    if target.get("site"):
        return site == target["site"]
    dataset = named.get("dataset")
    if dataset is None:
        return False
    batch_size = None if named.get("batch_sampler") is not None else named.get("batch_size", 1)
    probe = type("Probe", (), {"dataset": dataset, "batch_size": batch_size})()
    mine = loader_signature(probe)
    return all(mine[k] == target.get(k) for k in ("dataset", "length", "batch_size"))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m feedgpu.diagnosis.modes.script_hooks")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--budget", type=float, required=True)
    parser.add_argument("--change", help="JSON: {setting, value, target} for the second run")
    parser.add_argument("--no-try", action="store_true")
    parser.add_argument("--spare", type=float, default=0.0, help="seconds the what-if may take past the budget")
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    change = json.loads(args.change) if args.change else None
    state = _State(args.out, args.budget, change, change.get("target") if change else None, not args.no_try)
    state.spare_s = max(args.spare, 0.0)
    install(state)
    atexit.register(lambda: state.finish(state.training or max(state.sites.values(), key=lambda lp: lp.timed,
                                                                 default=None)))
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
