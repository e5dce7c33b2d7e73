"""How busy a GPU is kept by a loader: the busy share predicted from a machine's probes.

A training loop with ``w`` workers is five stages working at once, and runs at the pace
of the slowest (``B`` items a batch)::

    the GPU            step_s                                   (the stall-free step)
    the workers        (B * item_s * slowdown(w) + collate_s) / w
    the pin thread     pin_s                                    (one thread pins each batch)
    the main thread    main_s                                   (receive, launch the step)
    the cores          (B * item_s * slowdown(w) + collate_s + pin_s + main_s) / cores

and the GPU's busy share is ``step_s`` over that pace. With 0 workers the main thread
builds each batch itself while the GPU runs the last step: ``max(step_s, B * item_s +
collate_s + pin_s + main_s)``.

``item_s`` is one item in one process on one thread; ``slowdown(w)`` how much slower each
item is when ``w`` processes make items at once on this machine (shared caches, memory
bandwidth, a clock that drops with load, two hardware threads per core): measured, not
assumed (:func:`feedgpu.measure.feeding.measure_slowdown` on a live machine;
:func:`slowdown_from_loops` from a recorded loop's sweep). Between measured counts it is
interpolated; past the last, extended along its last two points.

The model is an upper bound on the busy share: a pipeline runs at the pace of its slowest
stage only once every queue is full and nothing varies. It also leaves out any wait of the
host for the GPU inside the loop: the main thread's stage is its launch of a step
(``main_s``), so a step that synchronises (``.item()``, a blocking copy, a tensor built on
the device from Python numbers) holds the main thread longer than the model counts. The
recommended step calls no ``.item()`` and, after its first batch, builds nothing on the
device from Python numbers (:func:`feedgpu.workloads.faces_on_gpu.model_input`). It is held to what the recorder
measures (``recommended_loop.json``).

:func:`estimate_recommended` estimates the recommended pipeline
(:mod:`feedgpu.workloads.faces_on_gpu`) on a readings folder that recorded only the plain
one: its copies, pinning and step from the folder, its items from the plain item's cost
times a ratio measured on *this* machine. It says that it is an estimate.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from ..base.checks import check_int, check_number, check_seconds

__all__ = [
    "FeedCosts",
    "Prediction",
    "slowdown_at",
    "predict",
    "predict_by_workers",
    "workers_needed",
    "slowdown_from_loops",
    "LOADER_BOUND",
    "Estimate",
    "estimate_recommended",
    "plain_costs",
    "leave_one_out",
    "what_each_change_buys",
    "largest_ratio_for",
    "UINT8_BATCH_BYTES",
    "FLOAT_BATCH_BYTES",
]

#: Bytes of the faces' batches: 64 crops of 3 x 160 x 160, as uint8 and as float32.
UINT8_BATCH_BYTES = 64 * 3 * 160 * 160
FLOAT_BATCH_BYTES = 4 * UINT8_BATCH_BYTES

#: A recorded loop's row tells the workers' pace only where it ran this much slower than its
#: stall-free step (elsewhere the GPU set the pace, and the workers' is unknown).
LOADER_BOUND = 1.10

#: Headroom the recommended worker count leaves: the workers deliver a batch in at most
#: step / HEADROOM, so a slow batch is absorbed rather than felt.
HEADROOM = 1.25


@dataclass(frozen=True)
class FeedCosts:
    """One loop's costs per batch on one machine (see the module's docstring).

    Attributes:
        step_s: the stall-free step: the step on one batch held in (pinned) memory.
        item_s: one item, in one process, on one thread.
        batch_size: items per batch.
        batch_bytes: bytes of one batch as it is handed over.
        collate_s: what a worker pays per batch beyond its items: stacking the batch into shared memory.
        pin_s: the pin thread's seconds per batch (one thread).
        main_s: the main thread's seconds per batch besides waiting for the GPU (receive, launch).
        cores: the machine's usable cores.
        slowdown: ``{w: factor}``: an item's cost with ``w`` processes making items at once,
            over its cost alone (1.0 at 1 worker; counts not given are interpolated).
        notes: what was not measured, or where a figure comes from.
        main_item_s: one item in the main process on its own threads, where it loads (0
            workers); ``None``: ``item_s``.
    """

    step_s: float
    item_s: float
    batch_size: int
    batch_bytes: int
    collate_s: float
    pin_s: float
    main_s: float
    cores: int
    slowdown: Mapping[int, float] = field(default_factory=dict)
    notes: tuple[str, ...] = ()
    main_item_s: float | None = None

    def __post_init__(self) -> None:
        for name in ("step_s", "item_s", "collate_s", "pin_s", "main_s"):
            check_seconds(name, getattr(self, name))
        check_int("batch_size", self.batch_size, minimum=1)
        check_int("batch_bytes", self.batch_bytes)
        check_int("cores", self.cores, minimum=1)
        for w, factor in self.slowdown.items():
            check_int("slowdown's worker count", w, minimum=1)
            if not check_number("slowdown", factor) > 0:
                raise ValueError(f"slowdown at {w} workers must be a finite number > 0, got {factor!r}")

    @property
    def batch_item_s(self) -> float:
        """Seconds of one batch's items on one thread, alone."""
        return self.batch_size * self.item_s


def slowdown_at(slowdown: Mapping[int, float], workers: int) -> float:
    """The slowdown at ``workers``: measured, else interpolated (1.0 at 1 worker), else
    extended along the last two measured counts (never below the last measured)."""
    if not slowdown:
        return 1.0
    points = sorted({1: 1.0, **{int(k): float(v) for k, v in slowdown.items()}}.items())
    if workers in dict(points):
        return dict(points)[workers]
    for (w0, f0), (w1, f1) in zip(points, points[1:]):
        if w0 < workers < w1:
            return f0 + (f1 - f0) * (workers - w0) / (w1 - w0)
    (w0, f0), (w1, f1) = points[-2], points[-1]
    return max(f1, f1 + (f1 - f0) * (workers - w1) / (w1 - w0))


@dataclass(frozen=True)
class Prediction:
    """The model's loop with ``num_workers`` workers: seconds per batch, busy share, the slowest stage."""

    num_workers: int
    s_per_batch: float
    busy_share: float
    bound_by: str
    stages_s: dict[str, float]
    batch_size: int

    @property
    def images_per_s(self) -> float:
        """Items a second at the predicted pace."""
        return math.nan if self.s_per_batch <= 0 else self.batch_size / self.s_per_batch

    def to_dict(self) -> dict[str, Any]:
        return {"num_workers": self.num_workers, "s_per_batch": self.s_per_batch, "busy_share": self.busy_share,
                "bound_by": self.bound_by, "stages_s": dict(self.stages_s), "batch_size": self.batch_size}


def predict(costs: FeedCosts, num_workers: int) -> Prediction:
    """The model's steady loop with ``num_workers`` workers (see the module's docstring)."""
    w = check_int("num_workers", num_workers)
    items = costs.batch_item_s * slowdown_at(costs.slowdown, w)
    if w == 0:
        items = costs.batch_size * (costs.item_s if costs.main_item_s is None else costs.main_item_s)
        stages = {"the GPU": costs.step_s,
                  "the main thread": items + costs.collate_s + costs.pin_s + costs.main_s}
    else:
        stages = {"the GPU": costs.step_s,
                  "the workers": (items + costs.collate_s) / w,
                  "the pin thread": costs.pin_s,
                  "the main thread": costs.main_s,
                  "the cores": (items + costs.collate_s + costs.pin_s + costs.main_s) / costs.cores}
    bound_by = max(stages, key=lambda k: stages[k])
    pace = stages[bound_by]
    busy = 1.0 if pace <= 0 else costs.step_s / pace
    return Prediction(w, pace, busy, bound_by, stages, costs.batch_size)


def predict_by_workers(costs: FeedCosts, counts: Sequence[int]) -> dict[int, Prediction]:
    """:func:`predict` at each count."""
    return {int(w): predict(costs, w) for w in counts}


def workers_needed(costs: FeedCosts, headroom: float = HEADROOM) -> int:
    """The fewest workers whose batches come ``headroom`` times faster than the step, leaving
    the main thread and its pin thread a core each (at most ``cores - 2``, at least 1): more
    take cores from the main process and buy nothing once the GPU sets the pace."""
    most = max(1, costs.cores - 2)
    for w in range(1, most + 1):
        if predict(costs, w).stages_s["the workers"] * headroom <= costs.step_s:
            return w
    return most


def slowdown_from_loops(loops: Mapping[int, float], costs: FeedCosts,
                        loader_bound: float = LOADER_BOUND) -> dict[int, float]:
    """Each item's slowdown with ``w`` workers, read from a recorded loop's seconds per batch
    ``{w: s}`` where the workers set its pace (``s >= loader_bound x step_s``): the workers
    then made ``B`` items and collated them in ``w x s``, so
    ``slowdown = (w x s - collate_s) / (B x item_s)``. Rows the GPU paced are left out."""
    out = {}
    for w, s in sorted(loops.items()):
        if w >= 1 and s >= loader_bound * costs.step_s:
            out[int(w)] = max(1e-3, (w * s - costs.collate_s) / costs.batch_item_s)
    return out


def leave_one_out(costs: FeedCosts, loops: Mapping[int, float]) -> dict[int, float]:
    """Measured over predicted seconds per batch at each count between two others whose
    slowdown was read: the count's own row left out, its slowdown interpolated from its
    neighbours. How well the model predicts a count the sweep did not time."""
    out = {}
    inner = sorted(costs.slowdown)[1:-1]
    for w in inner:
        others = {k: v for k, v in costs.slowdown.items() if k != w}
        out[w] = loops[w] / predict(replace(costs, slowdown=others), w).s_per_batch
    return out


def plain_costs(readings: Any, batch_bytes: int = FLOAT_BATCH_BYTES, batch_size: int = 64) -> FeedCosts:
    """The plain (recorded) loop's costs from a readings folder: its item on one thread, its
    stall-free step, collate as one thread writing the batch (``host_copy_1thread``), the pin
    thread (:meth:`~feedgpu.readings.Readings.pin_thread_kind`), the main thread's receive from
    its diagnoses where they measured one (else 0, said in ``notes``), its cores, and the
    slowdown its own sweep shows (:func:`slowdown_from_loops`)."""
    if not readings.item_cost_s or readings.stall_free_step_s is None or not readings.loops:
        raise ValueError(f"{readings.name} recorded no loop (item cost, stall-free step and loops are needed)")
    receive = [d["breakdown"]["receive_s"] for d in readings.diagnoses.values()
               if d.get("breakdown", {}).get("receive_s") is not None
               and d.get("settings", {}).get("num_workers", 0) > 0]
    notes = ["the main thread's launch of the step is not recorded: taken as under the step (it paces no loop "
             "that the recorded sweep shows)"]
    if not receive:
        notes.append("no diagnosis with workers measured the main thread's receive: taken as 0")
    base = FeedCosts(step_s=float(readings.stall_free_step_s), item_s=float(readings.item_cost_s["one_thread"]),
                     batch_size=batch_size, batch_bytes=batch_bytes,
                     collate_s=readings.median_at("host_copy_1thread", batch_bytes),
                     pin_s=readings.median_at(readings.pin_thread_kind(), batch_bytes),
                     main_s=max(receive) if receive else 0.0, cores=int(readings.machine.get("cpus") or 1),
                     notes=tuple(notes), main_item_s=readings.item_cost_s.get("all_threads"))
    slowdown = slowdown_from_loops(readings.steady_loop_s(), base)
    if not slowdown:
        notes.append("the slowdown with workers is not measured: no row of the sweep was paced by its workers "
                     "(it would need a count that left the GPU waiting); taken as none, so every count is an "
                     "upper bound")
    return replace(base, slowdown=slowdown, notes=tuple(notes))


@dataclass(frozen=True)
class Estimate:
    """The recommended pipeline on a recorded GPU, estimated (:func:`estimate_recommended`)."""

    readings: str
    ratio: float
    plain: FeedCosts
    recommended: FeedCosts
    measured_plain: dict[int, float]
    by_workers: dict[int, Prediction]
    workers: int
    derivation: tuple[str, ...]

    @property
    def busy_share(self) -> float:
        """The estimated busy share at the recommended worker count."""
        return self.by_workers[self.workers].busy_share

    @property
    def plain_best(self) -> tuple[int, float]:
        """The recorded plain loop's best ``(num_workers, busy share)``."""
        w = min(self.measured_plain, key=self.measured_plain.get)
        return w, self.plain.step_s / self.measured_plain[w]


def estimate_recommended(readings: Any, ratio: float, *, batch_size: int = 64) -> Estimate:
    """The recommended pipeline's busy share on a folder that recorded the plain loop only.

    From the folder: the stall-free step less the pinned copy of the float batch plus that
    of the uint8 one (the step copies its batch); collate and pinning of a uint8 batch from
    its one-thread copies at that size; the main thread's receive; the cores; and each
    item's slowdown with ``w`` workers from its plain loop's sweep. From this machine:
    ``ratio``, the recommended item's cost over the plain item's (both on one thread;
    :func:`feedgpu.measure.feeding.measure_item_ratio`). An estimate: the ratio was
    measured on another CPU, and the slowdown on another kind of item.
    """
    ratio = check_number("ratio", ratio)
    if not ratio > 0:
        raise ValueError(f"ratio must be > 0, got {ratio!r}")
    plain = plain_costs(readings, batch_size=batch_size)
    uint8_bytes = plain.batch_bytes // 4
    copy_saved = readings.median_at("h2d_pinned", plain.batch_bytes) - readings.median_at("h2d_pinned", uint8_bytes)
    rec = replace(plain, step_s=plain.step_s - copy_saved, item_s=plain.item_s * ratio, batch_bytes=uint8_bytes,
                  main_item_s=None if plain.main_item_s is None else plain.main_item_s * ratio,
                  collate_s=readings.median_at("host_copy_1thread", uint8_bytes),
                  pin_s=readings.median_at(readings.pin_thread_kind(), uint8_bytes),
                  notes=plain.notes + (f"an estimate: the item's cost is the recorded plain item's times {ratio:.3f}, "
                                       "measured on another machine; its slowdown with workers is the plain item's",))
    counts = sorted({w for w in plain.slowdown} | {0, 1, max(1, plain.cores - 2)})
    by_workers = predict_by_workers(rec, counts)
    workers = workers_needed(rec)
    by_workers.setdefault(workers, predict(rec, workers))
    derivation = (
        f"step {plain.step_s * 1e3:.2f} ms - pinned copy of {plain.batch_bytes / 1e6:.1f} MB + of "
        f"{uint8_bytes / 1e6:.1f} MB ({copy_saved * 1e3:.2f} ms saved) = {rec.step_s * 1e3:.2f} ms",
        f"item {plain.item_s * 1e3:.3f} ms x ratio {ratio:.3f} = {rec.item_s * 1e3:.3f} ms",
        f"collate {plain.collate_s * 1e3:.2f} -> {rec.collate_s * 1e3:.2f} ms, pin thread {plain.pin_s * 1e3:.2f} -> "
        f"{rec.pin_s * 1e3:.2f} ms (one-thread copies at the batch's bytes)",
        "slowdown by workers (from the plain sweep): "
        + ", ".join(f"{w}: {f:.2f}" for w, f in sorted(plain.slowdown.items())),
    )
    return Estimate(readings.name, ratio, plain, rec, readings.steady_loop_s(), by_workers, workers, derivation)


def largest_ratio_for(readings: Any, share: float = 0.9, *, batch_size: int = 64) -> float:
    """The largest item ratio (the recommended item's cost over the plain item's) for which
    :func:`estimate_recommended` still gives at least ``share`` on ``readings``: a plain
    ratio, to compare with the one measured on the student's machine
    (``measure_item_ratio``), not a factor on it (bisection over 0 to 4; 0.0 where not even
    a free item reaches it)."""
    def reaches(ratio: float) -> bool:
        return estimate_recommended(readings, ratio, batch_size=batch_size).busy_share >= share

    low, high = 1e-6, 4.0
    if not reaches(low):
        return 0.0
    if reaches(high):
        return high
    for _ in range(40):
        mid = (low + high) / 2
        low, high = (mid, high) if reaches(mid) else (low, mid)
    return low


def what_each_change_buys(estimate: Estimate) -> list[tuple[str, Prediction]]:
    """The recorded plain loop at its best count, then one change after another, each
    predicted by the model: ``uint8`` batches (a quarter of the bytes collated, pinned and
    copied), then the recommended item (``decode_jpeg``, crop and flip on tensors, no float
    in the worker: the ratio), then the workers the model asks for (:func:`workers_needed`)."""
    plain, rec = estimate.plain, estimate.recommended
    best, _ = estimate.plain_best
    smaller = replace(plain, step_s=rec.step_s, batch_bytes=rec.batch_bytes, collate_s=rec.collate_s, pin_s=rec.pin_s)
    return [("plain loop, recorded", predict(plain, best)),
            ("+ uint8 batches", predict(smaller, best)),
            ("+ decode_jpeg, crop on tensors, float on the GPU", predict(rec, best)),
            (f"+ {estimate.workers} workers (the model's)", predict(rec, estimate.workers))]
