"""The diagnosis's figure: where a batch's time goes, throughput by workers, worker memory.

A diagnosis shown in Jupyter (:class:`~feedgpu.diagnosis.report.Diagnosis`) and
``feedgpu-diagnose --plot`` draw it; it reads only a diagnosis's ``to_dict()``, so a
replayed JSON draws the same figure.
"""

from __future__ import annotations

from typing import Any

from ..palette import GREY, LIGHT, LOAD_COLOR, ORANGE, PURPLE, SKY, STEP_COLOR, VERMILLION, YELLOW

__all__ = ["plot_diagnosis"]


# The stages of a diagnosis's breakdown, in order, with their labels and colours.
_DIAGNOSIS_STAGES = (("fetch_s", "fetch items", LOAD_COLOR), ("collate_s", "collate", YELLOW),
                     ("send_s", "hand-over, worker", PURPLE), ("receive_s", "hand-over, main", VERMILLION),
                     ("pin_s", "pinning", SKY), ("step_s", "step", STEP_COLOR))


def plot_diagnosis(diagnosis: Any, axes: Any = None) -> Any:
    """Three panels of a diagnosis (:func:`feedgpu.diagnose`): where a batch's time goes,
    how throughput scales with ``num_workers`` beside the model, and each worker's memory.

    * left: the work of one batch, stage by stage (what one process spends on it), above
      what the loop measured per batch (waiting, then stepping);
    * middle: batches per second measured at each worker count run (points; the current
      setting ringed, the one tried starred), the model (line: corrected by the points
      where it missed them) and each point's prediction made without it (crosses);
    * right: each worker's USS growth over the timed batches, or why it was not measured.

    Args:
        diagnosis: a :class:`~feedgpu.diagnosis.Diagnosis`, or its ``to_dict()``.
        axes: three matplotlib Axes side by side; a new figure is made when None.

    Returns:
        The three Axes.
    """
    import matplotlib.pyplot as plt

    data = diagnosis.to_dict() if hasattr(diagnosis, "to_dict") else dict(diagnosis)
    if axes is None:
        _, axes = plt.subplots(1, 3, figsize=(13, 3.4), layout="constrained",
                               gridspec_kw={"width_ratios": [1.4, 1, 0.8]})
    left, middle, right = axes
    breakdown = data.get("breakdown") or {}
    start = 0.0
    for key, label, color in _DIAGNOSIS_STAGES:
        value = breakdown.get(key)
        if value:
            left.barh(1, value * 1e3, left=start, color=color, label=label)
            start += value * 1e3
    wait, step = breakdown.get("wait_s"), breakdown.get("step_s")
    if wait is not None and step is not None:
        left.barh(0, wait * 1e3, color=LIGHT, edgecolor=GREY, hatch="//", label="waiting for data")
        left.barh(0, step * 1e3, left=wait * 1e3, color=STEP_COLOR)
    left.set_yticks([0, 1], ["measured\nper batch", "work of\none batch"])
    left.set_xlabel("ms")
    left.set_title(f"{data.get('verdict', '')}: waiting {100 * (data.get('data_wait_share') or 0):.0f}%")
    if left.get_legend_handles_labels()[0]:
        left.legend(fontsize="x-small", loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=4)
    points = data.get("scaling") or []
    current = (data.get("settings") or {}).get("num_workers")
    tried = (data.get("try_first") or {})
    tried_workers = tried.get("value") if tried.get("setting") == "num_workers" else None
    if points:
        workers = [p["num_workers"] for p in points]
        curve = {int(w): s for w, s in (data.get("model_s_per_batch") or {}).items() if s}
        if curve:  # the model at every count up to the largest run
            shown = [w for w in sorted(curve) if w <= max(workers)]
            middle.plot(shown, [1 / curve[w] for w in shown], "-", color=GREY, label="model")
        unseen = [(p["num_workers"], 1 / p["predicted_s_per_batch"]) for p in points
                  if p.get("predicted_s_per_batch") and p.get("s_per_batch")]
        if unseen:
            middle.plot(*zip(*unseen), "x", color=GREY, markersize=7, label="predicted without it")
        measured = [(p["num_workers"], 1 / p["s_per_batch"]) for p in points if p.get("s_per_batch")]
        if measured:
            middle.plot(*zip(*measured), "o", color=ORANGE, label="measured")
        for w, rate in measured:
            if w == current:
                middle.plot(w, rate, "o", markersize=14, markerfacecolor="none", color="black", label="current")
            if w == tried_workers:
                middle.plot(w, rate, "*", markersize=14, color=SKY, label="tried")
        middle.set_xticks(sorted(set(workers)))
        middle.legend(fontsize="x-small")
    else:
        middle.text(0.5, 0.5, "no scaling runs\n(watch() measures the loop only)", ha="center", va="center",
                    transform=middle.transAxes)
    middle.set(xlabel="num_workers", ylabel="batches / s", title="throughput by workers")
    middle.set_ylim(bottom=0)
    middle.grid(alpha=0.3)
    memory = data.get("memory") or {}
    growth = memory.get("per_worker_mb") or []
    if growth:
        right.bar([f"worker {i}" for i in range(len(growth))], growth, color=GREY)
        right.axhline(0, color="black", linewidth=0.8)
        named = (data.get("thresholds") or {}).get("growth_mb")
        if named:  # the least growth the diagnosis counts (then named where an epoch would add 16 MB a worker)
            right.axhline(named, color=VERMILLION, linestyle=":", label=f"counted from {named:g} MB")
            right.set_ylim(top=max(1.2 * named, 1.1 * max(growth)))
            right.legend(fontsize="x-small")
        right.set_ylabel("USS growth (MB)")
    else:
        right.text(0.5, 0.5, "not measured:\n" + str(memory.get("reason") or "no workers"), ha="center",
                   va="center", wrap=True, transform=right.transAxes, fontsize="small")
        right.set_xticks([])
        right.set_yticks([])
    right.set_title("worker memory")
    return axes
