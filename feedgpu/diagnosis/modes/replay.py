"""A diagnosis replayed from its JSON: the verdict, causes and predictions again, without the loader.

::

    from feedgpu.diagnosis import replay

    again = replay("diagnosis.json")                       # the same costs, the model of today
    faster = replay("diagnosis.json", step_s=0.008)        # what if my step took 8 ms?
    bigger = replay("diagnosis.json", cores=16)            # ... or my machine had 16 cores?

From a shell: ``feedgpu-diagnose --replay diagnosis.json [--step-ms X] [--cores N] [--json OUT]``.

A diagnosis JSON holds every input of its model (``"model"``, ``"evidence"``; see
:mod:`~feedgpu.diagnosis.report`). The replay feeds them to the model again and names the causes from the
evidence again. Without ``step_s`` or ``cores`` the evidence is the one measured; with
either, the loop's figures (its seconds per batch, its wait, the CPU it keeps busy) are
the model's for the new step or machine, and the notes say so.

A JSON written before the model's inputs were kept replays with what it has: the costs
from its ``"breakdown"`` (the load, the hand-over, the step and its CPU share from the
baseline run), the evidence from its baseline run. What it lacks is named in the notes:
the cores (estimated from its runs' CPU readings unless ``cores`` is given), and pinning, which
such a diagnosis timed as the process's first ``pin_memory()`` (CUDA's start-up and a
fresh allocation, about 120 ms on an H200 where a warm pin of the same batch takes
about 1.5 ms on one thread): it is not charged.
"""

from __future__ import annotations

import json
import math
import os
import statistics
from dataclasses import replace
from pathlib import Path
from typing import Any

from ...base.checks import check_number, check_seconds
from ..evidence import Evidence, MemoryGrowth
from ..conclusion import Model, conclude
from ..fitting import is_check_note
from ..report import Diagnosis
from ..whatif import Costs

__all__ = ["replay", "read_diagnosis", "estimated_cores"]


def read_diagnosis(source: str | os.PathLike[str] | dict[str, Any]) -> dict[str, Any]:
    """A diagnosis's figures: ``source`` itself if a dict, else the JSON file it names.

    Raises:
        ValueError: the file is not JSON, or not a diagnosis (no ``"verdict"`` and ``"breakdown"``).
        FileNotFoundError: no such file.
    """
    if isinstance(source, dict):
        data = source
    else:
        path = Path(source)
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except json.JSONDecodeError as err:
            raise ValueError(f"{path} is not JSON ({err.msg}, line {err.lineno})") from None
    if not isinstance(data, dict) or "verdict" not in data or "breakdown" not in data:
        raise ValueError("not a diagnosis: a feedgpu-diagnose --json file has 'verdict' and 'breakdown'")
    return data


def _baseline(data: dict[str, Any]) -> dict[str, Any]:
    runs = data.get("runs") or []
    return next((r for r in runs if r.get("label") == "baseline"), runs[0] if runs else {})


def _num(value: Any, default: float = math.nan) -> float:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else default


def estimated_cores(data: dict[str, Any]) -> int | None:
    """The cores of the machine a diagnosis ran on, from its runs' CPU readings: a run's
    CPU per second over the share of the machine that was busy (the median over its
    runs, so one broken reading does not decide); None without readings."""
    estimates = []
    for run in data.get("runs") or []:
        cpu = run.get("cpu") or {}
        used = _num(cpu.get("main_per_s")) + _num(cpu.get("workers_per_s"))
        idle = _num(cpu.get("idle_share"))
        if math.isfinite(used) and math.isfinite(idle) and 0 <= idle < 1 and used > 0:
            estimates.append(used / (1 - idle))
    return max(1, round(statistics.median(estimates))) if estimates else None


def _recorded_costs(data: dict[str, Any], cores: float, notes: list[str]) -> Costs:
    """The costs of a diagnosis written before ``"model"`` was kept, from its breakdown."""
    b = data["breakdown"]
    cpu = _baseline(data).get("cpu") or {}
    if b.get("pin_s"):
        notes.append(f"its pinning figure ({b['pin_s'] * 1e3:.3g} ms) is the process's first pin_memory() "
                     "(CUDA's start-up and a fresh allocation), not what a loop pays: pinning is not charged")
    return Costs(load_s=_num(b.get("fetch_s"), 0.0) + _num(b.get("collate_s"), 0.0), step_s=_num(b.get("step_s"), 0.0),
                 send_s=_num(b.get("send_s"), 0.0), receive_s=_num(b.get("receive_s"), 0.0),
                 cpu_share=_num(b.get("item_cpu_share"), 1.0), cores=cores,
                 step_cpu_share=_num(cpu.get("step_cpu_share"), 0.0))


def _recorded_evidence(data: dict[str, Any], costs: Costs, cores: float) -> Evidence:
    """The evidence of a diagnosis written before ``"evidence"`` was kept, from its baseline run."""
    b, s = data["breakdown"], data.get("settings") or {}
    run = _baseline(data)
    cpu = run.get("cpu") or {}
    m = data.get("memory") or {}
    memory = (MemoryGrowth(list(m["per_worker_mb"]), _num(m.get("items_per_worker"), 0.0))
              if m.get("per_worker_mb") else None)
    return Evidence(
        num_workers=int(s.get("num_workers", run.get("num_workers", 0))),
        persistent_workers=bool(s.get("persistent_workers", False)), cores=int(round(cores)),
        data_wait_share=_num(data.get("data_wait_share")), s_per_batch=_num(b.get("s_per_batch")),
        wait_s=_num(b.get("wait_s")), step_s=_num(b.get("step_s")), startup_s=_num(run.get("startup_s")),
        one_batch_s=costs.load_s, batches_per_epoch=s.get("batches_per_epoch"),
        main_next_cpu_s=_num(cpu.get("main_next_s")), main_cpu_per_s=_num(cpu.get("main_per_s")),
        workers_cpu_per_s=_num(cpu.get("workers_per_s")), idle_share=_num(cpu.get("idle_share")), memory=memory)


def _replay_watch(data: dict[str, Any], notes: list[str]) -> Diagnosis:
    """A watched loop replayed: its causes named again from its evidence. A watch times no
    item and runs no other setting, so the model has nothing to predict from."""
    conclusion = conclude(Evidence.from_dict(data["evidence"]))
    notes = notes + ["a watched loop: no item probe and no what-if, so the replay names the causes again and "
                     "predicts nothing (feedgpu.diagnose measures what the model needs)"]
    return conclusion.diagnosis(
        busy_share=data.get("busy_share", math.nan), breakdown=data["breakdown"], memory=data.get("memory") or {},
        settings=data.get("settings") or {}, step=data.get("step", ""), runs=data.get("runs") or [],
        notes=notes + list(data.get("notes") or []), source="replay")


def _points(data: dict[str, Any]) -> tuple[dict[int, float], list[dict[str, Any]]]:
    """The measured points of a diagnosis: seconds per batch by worker count (from its
    ``"scaling"``), and each point's figures for the causes (from its runs, for a JSON
    written before the evidence kept them)."""
    measured = {int(p["num_workers"]): float(p["s_per_batch"]) for p in data.get("scaling") or []
                if isinstance(p.get("s_per_batch"), (int, float)) and p["s_per_batch"] > 0}
    rows = []
    for run in data.get("runs") or []:
        label, cpu = str(run.get("label", "")), run.get("cpu") or {}
        if run.get("s_per_batch") and (label == "baseline" or label.startswith("num_workers=")):
            rows.append({"num_workers": run.get("num_workers"), "s_per_batch": run["s_per_batch"],
                         "wait_share": run.get("wait_share"), "workers_cpu_per_s": cpu.get("workers_per_s"),
                         "idle_share": cpu.get("idle_share"), "main_next_s": cpu.get("main_next_s")})
    return measured, rows


def replay(source: str | os.PathLike[str] | dict[str, Any], *, step_s: float | None = None,
           cores: float | None = None) -> Diagnosis:
    """Recompute a diagnosis's verdict, causes and predictions from its JSON (no loader needed).

    The conclusion is :func:`~feedgpu.diagnosis.conclusion.conclude`'s, as in every mode:
    the model is checked against the points the diagnosis measured (and corrected where it
    misses them) before it predicts anything.

    Args:
        source: the path of a ``feedgpu-diagnose --json`` file, or its figures as a dict.
        step_s: what if the step took this many seconds (None: the one measured).
        cores: what if the machine had this many cores (None: the diagnosis's; for a file
            that did not keep them, this machine's usable cores, said in the notes).

    Returns:
        A :class:`~feedgpu.diagnosis.report.Diagnosis` with ``source="replay"``: the
        scaling points measured then, the model's predictions beside them now,
        ``model_s_per_batch`` for every worker count it considers, no measured speed-up.

    Raises:
        ValueError: not a diagnosis, or ``step_s`` / ``cores`` out of range.
        TypeError: ``step_s`` or ``cores`` not a number.
    """
    data = read_diagnosis(source)
    step_s = None if step_s is None else check_seconds("step_s", step_s)
    if cores is not None and check_number("cores", cores) < 1:
        raise ValueError(f"cores must be at least 1, got {cores!r}")
    notes = ["replayed from a diagnosis's figures: the model's predictions are recomputed, nothing is measured"]
    model = data.get("model") or {}
    if data.get("source") == "watch" and data.get("evidence"):
        return _replay_watch(data, notes)
    measured, rows = _points(data)
    if model.get("costs") and data.get("evidence"):
        costs = Costs.from_dict(model["costs"])
        ev = Evidence.from_dict(data["evidence"])
        fixed = Costs.from_dict(model["fixed_costs"]) if model.get("fixed_costs") else None
        threads = Costs.from_dict(model["thread_costs"]) if model.get("thread_costs") else None
        if "main_floor_s" not in model["costs"]:
            notes.append("written before the main process's floor was measured (a run at a high batch rate): the "
                         "main process is the sum of its probes (step, receiving, pinning), and the measured points "
                         "correct it where they disagree")
    else:
        from ...measure.machine import usable_cores

        kept = cores
        if kept is None:
            kept = estimated_cores(data)
            if kept is not None:
                notes.append(f"this diagnosis did not keep its machine's cores: {kept}, estimated from its runs' CPU "
                             "readings (the loop's CPU per second over the machine's busy share)")
            else:
                kept = usable_cores()
                notes.append(f"this diagnosis did not keep its machine's cores: {kept} (this machine's) are assumed")
        costs = _recorded_costs(data, float(kept), notes)
        ev = _recorded_evidence(data, costs, float(kept))
        fixed = threads = None
        notes.append("written before the model's inputs were kept: its costs come from the breakdown and the "
                     "baseline run (no floor of the main process measured at a high batch rate, no measured "
                     "sharing of the cores); a collate fix, if it had one, is not replayed")
    if not ev.points:
        ev = replace(ev, points=rows)
    inputs = {"costs": costs.to_dict(), "fixed_costs": fixed.to_dict() if fixed else None,
              "thread_costs": threads.to_dict() if threads else None}
    tried = data.get("try_first") or {}
    held_out = {}
    if tried.get("setting") == "num_workers" and tried.get("measured_speedup"):
        row = next((p for p in data.get("scaling") or [] if p.get("num_workers") == tried.get("value")), {})
        # the what-if's row: measured after it was chosen, held out of the choice (a row without the
        # flag is an older diagnosis's, whose tried count was always the what-if's); a count the scaling
        # runs measured before the choice is one of the points it was made from
        if row.get("what_if", True) and isinstance(row.get("predicted_s_per_batch"), (int, float)):
            held_out = {int(tried["value"]): float(row["predicted_s_per_batch"])}
    # sharing is fitted only where it was assumed, and the step the model takes was timed alone
    if model.get("costs"):
        fit_sharing = str(model.get("sharing", "")).startswith("assumed: the baseline had no busy workers")
    else:  # an early diagnosis's step was timed in its baseline, beside its workers if it had any
        fit_sharing = not ev.num_workers
    conclusion = conclude(ev, Model(costs, fixed, threads, measured, held_out, fit_sharing), cores=cores,
                          step_s=step_s)
    ev, costs = conclusion.evidence, conclusion.costs
    modelled = step_s is not None or cores is not None
    if modelled:
        said = " and ".join(x for x in (f"a step of {step_s * 1e3:.3g} ms" if step_s is not None else "",
                                        f"{cores:g} cores" if cores is not None else "") if x)
        notes.append(f"what if: {said}; the loop's figures (its pace, wait and CPU) are the model's, not measured")
    try_first = None
    if conclusion.tries:
        try_first = {**conclusion.tries[0], "measured_speedup": None, "note": "not measured (a replay)"}
        if try_first["setting"] == "collate_fn":
            try_first["value"] = (data.get("try_first") or {}).get("value")
    # the source's own check is drawn again here: its notes give way to the conclusion's
    kept = [n for n in data.get("notes") or [] if not is_check_note(n)]
    return conclusion.diagnosis(
        try_first=try_first, notes=notes + kept, model={**model, **inputs},
        breakdown={**data["breakdown"], "step_s": ev.step_s, "s_per_batch": ev.s_per_batch, "wait_s": ev.wait_s,
                   "pin_s": (costs.pin_s if ev.num_workers else (costs.pin_main_s or costs.pin_s)) or None},
        scaling=conclusion.scaling_rows(data.get("scaling") or []), memory=data.get("memory") or {},
        settings=data.get("settings") or {}, step=f"a replayed step ({ev.step_s * 1e3:.3g} ms)",
        runs=data.get("runs") or [], gpu_busy_share=None if modelled else data.get("gpu_busy_share"),
        source="replay", modelled=modelled)
