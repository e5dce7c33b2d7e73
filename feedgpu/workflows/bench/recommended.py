"""The course's recommended faces loop on a live GPU, predicted and then measured (``recommended_loop.json``).

:func:`record_recommended` is what ``feedgpu-record`` runs by default on a GPU
(``--no-recommended`` skips it). In this order, so that the prediction is made before the
loop it predicts is run:

1. the probes of :func:`feedgpu.measure.feeding.measure_feed_costs` on the recommended
   loader (:func:`feedgpu.workloads.faces_on_gpu.recommended_loader`) and the course's step
   (:class:`~feedgpu.workloads.faces_on_gpu.ResNetStep`, ``input="uint8"``: the conversion
   to float on the GPU is part of its stall-free step);
2. the model's busy share by worker count (:mod:`feedgpu.models.feeding`), and the count
   it recommends;
3. the recommended loop by ``num_workers`` (the recorder's steady loops, persistent
   workers), and the plain loop (:func:`~feedgpu.workloads.faces_on_gpu.plain_loader`, the
   recorded ``gpu_case.py``) at the same counts, each with its own stall-free step.

Needs CUDA; the recorder's tests replace it (:class:`feedgpu.workflows.bench.record.Instruments`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

__all__ = ["ABOUT", "record_recommended", "loop_summary"]

ABOUT = ("The course's recommended faces loop (feedgpu.workloads.faces_on_gpu.recommended_loader: decode_jpeg, "
         "uint8 batches, crop and flip on tensors, float and normalise on the GPU, persistent workers) and the "
         "plain one (plain_loader, the recorded gpu_case.py), each feeding the course's resnet18 step (ResNetStep). "
         "predicted_busy_share was computed from the probes before either loop ran.")


def loop_summary(rows: Sequence[dict[str, Any]], stall_free_step_s: float, batch_size: int) -> dict[str, Any]:
    """``busy_share`` (the stall-free step over the loop's seconds per batch) and ``images_per_s``
    by ``num_workers`` (keys as strings, as JSON keeps them), from loops that did not synchronise
    each step; and the best count."""
    steady = [r for r in rows if not r.get("synced_each_step")]
    busy = {str(r["num_workers"]): stall_free_step_s / r["s_per_batch"] for r in steady}
    images = {str(r["num_workers"]): batch_size / r["s_per_batch"] for r in steady}
    best = max(busy, key=busy.get) if busy else None
    return {"busy_share": busy, "images_per_s": images, "best_workers": None if best is None else int(best),
            "best_busy_share": None if best is None else busy[best]}


def record_recommended(workers: Sequence[int], synchronize: Callable[[], None],
                       measure_loop: Callable[..., dict[str, Any]], *, batches: int = 80, steps: int = 60,
                       root: Any = None, batch_size: int | None = None,
                       make_step: Callable[[str], Callable[[Any], Any]] | None = None,
                       say: Callable[[str], None] = print) -> dict[str, Any]:
    """Probe, predict, then run the recommended loop and the plain one (see the module's docstring).

    Args:
        workers: the ``num_workers`` to run (the model's recommended count is added).
        synchronize: ``torch.cuda.synchronize``.
        batches: timed batches of each loop.
        steps: steps of each stall-free step.
        measure_loop: how a loop is timed: the recorder's
            :func:`~feedgpu.workflows.bench.record.measure_loop` (which calls this).
        root: the faces' folder (default :func:`~feedgpu.workloads.faces_on_gpu.faces_root`).
        batch_size: the loaders' (default the recorded loop's, 64).
        make_step: ``input -> step`` for ``"uint8"`` and ``"float"`` batches (default
            :class:`~feedgpu.workloads.faces_on_gpu.ResNetStep`; the tests pass a cheap one).

    Returns:
        ``recommended_loop.json``'s document (``readings/README.md`` describes it).
    """
    from ...measure.feeding import measure_feed_costs
    from ...models.feeding import predict_by_workers, workers_needed
    from ...workloads import faces_on_gpu as faces

    size = faces.BATCH_SIZE if batch_size is None else batch_size
    make_step = make_step or (lambda input: faces.ResNetStep(input=input))
    rec_loader = faces.recommended_loader(root, num_workers=0, batch_size=size)
    rec_step = make_step("uint8")
    say("the recommended loop: probes (items, slowdown with workers, collate, pinning, the step)")
    costs = measure_feed_costs(rec_loader, rec_step, synchronize, counts=[w for w in workers if w > 1], steps=steps)
    needed = workers_needed(costs)
    counts = sorted(set(workers) | {needed})
    predicted = predict_by_workers(costs, counts)
    say(f"predicted: {needed} workers, busy share {predicted[needed].busy_share:.2f} (before the loop runs)")
    rec_rows = [measure_loop(rec_loader, rec_step, synchronize, num_workers=w, synced=False, batches=batches)
                for w in counts]
    plain_loader = faces.plain_loader(root, num_workers=0, batch_size=size)
    plain_step = make_step("float")
    say("the plain loop (gpu_case.py's) at the same counts")
    plain_costs = measure_feed_costs(plain_loader, plain_step, synchronize, counts=[], steps=steps)
    plain_rows = [measure_loop(plain_loader, plain_step, synchronize, num_workers=w, synced=False, batches=batches)
                  for w in counts]
    return {
        "about": ABOUT,
        "batch_size": costs.batch_size,
        "batch_bytes": costs.batch_bytes,
        "stall_free_step_s": costs.step_s,
        "probes": {"item_s": costs.item_s, "collate_s": costs.collate_s, "pin_s": costs.pin_s,
                   "main_s": costs.main_s, "cores": costs.cores,
                   "slowdown": {str(w): f for w, f in sorted(costs.slowdown.items())}},
        "predicted_busy_share": {"best": predicted[needed].busy_share, "workers": needed,
                                 "by_workers": {str(w): p.busy_share for w, p in predicted.items()},
                                 "bound_by": {str(w): p.bound_by for w, p in predicted.items()}},
        "loops": rec_rows,
        **loop_summary(rec_rows, costs.step_s, costs.batch_size),
        "plain": {"stall_free_step_s": plain_costs.step_s, "batch_bytes": plain_costs.batch_bytes,
                  "item_s": plain_costs.item_s, "loops": plain_rows,
                  **loop_summary(plain_rows, plain_costs.step_s, plain_costs.batch_size)},
    }
