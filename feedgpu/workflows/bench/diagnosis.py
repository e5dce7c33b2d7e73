"""The take-home diagnosis (``feedgpu.diagnose``): its what-ifs against its predictions, and its cost.

* For each planted loader with a fix to try, and those whose cause is new (named, nothing to try) (:data:`feedgpu.workflows.bench.planted.PLANTED`),
  and each loader whose workers share one resource (:data:`~feedgpu.workflows.bench.planted.SHARED`):
  whether the planted cause was named, the model's predicted speed-up of the setting
  tried, the measured one, and measured / predicted (budget: 0.75 to 1.25); the lowest
  and the highest measured / predicted seconds per batch over the worker counts it
  measured, each predicted without its own measurement (leave one out; budget: 0.75 to
  1.33); and the diagnosis's wall time against its ``max_seconds``.
* ``feedgpu-diagnose run`` on each training script of ``tests/scripts/`` (the styles people
  write; a checkout only), as it is with 0 workers (the BLAS one with its 2): the cause
  named, the setting tried, the model's predicted speed-up, the diagnosis's what-if, the
  script's own second run and the steady batches it rests on, and the script's speed-up
  over the prediction (budget: 0.75 to 1.25).
* The cost of watching a loop (``feedgpu.diagnose.watch``) on the healthy loader: the
  loop's time per step with and without it, in paired rounds (alternating which goes
  first, so a drift of the machine's load hits both), as a share of the step time
  (budget: under 5%).
"""

from __future__ import annotations

import statistics
import time

from . import Figure, figure

MAX_SECONDS = 30.0
ROUNDS = 7
WATCHED_BATCHES = 40


def _loop_s(loader, step_s: float, how: str) -> float:
    """Seconds per step of a loop over ``loader`` that sleeps ``step_s`` per batch: ``how``
    ``"plain"``, under ``"watch"`` (:func:`feedgpu.diagnose.watch`) or timed as
    ``feedgpu-diagnose run`` times a script's loop (``"script"``)."""
    from feedgpu.diagnosis import watch
    from feedgpu.diagnosis.modes.script_hooks import timed_iterator

    source = {"plain": lambda: loader, "watch": lambda: watch(loader), "script": lambda: timed_iterator(loader)}[how]()
    count = 0
    start = time.perf_counter()
    for _ in source:
        time.sleep(step_s)
        count += 1
        if count == WATCHED_BATCHES:
            break
    return (time.perf_counter() - start) / count


#: Planted causes with nothing to try that the bench leaves out (the healthy loop, and the
#: causes whose naming the tests check): it times the others, and the what-ifs.
UNTRIED = {None, "cpu-saturated", "memory-growth"}


#: Seconds of feedgpu-diagnose run's budget for each style script (both runs).
SCRIPT_SECONDS = 40.0
#: The style scripts' arguments beyond the default 0 workers (those that set their own).
SCRIPT_ARGS = {"blas_items": ["--workers", "2"]}


def bench_scripts() -> list[Figure]:
    """feedgpu-diagnose run on each script of ``tests/scripts/``: its prediction against the
    script's own second run."""
    from pathlib import Path

    from feedgpu.diagnosis.modes.script import ScriptError, diagnose_script

    folder = Path(__file__).resolve().parents[3] / "tests" / "scripts"
    out = []
    for path in sorted(folder.glob("*.py")):
        if path.stem == "common":
            continue
        command = ["python", str(path), "--epochs", "50", *SCRIPT_ARGS.get(path.stem, [])]
        try:
            result = diagnose_script(command, max_seconds=SCRIPT_SECONDS, echo=False)
        except ScriptError as err:
            out.append(figure(f"run {path.stem}: diagnosed", 0.0, "", str(err)[:200]))
            continue
        t = result.try_first or {}
        setting = f"{t.get('setting')}={t.get('value')}" if t else "nothing tried"
        predicted, script = t.get("predicted_speedup"), t.get("script_measured_speedup")
        out += [figure(f"run {path.stem}: predicted speed-up", predicted or float("nan"), "x",
                       f"causes {result.causes}; {setting}"),
                figure(f"run {path.stem}: what-if speed-up", t.get("measured_speedup") or float("nan"), "x"),
                figure(f"run {path.stem}: the script's speed-up", script or float("nan"), "x",
                       f"{t.get('script_timed_batches')} steady batches" if script else
                       str(t.get("script_note") or "not run again")[:160]),
                figure(f"run {path.stem}: script / predicted",
                       script / predicted if script and predicted else float("nan"), "x", "budget 0.75 to 1.25")]
    return out


def bench_diagnosis() -> list[Figure]:
    """Measured / predicted speed-up of each planted what-if; the overhead of watch()."""
    from feedgpu.diagnosis import diagnose
    from feedgpu.workflows.bench.planted import PLANTED, SHARED

    out = []
    cases = {**PLANTED, **{name: case for name, case in SHARED.items() if case not in PLANTED.values()}}
    for name, case in cases.items():
        if case.setting is None and case.cause in UNTRIED:
            continue
        start = time.perf_counter()
        result = diagnose(case.factory(), **case.diagnose_kwargs(), max_seconds=MAX_SECONDS, progress=False)
        seconds = time.perf_counter() - start
        out.append(figure(f"diagnosis {name}: cause named", float(case.cause in result.causes), "",
                          f"causes {result.causes}"))
        ratios = {p["num_workers"]: p["s_per_batch"] / p["predicted_s_per_batch"] for p in result.scaling
                  if p.get("s_per_batch") and p.get("predicted_s_per_batch") and p["num_workers"] > 0}
        if ratios:
            said = ", ".join(f"{w}: {r:.2f}" for w, r in sorted(ratios.items()))
            out += [figure(f"diagnosis {name}: measured / leave-one-out, lowest", min(ratios.values()), "x",
                           f"by num_workers {said}; budget 0.75 to 1.33"),
                    figure(f"diagnosis {name}: measured / leave-one-out, highest", max(ratios.values()), "x")]
        if case.setting is None:  # named, and nothing to try
            out.append(figure(f"diagnosis {name}: wall time / budget", seconds / MAX_SECONDS, "x",
                              f"{seconds:.1f} s of max_seconds={MAX_SECONDS:g}"))
            continue
        tried = result.try_first or {}
        predicted, measured = tried.get("predicted_speedup"), tried.get("measured_speedup")
        setting = f"{tried.get('setting')}={tried.get('value')}" if tried else "nothing tried"
        out += [figure(f"diagnosis {name}: predicted speed-up", predicted or float("nan"), "x", setting),
                figure(f"diagnosis {name}: measured speed-up", measured or float("nan"), "x", setting),
                figure(f"diagnosis {name}: measured / predicted",
                       measured / predicted if measured and predicted else float("nan"), "x", "budget 0.75 to 1.25"),
                figure(f"diagnosis {name}: wall time / budget", seconds / MAX_SECONDS, "x",
                       f"{seconds:.1f} s of max_seconds={MAX_SECONDS:g}")]
    case = PLANTED["healthy"]
    loader = case.factory()
    times: dict[str, list[float]] = {"plain": [], "watch": [], "script": []}
    for r in range(ROUNDS):
        order = list(times)[r % 3:] + list(times)[:r % 3]  # each kind first in turn: a drift hits all
        for how in order:
            times[how].append(_loop_s(loader, case.step_s, how))
    plain, watched = times["plain"], times["watch"]
    overhead = statistics.median(w - p for w, p in zip(watched, plain)) / case.step_s
    script = statistics.median(w - p for w, p in zip(times["script"], plain)) / case.step_s
    out += [figure("watch(): loop time per step, without", statistics.median(plain) * 1e3, "ms",
                   f"healthy loader, {case.step_s * 1e3:g} ms step, median of {ROUNDS} rounds"),
            figure("watch(): loop time per step, with", statistics.median(watched) * 1e3, "ms"),
            figure("watch(): overhead / step time", overhead, "x",
                   "median of paired rounds; budget < 0.05"),
            figure("feedgpu-diagnose run: the hooks' overhead / step time", script, "x",
                   "a script's loop timed as run times it, median of paired rounds; budget < 0.05")]
    return out + bench_scripts()
