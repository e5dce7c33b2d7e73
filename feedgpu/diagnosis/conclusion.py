"""One conclusion: the causes, the verdict, the model checked and the setting to try first.

Every way of diagnosing ends here, with the same function of what was measured:

* :func:`feedgpu.diagnose` (and ``feedgpu-diagnose``, and ``feedgpu-diagnose run``, whose
  hooks call it in the script's process) once its runs are done;
* :meth:`feedgpu.diagnosis.Watch.report`, from inside a loop: evidence, no model;
* :func:`feedgpu.diagnosis.replay`, from a diagnosis's JSON.

:func:`conclude` takes the evidence (:class:`~.evidence.Evidence`) and, where there is one,
the model (:class:`Model`: the probes' costs, those of the fixes probed, and the measured
points), and returns a :class:`Conclusion`: the causes named from the evidence, the verdict
from the wait, the model checked against its own points and corrected where it misses
(:mod:`.fitting`), and the settings worth trying, each with its predicted speed-up
(:func:`~.whatif.predicted_tries`). :meth:`Conclusion.diagnosis` makes the
:class:`~.report.Diagnosis` of it, with what the caller measured besides.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any

from .causes import Finding, find_causes, verdict_of
from .evidence import MODERATE_SHARE, Evidence, ms, pct
from .fitting import PARAMETERS, Check, apply_correction, check_model
from .report import Diagnosis
from .whatif import Costs, max_workers, predicted_tries

__all__ = ["Model", "Conclusion", "conclude", "modelled_evidence"]


@dataclass
class Model:
    """What the model was fed.

    Attributes:
        costs: the probes' costs (:class:`~.whatif.Costs`).
        fixed_costs: the costs with the shared-tensor collate, where it was probed.
        thread_costs: the costs with the items timed on one thread per pool, where they were.
        measured: the loop's seconds per batch by worker count (the points).
        held_out: predictions made before a point was measured (the what-if's count).
        fit_sharing: whether the check may fit how much busy workers slow the main process
            (not where it was measured, :func:`~.fitting.check_model`).
    """

    costs: Costs
    fixed_costs: Costs | None = None
    thread_costs: Costs | None = None
    measured: dict[int, float] = field(default_factory=dict)
    held_out: dict[int, float] = field(default_factory=dict)
    fit_sharing: bool = True


@dataclass
class Conclusion:
    """What a diagnosis concludes (see the module's docstring).

    Attributes:
        evidence: what the causes were named from.
        findings: each cause with its sentence and advice.
        verdict: ``"input-bound"`` or ``"compute-bound"``.
        check: the model against its measured points (None without a model).
        costs, fixed_costs, thread_costs: the model from now on (corrected where it missed).
        tries: the settings worth trying, best first (:func:`~.whatif.predicted_tries`).
        notes: what the check found, in words.
    """

    evidence: Evidence
    findings: list[Finding]
    verdict: str
    check: Check | None = None
    costs: Costs | None = None
    fixed_costs: Costs | None = None
    thread_costs: Costs | None = None
    tries: list[dict[str, Any]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def causes(self) -> list[str]:
        return [f.cause for f in self.findings]

    def predicted_s_per_batch(self, num_workers: int) -> float | None:
        """The prediction for a count: made without its own measurement where it was measured."""
        if self.check is not None and num_workers in self.check.predicted:
            return self.check.predicted[num_workers]
        return self.costs.s_per_batch(num_workers) if self.costs is not None else None

    def scaling_rows(self, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """``rows`` (one per measured count) with the model's figures: ``predicted_s_per_batch``
        (leave one out) and ``probes_s_per_batch`` (the probes' model, before any correction)."""
        out = []
        for row in rows:
            w = int(row["num_workers"])
            probes = self.check.probes.get(w) if self.check is not None else None
            out.append({**row, "predicted_s_per_batch": self.predicted_s_per_batch(w), "probes_s_per_batch": probes})
        return out

    def diagnosis(self, *, try_first: dict[str, Any] | None = None, busy_share: float | None = None,
                  model: dict[str, Any] | None = None, notes: list[str] | None = None, **fields: Any) -> Diagnosis:
        """The :class:`~.report.Diagnosis` of this conclusion. ``try_first``: the setting
        tried (default: the first of :attr:`tries`, not measured); ``model``: what the caller
        keeps of the model's inputs (the check and the figures are added); ``fields``: the
        rest of the report (breakdown, scaling, memory, settings, step, runs, ...)."""
        ev = self.evidence
        wait = ev.data_wait_share
        if busy_share is None:
            busy_share = 1 - wait if math.isfinite(wait) else math.nan
        kept = dict(model or {})
        extra: dict[str, Any] = {}
        if self.costs is not None:
            top = max_workers(ev.cores)
            kept.update(max_workers=top, check=self.check.to_dict() if self.check is not None else None)
            extra.update(explanation=self.costs.explain(ev.num_workers) + waited_anyway(self.costs, ev),
                         model_s_per_batch=self.costs.by_workers(top))
        return Diagnosis(verdict=self.verdict, causes=self.causes, data_wait_share=wait, busy_share=busy_share,
                         try_first=try_first, findings=self.findings, notes=list(notes or []) + self.notes,
                         model=kept, evidence=ev.to_dict(), **extra, **fields)


def waited_anyway(costs: Costs, ev: Evidence) -> str:
    """A sentence where the model's loop is fed (it never waits for data) but the measured
    one waited for its batches, besides receiving them, at least :data:`MODERATE_SHARE` of its
    time: the model holds means, and the workers delivered more slowly or less evenly than
    they say. Empty where the measurement agrees or was not made."""
    if not costs.fed(ev.num_workers) or not (ev.s_per_batch > 0 and math.isfinite(ev.wait_s)):
        return ""
    receiving = ev.main_next_cpu_s if math.isfinite(ev.main_next_cpu_s) else 0.0
    starved = ev.wait_s - receiving
    if starved / ev.s_per_batch < MODERATE_SHARE:
        return ""
    return (f" Measured, though, the loop waited {ms(starved)} a batch for data besides receiving it "
            f"({pct(starved / ev.s_per_batch)} of its time): its workers delivered more slowly, or less evenly, "
            "than the model's means say.")


def conclude(evidence: Evidence, model: Model | None = None, *, cores: float | None = None,
             step_s: float | None = None) -> Conclusion:
    """The conclusion of a diagnosis from its evidence and, where it has one, its model.

    Args:
        evidence: what the loop showed.
        model: the probes' costs and the measured points (None: a watched loop, which
            names causes and predicts nothing).
        cores, step_s: a replay's what-if: the model checked on what was measured, then
            asked about this many cores or this step (None: as measured).

    Returns:
        A :class:`Conclusion`.
    """
    if model is None:
        findings = find_causes(evidence)
        return Conclusion(evidence, findings, verdict_of(evidence.data_wait_share))
    check = check_model(model.costs, model.measured, model.held_out, model.fit_sharing)
    ev = evidence
    # the setting to try comes from the model as it was before a held-out point was measured (the
    # what-if's, measured to check that choice), leaning on the points it had: the live diagnosis and
    # its replay agree. A replay's what-if (another step, other cores) asks the model of every point.
    measured: dict[int, float] | None = {w: v for w, v in check.measured.items() if w not in model.held_out}
    chose = check if not model.held_out else check_model(model.costs, measured, None, model.fit_sharing)
    modelled = cores is not None or step_s is not None
    if modelled:
        chose = check
        measured = None  # the points were measured on the loop as it was, not on this one
    # a fix keeps the resource the workers share and the main process's sharing; its items were
    # timed again (one thread per pool) or its hand-over is another, so the load's scale stays the probe's
    kept = {k: v for k, v in (chose.correction or {}).items() if k in PARAMETERS and k != "load_scale"}
    costs = chose.costs
    fixed = apply_correction(model.fixed_costs, kept) if model.fixed_costs is not None else None
    threads = apply_correction(model.thread_costs, kept) if model.thread_costs is not None else None
    if modelled:
        changes = {k: v for k, v in (("cores", None if cores is None else float(cores)), ("step_s", step_s))
                   if v is not None}
        costs = replace(costs, **changes)
        fixed = replace(fixed, **changes) if fixed is not None else None
        threads = replace(threads, **changes) if threads is not None else None
        ev = modelled_evidence(ev, costs, cores)
    findings = find_causes(ev)
    # a correction only one point shows is not checked out of sample: the count it advises is tried
    # (the live diagnosis measures it, a point the correction was not fitted to), not only measured ones
    unchecked = bool(chose.correction) and chose.correction.get("checked") is False and not modelled
    tries = predicted_tries(costs, ev.num_workers, ev.cores, {f.cause for f in findings}, fixed_costs=fixed,
                            startup_s=ev.startup_s, one_batch_s=ev.one_batch_s,
                            batches_per_epoch=ev.batches_per_epoch, s_per_batch=ev.s_per_batch,
                            thread_costs=threads, measured=measured, trusted=chose.trusted or unchecked)
    if unchecked:  # the count the corrected model advises is the point beyond that checks it
        for t in tries:
            if t["setting"] == "num_workers":
                t["why"] += "; the correction rests on one point, and this count, measured, checks it out of sample"
    if not modelled:  # the model from now on: fitted to every point
        costs = check.costs
    return Conclusion(ev, findings, verdict_of(ev.data_wait_share), check, costs, fixed, threads, tries,
                      list(check.notes))

def modelled_evidence(ev: Evidence, costs: Costs, cores: float | None) -> Evidence:
    """The evidence of the loop the model describes: its pace, wait and CPU from ``costs``
    (the usable cores changed only where ``cores`` is given): a replay's what-if."""
    w = ev.num_workers
    pace = costs.s_per_batch(w)
    if w == 0:  # the main thread loads (and pins) inside next(), then steps
        pin = costs.pin_s if costs.pin_main_s is None else costs.pin_main_s
        main_cpu = costs.load_s * costs.cpu_share + pin + costs.step_s * costs.step_cpu_share
        wait, workers_cpu, next_cpu = costs.load_s + pin, 0.0, costs.load_s * costs.cpu_share + pin
    else:
        main_cpu = costs.main_cpu_s()
        wait = max(pace - costs.main_s(w) + costs.receive_s, costs.receive_s)
        workers_cpu, next_cpu = min(float(w), costs.worker_cpu_s() / pace), costs.receive_s
    main_per_s = main_cpu / pace if pace > 0 else math.nan
    idle = max(0.0, 1.0 - (main_per_s + workers_cpu) / max(costs.cores, 0.5))
    return replace(ev, cores=ev.cores if cores is None else max(1, int(round(cores))), s_per_batch=pace,
                   wait_s=wait, step_s=costs.step_s,
                   data_wait_share=min(wait / pace, 1.0) if pace > 0 else 0.0,
                   main_next_cpu_s=next_cpu, main_cpu_per_s=main_per_s, workers_cpu_per_s=workers_cpu,
                   idle_share=idle, step_cpu_s=math.nan, device_s=math.nan)  # a what-if's step: no wait of its own seen
