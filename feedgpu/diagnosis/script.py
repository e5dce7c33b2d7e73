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
   second's, reported beside the model's prediction.

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

from .report import Diagnosis

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
    for line in iter(stream.readline, ""):
        if echo:
            sys.stdout.write(PREFIX + line)
            sys.stdout.flush()
    stream.close()


def _run(script: list[str], budget_s: float, out: Path, extra: list[str], echo: bool) -> dict[str, Any]:
    """One run of the script under the hooks; its record (:mod:`.script_hooks`)."""
    cmd = [sys.executable, "-u", "-m", "feedgpu.diagnosis.script_hooks", "--out", str(out),
           "--budget", f"{budget_s:.3f}", *extra, "--", *script]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1,
                            errors="replace", start_new_session=True)  # a process group of its own: stopped whole
    pump = threading.Thread(target=_pump, args=(proc.stdout, echo), daemon=True)
    pump.start()
    started = out.with_name(out.name + ".started")  # the hooks' budget has begun
    deadline, begun = time.monotonic() + START_S, False
    try:
        while proc.poll() is None and time.monotonic() < deadline:
            if not begun and started.exists():
                deadline, begun = time.monotonic() + budget_s + GRACE_S, True
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
        first = _run(script, first_s, Path(tmp) / "first.json", [] if try_fix else ["--no-try"], echo)
        if "diagnosis" not in first:
            raise ScriptError(first.get("reason") or "no training loop was measured")
        result = Diagnosis.from_dict(first["diagnosis"])
        result.source = "run"
        loop = first["loop"]
        result.notes.append(f"the script's own loop, as it is: {loop['s_per_batch'] * 1e3:.3g} ms a batch over "
                            f"{loop['timed_batches']} timed batches, waiting {loop['wait_s'] * 1e3:.3g} ms of them")
        t = result.try_first
        if try_fix and t and t.get("setting") in ("num_workers", "persistent_workers", "worker_init_fn", "collate_fn"):
            change = {"setting": t["setting"], "value": t["value"], "target": first["loader"]}
            left = max(max_seconds * (1 - FIRST_SHARE), SECOND_MIN_S)
            try:
                second = _run(script, left, Path(tmp) / "second.json", ["--change", json.dumps(change)], echo)
            except ScriptError as err:  # the first run's diagnosis stands
                second = {"applied": True, "reason": str(err)}
            _compare(result, loop, second, first["loader"])
    result.max_seconds, result.elapsed_s = max_seconds, time.perf_counter() - start
    result.model = {**result.model, "script": {"command": list(command), "loop": loop}}
    return result


def _compare(result: Diagnosis, loop: dict[str, Any], second: dict[str, Any], target: dict[str, Any]) -> None:
    """The script's measured speed-up with the setting changed, into ``try_first``."""
    t = result.try_first
    if not second.get("applied"):
        t["script_note"] = "the second run built no loader like the training loop's: the setting was not applied"
    elif "loop" not in second:
        t["script_note"] = f"the second run's loop was not measured ({second.get('reason', 'no reason given')})"
    elif second.get("loader") != target:
        t["script_note"] = "the second run timed another loader's loop than the first: nothing to compare"
    else:
        new = second["loop"]["s_per_batch"]
        t["script_measured_speedup"] = loop["s_per_batch"] / new if new > 0 else math.nan
        result.notes.append(f"the script run again with {t['setting']}={t['value']}: "
                            f"{new * 1e3:.3g} ms a batch over {second['loop']['timed_batches']} timed batches, "
                            f"{t['script_measured_speedup']:.2f}x (the model predicted {t['predicted_speedup']:.2f}x)")
        step, new_step = loop.get("step_s") or 0.0, second["loop"].get("step_s") or 0.0
        short = t["script_measured_speedup"] < SHORT_OF * t["predicted_speedup"]
        if short and step > 0 and new_step > STRETCHED * step:
            result.notes.append(
                f"the script's step took {new_step * 1e3:.3g} ms a batch in the second run, {new_step / step:.1f}x its "
                f"{step * 1e3:.3g} ms in the first: beside the workers it lost the cores the model gave it. A step on "
                "torch's threads (one per core by default) takes turns with busy workers; give the main process "
                "fewer threads (torch.set_num_threads, or OMP_NUM_THREADS=1) so the workers keep their cores, "
                "or use a machine with more cores")
