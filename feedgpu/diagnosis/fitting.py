"""The model checked against the points it measured, and corrected by them where it misses.

The model (:class:`~feedgpu.diagnosis.whatif.Costs`) is built from probes: an item timed in
this process, the hand-over, pinning, the step. The diagnosis also measures the loop
itself at a few worker counts (the baseline and the scaling runs): its *points*. Those
are what the model is judged by, out of sample:

* **Each point's prediction is made without it** (leave one out): the probes' model does
  not use any point's pace, and a corrected model is fitted to the *other* points before
  it predicts this one. That prediction is the JSON's ``scaling[].predicted_s_per_batch``.
* **Where the probes' model misses a point** (measured / predicted outside :data:`BAND`),
  it is corrected before anything is predicted or advised; and where every point is
  inside the band but a correction predicts them clearly better from each other
  (:data:`CLEARLY`), too: points that all lean to one edge of the band are a model that
  misses, and a count beyond them would miss by more. A correction is one of a few
  small families, each a quantity of the pipeline the probes cannot see, fitted to the
  points by least squares on the logarithm of measured over predicted:

  - ``serial_s``: a resource every worker holds for part of each batch (a lock, one file
    handle or connection, a service limited to so many requests a second), in the
    spirit of Amdahl's law: the share of the work that does not run in parallel sets a
    ceiling, and the workers' stage becomes a closed queue
    (:func:`~feedgpu.diagnosis.whatif.shared_resource_s`);
  - ``serial_s`` and ``serial_cv2``: that resource, and how irregular its holds are (1:
    as random ones, where a queue forms well before it is always busy, the first
    family's assumption; 0: every hold the same, a lock around fixed work or a service
    at a fixed rate, where the workers barely queue until together they ask more than it
    serves). Fitted to points on both sides of the knee, the first family puts the
    resource's pace too fast where the holds are regular, and misses every count beyond;
  - ``load_scale``: the workers build a batch slower or faster than the item probe did in
    this process (thread pools, caches, memory traffic);
  - ``sharing``: how much busy workers slow the main process's own work (the term of
    Gunther's universal scalability law that grows with the load);
  - ``load_scale`` and ``serial_s`` together.

  The family chosen is the one whose leave-one-out predictions miss the points least
  (the fewer parameters where two are within :data:`TIE`); the probes' model stays where
  no family does better. The corrected model is then fitted to every point. A family is
  fitted only to points that can tell its parameters: more points with workers than it
  has parameters, counts at least :data:`SPAN` apart, and a value some point depends on
  (its stage sets that point's pace, :func:`_identified`); otherwise the check says the
  points cannot correct the model, and what they would need.
  Where no family predicts the points better from each other, one point may be all that
  shows a quantity: a family fitted to every point is taken then, but only where it puts
  as many of them inside the band as the probes' model did (a loop whose third worker
  runs four times slower than its second makes every family miss all three, where the
  probes' model missed one: that correction explains less, and the probes' model stands),
  and it is said not to be checked out of sample.
* **A model that still misses** a point after the correction explains no longer what was
  measured: :attr:`Check.trusted` is False, and the diagnosis advises only a worker
  count it measured (:func:`~feedgpu.diagnosis.whatif.predicted_tries`).

A point at 0 workers is the main process loading and stepping in turn, on torch's threads
where the item probe timed a worker's one thread: no family changes it, and it neither
chooses a family nor makes the model untrusted (a miss there is said in a note).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import Any

from .whatif import BAND, Costs

__all__ = ["BAND", "TIE", "FAMILIES", "PARAMETERS", "Check", "check_model", "apply_correction",
           "is_check_note"]

#: Leave-one-out errors (largest |log(measured / predicted)|) this close count as a tie.
TIE = 0.02
#: Where every point is inside the band, a correction must cut the largest leave-one-out
#: error by this much (about 10%): points near the band's edge all on one side are a model
#: that misses, and a what-if beyond them would miss by more.
CLEARLY = math.log(1.1)
#: The corrections tried, fewest parameters first.
FAMILIES: tuple[tuple[str, ...], ...] = (("serial_s",), ("load_scale",), ("sharing",), ("serial_s", "serial_cv2"),
                                         ("load_scale", "serial_s"))
#: The corrected model's values, by name (what :func:`apply_correction` takes from a correction).
PARAMETERS = ("load_scale", "serial_s", "serial_cv2", "sharing")

#: The grid of each parameter: the workers' load relative to the probe's (1/8 to 8), the
#: shared resource's share of a worker's batch (2% to all of it), the sharing (0 to 1).
_SCALES = tuple(2 ** (k / 8) for k in range(-24, 25))
_COARSE_SCALES = tuple(2 ** (k / 4) for k in range(-12, 13))
_SHARES = tuple(0.02 * 50 ** (k / 32) for k in range(33))
_COARSE_SHARES = tuple(0.02 * 50 ** (k / 16) for k in range(17))
_SHARING = tuple(k / 20 for k in range(21))
#: The holds' squared coefficient of variation: every hold the same, between, as random ones.
_IRREGULARITY = (0.0, 0.5, 1.0)


def apply_correction(costs: Costs, correction: dict[str, float] | None) -> Costs:
    """``costs`` with a correction's fitted values (those of :data:`PARAMETERS` it holds)."""
    if not correction:
        return costs
    return replace(costs, **{k: v for k, v in correction.items() if k in PARAMETERS})


def _candidates(costs: Costs, family: tuple[str, ...]) -> Iterable[dict[str, float]]:
    """Every value of ``family``'s parameters on its grid (a shared resource as a share of
    the workers' batch at the load scale it comes with)."""
    if family == ("sharing",):
        for sharing in _SHARING:
            yield {"sharing": sharing}
    elif family == ("load_scale",):
        for scale in _SCALES:
            yield {"load_scale": scale}
    elif family == ("serial_s",):
        for share in _SHARES:
            yield {"serial_s": share * costs.worker_cycle_s}
    elif family == ("serial_s", "serial_cv2"):
        for cv2 in _IRREGULARITY:
            for share in _SHARES:
                yield {"serial_s": share * costs.worker_cycle_s, "serial_cv2": cv2}
    else:
        for scale in _COARSE_SCALES:
            cycle = costs.load_s * scale + costs.send_s
            for share in _COARSE_SHARES:
                yield {"load_scale": scale, "serial_s": share * cycle}


def _log_ratio(measured: float, predicted: float) -> float:
    return math.log(measured / max(predicted, 1e-12))


#: A stage sets the pace at a point when it needs at least this share of the point's time.
SETS_PACE = 0.9
#: A correction needs measured worker counts at least this far apart (the most over the
#: fewest): points close together say how the loop runs there, not how it scales.
SPAN = 2.0


def _identified(model: Costs, family: tuple[str, ...], counts: Iterable[int]) -> bool:
    """Whether a measured point depends on ``family``'s parameters in ``model``: the
    workers' stage or the cores' pace sets the pace of one of them (``load_scale``,
    ``serial_s``), or the main process's does (``sharing``). A value that no point depends on is not a fit but a guess
    (points at 14 to 16 workers, all waiting for the main process, say nothing of the
    workers' load): it is not taken."""
    for w in counts:
        pace = model.s_per_batch(w)
        if family == ("sharing",):
            stage = model.main_s(w)
        else:  # the workers' own pace, or the cores' (the load's CPU is most of what they carry)
            stage = max(model.workers_s(w), model.floor_s() or 0.0)
        if stage >= SETS_PACE * pace:
            return True
    return False


def _fit(costs: Costs, family: tuple[str, ...], points: dict[int, float]) -> dict[str, float] | None:
    """The values of ``family`` that fit ``points`` best (least squares of the log ratios),
    among those some point depends on (:func:`_identified`); None where no point has
    workers or none depends on them (nothing for the family to change)."""
    fitted = {w: s for w, s in points.items() if w > 0}
    if not fitted or max(fitted) < SPAN * min(fitted) or len(fitted) < len(family) + 1:
        return None  # too few points, or too close together, to fit the family
    best, best_error = None, math.inf
    edges = (_SCALES[0], _SCALES[-1], _COARSE_SCALES[0], _COARSE_SCALES[-1])
    for values in _candidates(costs, family):
        model = replace(costs, **values)
        if not _identified(model, family, fitted):
            continue
        error = sum(_log_ratio(s, model.s_per_batch(w)) ** 2 for w, s in fitted.items())
        if error < best_error - 1e-12:
            best, best_error = values, error
    if best is not None and best.get("load_scale") in edges:
        return None  # the points ask for a scale beyond any the grid holds: no fit, a symptom (chaotic points)
    return best


#: How every note of the check begins (a diagnosis written before its check kept its notes:
#: :func:`is_check_note`).
_NOTE_OPENINGS = ("the model from the probes ", "the model does not explain ", "the model even corrected ",
                  "the measured points (", "with 0 workers the loop ran at ")


def is_check_note(note: str) -> bool:
    """Whether ``note`` is one the check writes (a replay draws the check again, and says its own)."""
    return note.startswith(_NOTE_OPENINGS)


def _within(measured: float, predicted: float) -> bool:
    return BAND[0] <= measured / predicted <= BAND[1] if predicted > 0 else False


@dataclass
class Check:
    """The model against its measured points.

    Attributes:
        measured: seconds per batch by worker count, as measured.
        probes: the probes' model at each measured count (it uses no point's pace).
        predicted: each count's prediction made without its own measurement (leave one out).
        correction: the fitted values (``load_scale``, ``serial_s``, ``sharing``) and
            ``"fitted"`` (the family's names), or None where the probes' model stands.
        costs: the model from now on: the probes', or corrected and fitted to every point.
        trusted: every measured count within :data:`BAND` of its prediction.
    """

    measured: dict[int, float]
    probes: dict[int, float]
    predicted: dict[int, float]
    costs: Costs
    correction: dict[str, Any] | None = None
    trusted: bool = True
    notes: list[str] = field(default_factory=list)

    def ratios(self, predicted: dict[int, float] | None = None) -> dict[int, float]:
        """Measured over predicted at each count (the leave-one-out predictions by default)."""
        predicted = self.predicted if predicted is None else predicted
        return {w: s / predicted[w] for w, s in self.measured.items() if predicted.get(w)}

    def to_dict(self) -> dict[str, Any]:
        """The check as plain values (the diagnosis JSON's ``model.check``)."""
        return {"band": list(BAND), "measured": {str(w): s for w, s in self.measured.items()},
                "probes": {str(w): s for w, s in self.probes.items()},
                "predicted": {str(w): s for w, s in self.predicted.items()},
                "correction": self.correction, "trusted": self.trusted}


def _describe(correction: dict[str, Any]) -> str:
    parts = []
    if "serial_s" in correction["fitted"]:
        parts.append(f"a resource the workers share, held {correction['serial_s'] * 1e3:.3g} ms a batch")
    if "serial_cv2" in correction["fitted"]:
        cv2 = correction["serial_cv2"]
        parts[-1] += (" the same time every batch (the workers barely queue for it until together they ask more "
                      "than it serves)" if cv2 == 0 else f" for times whose squared coefficient of variation is "
                      f"{cv2:.2g} (1: as irregular as random holds)")
    if "load_scale" in correction["fitted"]:
        parts.append(f"the workers' load at {correction['load_scale']:.2f} times the item probe's")
    if "sharing" in correction["fitted"]:
        parts.append(f"busy workers slowing the main process's own work by {correction['sharing']:.2f} of their "
                     "share of the cores")
    return " and ".join(parts)


def _points_text(measured: dict[int, float], predicted: dict[int, float], counts: Iterable[int]) -> str:
    return "; ".join(f"{w} worker{'' if w == 1 else 's'} {measured[w] * 1e3:.3g} ms measured, "
                     f"{predicted[w] * 1e3:.3g} ms predicted ({measured[w] / predicted[w]:.2f})" for w in counts)


def check_model(costs: Costs, measured: dict[int, float], held_out: dict[int, float] | None = None,
                fit_sharing: bool = True) -> Check:
    """The model checked against ``measured`` (seconds per batch by worker count), and
    corrected where the probes' model misses (see the module's docstring).

    Args:
        costs: the probes' model.
        measured: the points; counts with no finite, positive time are left out.
        held_out: predictions made before a point was measured (the what-if's): reported
            as that point's prediction, since that is what was predicted without it.
        fit_sharing: whether ``sharing`` may be fitted: not where it was measured (the step
            timed alone and beside busy workers), nor where the step the model takes was
            timed beside busy workers already (it holds the sharing then).

    Returns:
        A :class:`Check` (with no point, the probes' model, trusted).
    """
    points = {int(w): float(s) for w, s in measured.items() if s is not None and math.isfinite(s) and s > 0}
    probes = {w: costs.s_per_batch(w) for w in points}
    held_out = {w: p for w, p in (held_out or {}).items() if w in points}
    outside = [w for w in points if not _within(points[w], held_out.get(w, probes[w]))]

    def loo(family: tuple[str, ...]) -> dict[int, float]:
        out = {}
        for w in points:
            values = _fit(costs, family, {v: s for v, s in points.items() if v != w})
            out[w] = (replace(costs, **values) if values else costs).s_per_batch(w)
        return out

    def explained(predicted: dict[int, float]) -> int:
        return sum(_within(points[w], predicted[w]) for w in points if w > 0)

    def worst(predicted: dict[int, float]) -> float:
        return max((abs(_log_ratio(points[w], predicted[w])) for w in points if w > 0), default=0.0)

    # each family judged by how it predicts every point from the others, a held-out one included;
    # inside the band a family must do clearly better (:data:`CLEARLY`), outside it better at all
    margin = TIE if outside else CLEARLY
    choice, choice_loo, choice_error = None, probes, worst(probes)
    for family in FAMILIES:
        if ("sharing" in family and not fit_sharing) or _fit(costs, family, points) is None:
            continue  # a family every point together cannot fit is no correction
        predicted = loo(family)
        error = worst(predicted)
        if error < choice_error - (TIE if choice is not None else margin):
            choice, choice_loo, choice_error = family, predicted, error
    if choice is None and not outside:
        return Check(points, probes, {**probes, **held_out}, costs)
    in_sample = None
    if choice is None:  # no family predicts the points better from the others: one point may be all that shows it
        best_error = worst(probes)
        held = explained(probes)
        for family in FAMILIES:
            values = None if "sharing" in family and not fit_sharing else _fit(costs, family, points)
            if values is None:
                continue
            fitted = {w: replace(costs, **values).s_per_batch(w) for w in points}
            if explained(fitted) < held:
                continue  # a correction that misses points the probes' model held explains less, not more
            error = worst(fitted)
            if error < best_error - TIE:
                in_sample, best_error = family, error
    reported = {**choice_loo, **held_out}  # a held-out point: what was predicted before it was measured
    check = Check(points, probes, reported, costs)
    missed = _points_text(points, {**probes, **held_out}, sorted(outside))
    workers = sorted(w for w in points if w > 0)
    if in_sample is not None:
        values = _fit(costs, in_sample, points) or {}
        check.correction = {"fitted": list(in_sample), **values, "checked": False}
        check.costs = replace(costs, **values)
        check.notes.append(
            f"the model from the probes missed the measured points ({missed}): it is corrected by "
            f"{_describe(check.correction)}, fitted to the measured points; no other point shows it, so the "
            "correction is not checked out of sample (a point beyond it, measured, would check it)")
    elif choice is None and workers and max(workers) < SPAN * min(workers):
        check.notes.append(f"the measured points ({', '.join(map(str, workers))} workers) are too close together to "
                           f"correct the model: a correction needs counts at least {SPAN:g} times apart")
    if choice is not None:
        values = _fit(costs, choice, points) or {}
        check.correction = {"fitted": list(choice), **values, "checked": True}
        check.costs = replace(costs, **values)
        said = (f"missed the measured points ({missed})" if outside else
                "held the measured points only near the band's edge (" + _points_text(
                    points, probes, sorted(w for w in points if w > 0)) + ")")
        check.notes.append(
            f"the model from the probes {said}: it is corrected by "
            f"{_describe(check.correction)}, fitted to the measured points; each point is now predicted from the "
            "others (leave one out) at " + ", ".join(f"{points[w] / choice_loo[w]:.2f}" for w in sorted(points))
            + " of its measurement")
    check.trusted = all(_within(points[w], choice_loo[w]) for w in points if w > 0)
    if 0 in points and not _within(points[0], choice_loo[0]):
        check.notes.append(
            f"with 0 workers the loop ran at {points[0] * 1e3:.3g} ms a batch where the probes add up to "
            f"{choice_loo[0] * 1e3:.3g} ms ({points[0] / choice_loo[0]:.2f}): the main process loads on torch's "
            "threads, the item probe timed one thread as a worker has; speed-ups are taken from the measured pace")
    if not check.trusted:
        still = [w for w in points if w > 0 and not _within(points[w], choice_loo[w])]
        advised = ("the count the corrected model advises, one not measured, is what checks it" if in_sample else
                   "only a worker count that was measured is advised")
        check.notes.append(
            f"the model{' even corrected' if choice else ''} does not explain the measured points "
            f"({_points_text(points, choice_loo, sorted(still))}): its predictions beyond them are not trusted, and "
            + advised)
    return check
