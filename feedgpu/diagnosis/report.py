"""What a diagnosis found, as plain text, as HTML in Jupyter, and as a dict of stable keys.

``to_dict()`` (and the command's ``--json``) always has these keys, whose meaning does
not change:

* ``"verdict"``: ``"input-bound"`` or ``"compute-bound"``;
* ``"causes"``: the ids found (see :data:`feedgpu.diagnosis.causes.CAUSES`), empty when healthy;
* ``"data_wait_share"``: the share of the loop's wall time spent waiting for the next batch;
* ``"busy_share"``: the share of the loop's wall time the (simulated or real) accelerator
  was busy stepping;
* ``"try_first"``: ``{"setting", "value", "predicted_speedup", "measured_speedup"}`` or None;

and the figures: ``"breakdown"`` (where a batch's time goes, seconds), ``"scaling"`` (the
measured points with the model beside them), ``"memory"`` (each worker's USS growth),
``"findings"``, ``"settings"``, ``"runs"``, ``"thresholds"``, ``"notes"``,
``"gpu_busy_share"``, ``"elapsed_s"``, ``"max_seconds"``, ``"source"`` (``"diagnose"``,
``"watch"`` or ``"replay"``). Numbers that were not measured are None.

Every input of the model, so that a diagnosis can be replayed without its loader
(:func:`feedgpu.diagnosis.replay`):

* ``"model"``: ``{"costs", "fixed_costs", "probes", "usable_cores", "max_workers"}``: the
  costs the model was fed (:class:`~feedgpu.diagnosis.whatif.Costs`), those of the collate
  fix where one was probed, and every repeated probe's readings with their spread and
  the torch threads they ran with;
* ``"evidence"``: what the causes were named from
  (:class:`~feedgpu.diagnosis.evidence.Evidence`);
* ``"model_s_per_batch"``: the model's seconds per batch for every worker count from 0 to
  the largest it considers, keyed by the count as a string.
"""

from __future__ import annotations

import base64
import html
import io
import math
from dataclasses import dataclass, field, fields
from typing import Any

from .causes import Finding, band_of
from .evidence import (GROWTH_KB_PER_ITEM, GROWTH_MB, HAND_OVER_SHARE, INPUT_BOUND_SHARE, MODERATE_SHARE, START_UP_SHARE,
                       ms, pct)

__all__ = ["Diagnosis", "json_ready"]

#: The stages of :attr:`Diagnosis.breakdown`, in order, with their labels.
STAGES: dict[str, str] = {
    "fetch_s": "fetch items",
    "collate_s": "collate",
    "send_s": "hand-over, worker",
    "receive_s": "hand-over, main",
    "pin_s": "pinning",
    "step_s": "step",
}


def json_ready(value: Any) -> Any:
    """``value`` for JSON: NaN and infinities become None, containers are walked."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {str(k): json_ready(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_ready(v) for v in value]
    return value


@dataclass
class Diagnosis:
    """What :func:`feedgpu.diagnose` (or ``watch(...).report()``) found. See the module's
    docstring for the keys of :meth:`to_dict`.

    Attributes:
        verdict, causes, data_wait_share, busy_share, try_first: the stable figures.
        findings: each cause with its sentence and advice.
        explanation: the course's model in words (:func:`feedgpu.models.pipeline.explain_bottleneck`).
        breakdown: seconds per batch of each stage (None: not measured), and the measured
            ``s_per_batch`` and ``wait_s``.
        scaling: ``{"num_workers", "s_per_batch", "predicted_s_per_batch", "label"}`` per
            setting run (``s_per_batch`` None where the budget ran out first); ``"what_if"``
            is true on the row the what-if measured after choosing it (held out of the choice).
        memory: ``{"per_worker_mb", "items_per_worker", "kb_per_item",
            "projected_epoch_mb", "named", "reason"}`` (``reason`` says why not measured; the
            projection is said in words only where ``memory-growth`` was named: a worker's
            first allocations do not go on).
        settings: the loader's settings; ``step``: what the step was.
        notes: anything the reader should know (a run cut by the budget, ...).
        gpu_busy_share: the CUDA device's busy share from events (CUDA and a step only).
        model, evidence, model_s_per_batch: every input of the model, what the causes were
            named from, and the model's seconds per batch by worker count (for a replay).
        modelled: the loop's figures are the model's, not measured (a replay's what-if).
        disturbed: where the machine was busy while it measured (the load average above the
            cores, or a probe's readings spread over a quarter): why, and which reading the
            verdict rests on; None on a quiet machine.
    """

    verdict: str
    causes: list[str]
    data_wait_share: float
    busy_share: float
    try_first: dict[str, Any] | None = None
    findings: list[Finding] = field(default_factory=list)
    explanation: str = ""
    breakdown: dict[str, Any] = field(default_factory=dict)
    scaling: list[dict[str, Any]] = field(default_factory=list)
    memory: dict[str, Any] = field(default_factory=dict)
    settings: dict[str, Any] = field(default_factory=dict)
    step: str = ""
    runs: list[dict[str, Any]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    gpu_busy_share: float | None = None
    elapsed_s: float = math.nan
    max_seconds: float | None = None
    source: str = "diagnose"
    model: dict[str, Any] = field(default_factory=dict)
    evidence: dict[str, Any] = field(default_factory=dict)
    model_s_per_batch: dict[str, float] = field(default_factory=dict)
    modelled: bool = False
    disturbed: str | None = None

    # ------------------------------------------------------------------ figures
    def to_dict(self) -> dict[str, Any]:
        """Every figure as plain JSON-ready values (see the module's docstring)."""
        return json_ready({
            "verdict": self.verdict,
            "causes": list(self.causes),
            "data_wait_share": self.data_wait_share,
            "busy_share": self.busy_share,
            "try_first": self.try_first,
            "gpu_busy_share": self.gpu_busy_share,
            "findings": [{"cause": f.cause, "sentence": f.sentence, "advice": f.advice} for f in self.findings],
            "explanation": self.explanation,
            "breakdown": self.breakdown,
            "scaling": self.scaling,
            "memory": self.memory,
            "settings": self.settings,
            "step": self.step,
            "runs": self.runs,
            "thresholds": {"input_bound_share": INPUT_BOUND_SHARE, "moderate_share": MODERATE_SHARE,
                           "hand_over_share": HAND_OVER_SHARE, "start_up_share": START_UP_SHARE,
                           "growth_mb": GROWTH_MB, "growth_kb_per_item": GROWTH_KB_PER_ITEM},
            "notes": list(self.notes),
            "elapsed_s": self.elapsed_s,
            "max_seconds": self.max_seconds,
            "source": self.source,
            "model": self.model,
            "evidence": self.evidence,
            "model_s_per_batch": self.model_s_per_batch,
            "modelled": self.modelled,
            "disturbed": self.disturbed,
        })

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Diagnosis:
        """The diagnosis :meth:`to_dict` wrote (keys it does not know are left out)."""
        names = {f.name for f in fields(cls)}
        values = {k: v for k, v in data.items() if k in names and k != "findings"}
        values["findings"] = [Finding(f["cause"], f["sentence"], f["advice"]) for f in data.get("findings") or []]
        for key in ("data_wait_share", "busy_share", "elapsed_s"):
            if values.get(key) is None:
                values[key] = math.nan
        return cls(**values)

    # ------------------------------------------------------------------ words
    def headline(self) -> str:
        """The verdict in one sentence."""
        busy = (f"and the step takes {pct(self.busy_share)} of it, its CPU work included"
                if "main-thread-work" in self.causes else f"and the accelerator is busy {pct(self.busy_share)} of it")
        return (f"{self.verdict}: the loop waits for data {pct(self.data_wait_share)} of its time "
                f"({band_of(self.data_wait_share)}; input-bound from {pct(INPUT_BOUND_SHARE)}), {busy}.")

    def try_sentence(self) -> str | None:
        """The setting to try first, with the model's prediction and the measurement."""
        t = self.try_first
        if not t:
            return None
        why = f" ({t['why']})" if t.get("why") else ""
        line = f"Try first: {t['setting']}={t['value']}{why}: the model predicts {t['predicted_speedup']:.2f}x"
        for key, note, said in (("measured_speedup", "note", "measured"),
                                ("script_measured_speedup", "script_note", "the script run again with it:")):
            measured = t.get(key)
            if measured is not None and math.isfinite(measured):
                line += f"; {said} {measured:.2f}x (measured/predicted {measured / t['predicted_speedup']:.2f})"
            elif t.get(note):
                line += f"; {t[note]}"
        return line + "."

    def _breakdown_line(self) -> str:
        parts = []
        for key, label in STAGES.items():
            value = self.breakdown.get(key)
            parts.append(f"{label} {ms(value) if value is not None else '-'}")
        return " | ".join(parts)

    def _scaling_line(self) -> str:
        parts = []
        for point in self.scaling:
            measured = point.get("s_per_batch")
            predicted = point.get("predicted_s_per_batch")
            shown = f"{1 / measured:.1f}" if measured else "not measured"
            model = f" (model {1 / predicted:.1f})" if predicted else ""
            parts.append(f"{point['num_workers']} worker{'' if point['num_workers'] == 1 else 's'} {shown}{model}")
        return " | ".join(parts)

    def _memory_line(self) -> str:
        m = self.memory
        if not m or not m.get("per_worker_mb"):
            return f"not measured ({m.get('reason', 'no workers') if m else 'no workers'})"
        growth = ", ".join(f"{g:+.1f}" for g in m["per_worker_mb"])
        line = f"USS growth per worker {growth} MB over ~{m['items_per_worker']:.0f} items each"
        if m.get("projected_epoch_mb") is not None and m.get("named", True):
            line += f" (~{m['projected_epoch_mb']:.0f} MB per worker over an epoch at this rate)"
        return line

    def __str__(self) -> str:
        lines = [f"Diagnosis of a DataLoader ({self._settings_text()}) with {self.step}"]
        if self.max_seconds is not None:
            lines[0] += f"; {self.elapsed_s:.1f} s of a {self.max_seconds:g} s budget"
            if self.source == "run":  # the budget counts from each run's first loop, not its start-up
                lines[0] += " and the script's start-ups"
        lines.append(f"verdict: {self.headline()}")
        if self.disturbed:
            lines.append(f"  on disturbed readings: {self.disturbed}")
        if self.gpu_busy_share is not None:
            lines.append(f"GPU busy (CUDA events): {pct(self.gpu_busy_share)}")
        lines.append(f"causes: {', '.join(self.causes) if self.causes else 'none'}")
        for f in self.findings:
            lines.append(f"  - {f.cause}: {f.sentence} {f.advice}")
        if self.explanation:
            lines.append(f"model: {self.explanation}")
        sentence = self.try_sentence()
        if sentence:
            lines.append(sentence)
        if self.breakdown:
            lines.append(f"where a batch's time goes: {self._breakdown_line()}")
            said = "modelled" if self.modelled else "measured"
            lines.append(f"{said} per batch: {ms(self.breakdown.get('s_per_batch'))} "
                         f"(waiting {ms(self.breakdown.get('wait_s'))})")
        if self.scaling:
            lines.append(f"batches/s by num_workers, measured (model, each count predicted without its own run): "
                         f"{self._scaling_line()}")
        lines.append(f"worker memory: {self._memory_line()}")
        lines += [f"note: {n}" for n in self.notes]
        return "\n".join(lines)

    def _settings_text(self) -> str:
        s = self.settings
        keys = ("num_workers", "batch_size", "persistent_workers", "pin_memory", "start_method")
        return ", ".join(f"{k}={s[k]}" for k in keys if k in s)

    # ------------------------------------------------------------------ Jupyter
    def _plot_png(self) -> str | None:
        """The plot as base64 PNG, drawn on a figure of its own (no pyplot: the notebook's
        backend and figures are left alone)."""
        try:
            from matplotlib.figure import Figure

            from .plot import plot_diagnosis
        except ImportError:  # pragma: no cover - the course always has matplotlib
            return None
        figure = Figure(figsize=(13, 3.4), layout="constrained")
        plot_diagnosis(self, axes=figure.subplots(1, 3, gridspec_kw={"width_ratios": [1.4, 1, 0.8]}))
        buffer = io.BytesIO()
        figure.savefig(buffer, format="png", dpi=80, bbox_inches="tight")
        return base64.b64encode(buffer.getvalue()).decode("ascii")

    def _repr_html_(self) -> str:
        e = html.escape
        rows = [("verdict", self.verdict), ("data wait share", pct(self.data_wait_share)),
                ("accelerator busy share", pct(self.busy_share)),
                ("causes", ", ".join(self.causes) or "none")]
        if self.gpu_busy_share is not None:
            rows.append(("GPU busy share (CUDA events)", pct(self.gpu_busy_share)))
        if self.try_first:
            t = self.try_first
            measured = t.get("measured_speedup")
            rows.append(("try first", f"{t['setting']}={t['value']}: predicted {t['predicted_speedup']:.2f}x, "
                         + (f"measured {measured:.2f}x" if measured else "not measured")))
        for key, label in STAGES.items():
            if self.breakdown.get(key) is not None:
                rows.append((f"per batch: {label}", ms(self.breakdown[key])))
        rows.append(("worker memory", self._memory_line()))
        table = "".join(f"<tr><th style='text-align:left'>{e(k)}</th><td style='text-align:left'>{e(str(v))}</td>"
                        "</tr>" for k, v in rows)
        items = "".join(f"<li><b>{e(f.cause)}</b>: {e(f.sentence)} {e(f.advice)}</li>" for f in self.findings)
        notes = "".join(f"<li>{e(n)}</li>" for n in self.notes)
        png = self._plot_png()
        alt = (f"The diagnosis's plot: where a batch's time goes ({self._breakdown_line()}); batches/s by "
               f"num_workers, measured (model): {self._scaling_line() or 'none measured'}; worker memory: "
               f"{self._memory_line()}")
        image = f"<img alt='{e(alt)}' src='data:image/png;base64,{png}'/>" if png else ""
        return (f"<div><p><b>{e(self.headline())}</b></p><table>{table}</table>"
                + (f"<ul>{items}</ul>" if items else "<p>No cause found: the loop does not wait for data.</p>")
                + (f"<p>{e(self.explanation)}</p>" if self.explanation else "")
                + (f"<p>{e(self.try_sentence())}</p>" if self.try_first else "")
                + image + (f"<ul>{notes}</ul>" if notes else "") + "</div>")

    def __repr__(self) -> str:
        return (f"Diagnosis(verdict={self.verdict!r}, causes={self.causes!r}, "
                f"data_wait_share={self.data_wait_share:.3f}, busy_share={self.busy_share:.3f})")

