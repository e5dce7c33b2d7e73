"""``feedgpu-diagnose run -- COMMAND``: the diagnosis of an unchanged training script.

::

    feedgpu-diagnose run --max-seconds 60 -- python train.py --data faces/ --workers 0
    feedgpu-diagnose run --json out.json -- python -m mypackage.train --epochs 1

The script runs twice, each time in a process of its own with the hooks of
:mod:`.script_hooks` (the Python running ``feedgpu-diagnose`` runs it: the ``python`` of
the command only says that a script follows; ``-m module`` works as with Python):

1. **as it is**, for about :data:`FIRST_SHARE` of the budget: the hooks find the training
   loop (the first loop over a DataLoader to take its batches to time), measure it (the
   wait for data, the step's wall and CPU time, the GPU's time from CUDA events), and
   diagnose that loader with the step played again, as :func:`feedgpu.diagnose` would;
2. **with the setting to try first changed** (the loader built with the same dataset and
   batch size gets it, the script untouched), for the rest: its loop measured the same
   way. The script's measured speed-up is the first loop's seconds per batch over the
   second's, reported beside the model's prediction, from a steady loop only
   (:func:`steady_batches`).

Where the first run's share is too short for the diagnosis's what-if, the what-if borrows
up to :data:`SPARE_SHARE` of the second run's part; the second run gets what is left.

A run has :data:`START_S` to reach its first loop over a DataLoader (Python, torch and the
script's own set-up), then its share of the budget. When a run's time is up, every process it started (the script, its DataLoader workers,
anything else) is stopped: each run is a process group of its own. The script's output
stays visible, each line prefixed with ``[script]``.
"""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..report import Diagnosis

__all__ = ["FIRST_SHARE", "SECOND_MIN_S", "PREFIX", "ScriptError", "script_command", "diagnose_script"]

#: Share of the budget the first run (measure, then diagnose) may take.
FIRST_SHARE = 0.7
#: What the script's own output lines start with.
PREFIX = "[script] "
#: Seconds a run may take to reach its first loop over a DataLoader (Python, torch, the
#: script's own set-up), and then to end after its budget.
START_S = 180.0
GRACE_S = 20.0
#: The second run's speed-up below this share of the prediction, with its step stretched by
#: :data:`STRETCHED` or more: a note says why (the step lost its cores to the workers).
SHORT_OF = 0.75
STRETCHED = 1.25
#: Share of the second run's part of the budget the first run's what-if may borrow, where
#: its own share of the first run's is too short for it to be measured.
SPARE_SHARE = 0.5
#: Seconds the second run's loop gets at least, however small the budget: time for its
#: workers to start and a few dozen batches of a typical loop.
SECOND_MIN_S = 3.0


class ScriptError(RuntimeError):
    """The script could not be diagnosed; the message says why in one line."""


def script_command(command: Sequence[str]) -> list[str]:
    """The script and its arguments from ``COMMAND``: ``python train.py ARGS`` and
    ``train.py ARGS`` give ``["train.py", ARGS...]``; ``python -m pkg.train ARGS`` gives
    ``["-m", "pkg.train", ARGS...]``.

    Raises:
        ScriptError: no script, or not a Python script or module.
    """
    parts = list(command)
    if parts and Path(parts[0]).name.startswith("python"):
        parts = parts[1:]
    while parts and parts[0].startswith("-") and parts[0] != "-m":
        parts = parts[1:]  # Python's own options (-u, -O, ...): the diagnosis runs its own Python
    if not parts:
        raise ScriptError("give the command that runs your training script after --, e.g. "
                          "feedgpu-diagnose run -- python train.py --workers 4")
    if parts[0] == "-m":
        if len(parts) < 2:
            raise ScriptError("-m needs a module: feedgpu-diagnose run -- python -m mypackage.train")
        return parts
    if not parts[0].endswith(".py") or not Path(parts[0]).is_file():
        raise ScriptError(f"{parts[0]} is not a Python script here: give python SCRIPT.py ARGS or python -m MODULE ARGS")
    return parts


def _pump(stream: Any, echo: bool) -> None:
    """The script's output, each line prefixed; a line the script left open (a progress bar's,
    which ends in a carriage return, when the run is stopped) is ended, so that the report
    starts on a line of its own."""
    for line in iter(stream.readline, ""):
        if echo:
            sys.stdout.write(PREFIX + line + ("" if line.endswith("\n") else "\n"))
            sys.stdout.flush()
    stream.close()


def _run(script: list[str], budget_s: float, out: Path, extra: list[str], echo: bool,
         spare_s: float = 0.0) -> dict[str, Any]:
    """One run of the script under the hooks; its record (:mod:`.script_hooks`). ``spare_s``:
    seconds its diagnosis's what-if may take past the budget (lent from the second run)."""
    cmd = [sys.executable, "-u", "-m", "feedgpu.diagnosis.modes.script_hooks", "--out", str(out),
           "--budget", f"{budget_s:.3f}", "--spare", f"{spare_s:.3f}", *extra, "--", *script]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1,
                            errors="replace", start_new_session=True)  # a process group of its own: stopped whole
    pump = threading.Thread(target=_pump, args=(proc.stdout, echo), daemon=True)
    pump.start()
    started = out.with_name(out.name + ".started")  # the hooks' budget has begun
    deadline, begun = time.monotonic() + START_S, False
    try:
        while proc.poll() is None and time.monotonic() < deadline:
            if not begun and started.exists():
                deadline, begun = time.monotonic() + budget_s + spare_s + GRACE_S, True
            time.sleep(0.1)
    finally:
        _stop_group(proc)
        pump.join(timeout=5)
    if not out.is_file():
        raise ScriptError(f"the script stopped (exit status {proc.returncode}) before its training loop was measured: "
                          "its own output above says why")
    return json.loads(out.read_text(encoding="utf-8"))


def _stop_group(proc: subprocess.Popen) -> None:
    """Stop the run's whole process group: the script, its workers and anything they started."""
    for sig, wait in ((signal.SIGTERM, 3.0), (signal.SIGKILL, 3.0)):
        try:
            os.killpg(proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            break
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            try:
                os.killpg(proc.pid, 0)
            except (ProcessLookupError, PermissionError):
                proc.poll()
                return
            time.sleep(0.05)
    proc.poll()


def diagnose_script(command: Sequence[str], max_seconds: float = 60, try_fix: bool = True,
                    echo: bool = True) -> Diagnosis:
    """Diagnose the training loop of an unchanged script (see the module's docstring).

    Args:
        command: the command that runs the script (``["python", "train.py", "--workers", "0"]``).
        max_seconds: the budget of both runs together (Python's and the script's start-up
            come on top, up to :data:`GRACE_S` a run).
        try_fix: run the script again with the setting to try first.
        echo: show the script's own output (prefixed), else hide it.

    Raises:
        ScriptError: no script, or no training loop measured (the message says why).
    """
    if os.name != "posix":
        raise ScriptError("feedgpu-diagnose run needs a POSIX system (Linux, macOS, WSL): it stops the script's "
                          "process group")
    script = script_command(command)
    first_s = max_seconds * (FIRST_SHARE if try_fix else 1.0)
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="feedgpu-run-") as tmp:
        # the diagnosis's what-if may borrow half the second run's share where its own is too short
        spare_s = SPARE_SHARE * (max_seconds - first_s)
        first = _run(script, first_s, Path(tmp) / "first.json", [] if try_fix else ["--no-try"], echo, spare_s)
        if "diagnosis" not in first:
            raise ScriptError(_not_measured(first, max_seconds))
        result = Diagnosis.from_dict(first["diagnosis"])
        result.source = "run"
        loop = first["loop"]
        result.notes += _loop_notes("as it is", loop, first.get("loaders") or [])
        warm = _warmed_note(loop, result)
        if warm:
            result.notes.append(warm)
        t = result.try_first
        if warm and t:
            _cold_prediction(t, loop, result)
        if try_fix and t and t.get("setting") in ("num_workers", "persistent_workers", "worker_init_fn", "collate_fn"):
            change = {"setting": t["setting"], "value": t["value"], "target": first["loader"]}
            used = first.get("used_s") or first_s
            left = max(max_seconds - used, SECOND_MIN_S)  # what the first run left, less what its what-if borrowed
            try:
                second = _run(script, left, Path(tmp) / "second.json", ["--change", json.dumps(change)], echo)
            except ScriptError as err:  # the first run's diagnosis stands
                second = {"applied": True, "reason": str(err)}
            _compare(result, loop, second, first["loader"], left)
    result.max_seconds, result.elapsed_s = max_seconds, time.perf_counter() - start
    result.model = {**result.model, "script": {"command": list(command), "loop": loop}}
    return result


#: A loop timed over fewer steady batches than this is said to rest on too few.
FEW_BATCHES = 10


def _not_measured(record: dict[str, Any], max_seconds: float) -> str:
    """Why the first run gave no diagnosis, with what it did measure and the budget that would do."""
    reason = record.get("reason") or "no training loop was measured"
    partial = record.get("partial")
    seen = [f"{lp['site']}: {lp['batches']} batches, {lp['timed']} timed" for lp in record.get("loaders") or []]
    if seen:
        reason += "; measured so far: " + "; ".join(seen)
    if partial is not None or seen:
        reason += f"; run with --max-seconds {max(2 * max_seconds, max_seconds + 30):g}"
    return reason


def _loop_notes(which: str, loop: dict[str, Any], loaders: list[dict[str, Any]]) -> list[str]:
    """What a run measured of the script, in words: its loop, the loaders it saw, what was
    left out of the step, and whether the loop rests on too few batches."""
    waiting = f", waiting {loop['wait_s'] * 1e3:.3g} ms of them" if loop.get("wait_s") is not None else ""
    notes = [f"the script's own loop, {which}: {loop['s_per_batch'] * 1e3:.3g} ms a batch over "
             f"{loop['timed_batches']} timed batches{waiting}"
             + (f" ({loop['site']})" if loop.get("site") else "")]
    if loaders:
        notes.append("the loaders the script built, by where: " + "; ".join(
            f"{lp['site']} ({lp.get('dataset', '?').rsplit('.', 1)[-1]}, {lp.get('num_workers')} workers): "
            f"{lp['iterators']} pass{'' if lp['iterators'] == 1 else 'es'}, {lp['batches']} batches, {lp['timed']} timed"
            for lp in loaders))
    steps = loop["timed_batches"] + (loop.get("outliers") or 0)
    if loop.get("other_s"):
        run_s = loop["s_per_batch"] * steps + loop["other_s"]
        notes.append(f"other loaders iterated inside the training loop (a validation pass, say): "
                     f"{loop['other_s']:.3g} s over {loop['interrupted']} of its {steps} timed steps, about "
                     f"{loop['other_s'] / run_s:.0%} of that part of the run; left out of the step")
    if loop.get("outliers"):
        notes.append(f"{loop['outliers']} steps took far longer than the others ({loop['outlier_s']:.3g} s more in "
                     "all: a checkpoint, a log, other work between batches); left out of the step")
    if loop["timed_batches"] < FEW_BATCHES:
        notes.append(f"the loop {which} rests on {loop['timed_batches']} steady batches, fewer than {FEW_BATCHES}: "
                     "its figures are uncertain (a larger --max-seconds, or more batches an epoch, times more)")
    return notes


#: The diagnosis's baseline and the script's loop, the same loader and step, further apart than
#: this factor: the items' cost changed between them (a warm cache), said in a note.
WARMED = 1.5


def _warmed_note(loop: dict[str, Any], result: Diagnosis) -> str | None:
    """A note where the diagnosis's baseline (the loader as the script built it, the step played
    again) ran far faster than the script's own loop: the items got cheaper once the script had
    read them (a cache the dataset keeps, the page cache), so the diagnosis measured warm items,
    which the script's second run, starting afresh, may not meet."""
    base = (result.breakdown or {}).get("s_per_batch")
    mine = loop.get("s_per_batch")
    if not base or not mine or not (math.isfinite(base) and math.isfinite(mine)) or mine < WARMED * base:
        return None
    return (f"the diagnosis's baseline ran at {base * 1e3:.3g} ms a batch, the script's own loop at {mine * 1e3:.3g} ms "
            f"with the same settings and step ({mine / base:.1f}x slower): its items cost less once the script had "
            "read them (a cache the dataset keeps, or files now in the page cache). The diagnosis measured warm items; "
            "the script run again starts cold, and its speed-up can fall short of the prediction")


def _cold_prediction(t: dict[str, Any], loop: dict[str, Any], result: Diagnosis) -> None:
    """Where the diagnosis measured warm items (:func:`_warmed_note`) and the script's loop had
    0 workers, that loop's wait per batch is what building a batch cold costs: the model is
    asked again with the workers' load set to it, for the script's second run, which starts
    cold (``script_predicted_speedup``). Nothing where the loop had workers, the try is not
    a worker count, or the model was not trusted (the count tried is a measured one); the
    corrected model's load scale is the one replaced, its other corrections kept."""
    from dataclasses import replace

    from ..fitting import apply_correction
    from ..whatif import Costs

    costs = (result.model or {}).get("costs")
    check = (result.model or {}).get("check") or {}
    workers = (result.settings or {}).get("num_workers")
    if (not costs or workers != 0 or t.get("setting") != "num_workers" or not loop.get("wait_s")
            or check.get("trusted") is False):
        return
    model = apply_correction(Costs.from_dict(costs), check.get("correction"))
    if model.load_s <= 0:
        return
    cold = replace(model, load_scale=loop["wait_s"] / model.load_s)
    new = cold.s_per_batch(int(t["value"]))
    if new > 0:
        t["script_predicted_speedup"] = loop["s_per_batch"] / new
        result.notes.append(f"for the script run again, which starts cold, the model with the workers' load at the "
                            f"script's own wait ({loop['wait_s'] * 1e3:.3g} ms a batch with 0 workers) predicts "
                            f"{t['script_predicted_speedup']:.2f}x with {t['setting']}={t['value']}")


def _same_loop(found: dict[str, Any], target: dict[str, Any]) -> bool:
    """Whether two runs timed the same loop: loaders built at the same site of the script (a
    loader made again every epoch changes its dataset and batch size there), or, for records
    without a site, with the same dataset and batch size."""
    if found.get("site") and target.get("site"):
        return found["site"] == target["site"]
    keys = ("dataset", "length", "batch_size")
    return all(found.get(k) == target.get(k) for k in keys)


def steady_batches(workers: int) -> int:
    """The fewest timed batches the second run's loop needs for a speed-up: ``max(10, 2 x workers)``."""
    return max(FEW_BATCHES, 2 * workers)


def _compare(result: Diagnosis, loop: dict[str, Any], second: dict[str, Any], target: dict[str, Any],
             budget_s: float = math.nan) -> None:
    """The script's measured speed-up with the setting changed, into ``try_first``: only from a
    steady second run (two batches per worker left untimed after the first, then at least
    :func:`steady_batches` timed), else "not measured" with the budget that would do."""
    t = result.try_first
    workers = t["value"] if t.get("setting") == "num_workers" else (result.settings or {}).get("num_workers") or 0
    needed = steady_batches(int(workers))
    t["script_warmup_batches"] = max(2, 2 * int(workers))
    if not second.get("applied"):
        t["script_note"] = "the second run built no loader like the training loop's: the setting was not applied"
    elif "loop" not in second:
        t["script_note"] = f"the second run's loop was not measured ({second.get('reason', 'no reason given')})"
    elif not _same_loop(second.get("loader") or {}, target):
        t["script_note"] = "the second run timed another loader's loop than the first: nothing to compare"
    elif second["loop"]["timed_batches"] < needed:
        timed = t["script_timed_batches"] = second["loop"]["timed_batches"]
        more_s = (needed - timed + t["script_warmup_batches"]) * second["loop"]["s_per_batch"]
        budget = (result.max_seconds or 60) if not math.isfinite(budget_s) else budget_s / (1 - FIRST_SHARE)
        t["script_note"] = (f"not measured: the second run timed {timed} steady batches of the {needed} a speed-up "
                            f"needs (two a worker untimed first); it needs about {more_s:.2g} s more; run with "
                            f"--max-seconds {math.ceil(budget + more_s / (1 - FIRST_SHARE) + 5):g}")
        result.notes += _loop_notes("run again", second["loop"], second.get("loaders") or [])
    else:
        t["script_timed_batches"] = second["loop"]["timed_batches"]
        result.notes += [n for n in _loop_notes("run again", second["loop"], second.get("loaders") or [])[1:]
                         if n.startswith("the loaders")]
        new = second["loop"]["s_per_batch"]
        t["script_measured_speedup"] = loop["s_per_batch"] / new if new > 0 else math.nan
        result.notes.append(f"the script run again with {t['setting']}={t['value']}: "
                            f"{new * 1e3:.3g} ms a batch over {second['loop']['timed_batches']} timed batches, "
                            f"{t['script_measured_speedup']:.2f}x (the model predicted "
                            f"{t.get('script_predicted_speedup') or t['predicted_speedup']:.2f}x"
                            + (" for cold items" if t.get("script_predicted_speedup") else "") + ")")
        step, new_step = loop.get("step_s") or 0.0, second["loop"].get("step_s") or 0.0
        short = t["script_measured_speedup"] < SHORT_OF * (t.get("script_predicted_speedup") or t["predicted_speedup"])
        if short and step > 0 and new_step > STRETCHED * step:
            result.notes.append(
                f"the script's step took {new_step * 1e3:.3g} ms a batch in the second run, {new_step / step:.1f}x its "
                f"{step * 1e3:.3g} ms in the first: beside the workers it lost the cores the model gave it. A step on "
                "torch's threads (one per core by default) takes turns with busy workers; give the main process "
                "fewer threads (torch.set_num_threads, or OMP_NUM_THREADS=1) so the workers keep their cores, "
                "or use a machine with more cores")
