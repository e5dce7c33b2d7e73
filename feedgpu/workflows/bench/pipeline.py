"""The faces pipeline the course recommends, against the naive one, with the model's speed-ups.

* naive: PIL decode + ``ToTensor`` in the dataset: float32 batches (46 MB for 64 faces).
* recommended: ``torchvision.io.decode_jpeg``, ``uint8`` batches across processes (a
  quarter of the bytes to hand over), the conversion to float left to where the step runs
  (on a GPU it is nearly free, so it is not timed here).

Both with 0 workers (PyTorch's default threads, what a student gets) and 2 workers. The
budget: recommended with 2 workers at least 2.5x the naive default.

The model is :func:`feedgpu.models.pipeline.steady_state_time_per_batch` with the usable cores (the
main process's receiving needs a core too), fed with costs measured in one process on
one thread: ``load_s``, a batch built with 0 workers; and the hand-over of that batch
through shared memory, split between the sides that pay it
(:func:`feedgpu.measure.transfer.shared_memory_handover_s`): ``transfer_s``, what the
worker pays more than a single process to write it (a fresh shared segment against fresh
private memory, written and freed), and ``receive_s``, what the main process pays to map
it and, once dropped, free its pages. (Charging the worker's cost to both sides, as for a
pickled batch, made the model predict 1.26-1.38x for the naive pipeline where 1.54-1.77x
was measured: the main process maps a shared tensor, it does not copy it.) Its predicted
2-worker speed-up (against 0 workers on one thread) is compared with the measured one;
budget: within 15%.
"""

from __future__ import annotations

import statistics
import time

from . import Figure, figure

BATCH_SIZE = 64
BATCHES = 20
ROUNDS = 3


def bench_pipeline() -> list[Figure]:
    """Naive vs recommended faces loader, 0 and 2 workers; the model's 2-worker speed-ups."""
    import torch
    from torch.utils.data import DataLoader

    import lfw_dataset
    from feedgpu.measure.machine import usable_cores
    from feedgpu.measure.timing import time_loader
    from feedgpu.measure.transfer import shared_memory_handover_s
    from feedgpu.models.pipeline import steady_state_time_per_batch
    from feedgpu.workloads.lfw import TensorLFWDataset

    root = lfw_dataset.default_root("synthetic")
    pipelines = {"naive": (lfw_dataset.LFWDataset(root, transform=lfw_dataset.default_transform()), torch.float32),
                 "recommended": (TensorLFWDataset(root), torch.uint8)}
    default_threads = torch.get_num_threads()
    cores = usable_cores()
    settings = [(0, default_threads), (0, 1), (2, 1)]
    rates: dict[tuple[str, int, int], list[float]] = {}
    try:
        for _ in range(ROUNDS):  # interleaved, so a slow spell of the machine hits every setting
            for name, (dataset, _) in pipelines.items():
                for workers, threads in settings:
                    torch.set_num_threads(threads)
                    loader = DataLoader(dataset, batch_size=BATCH_SIZE, shuffle=True, num_workers=workers,
                                        generator=torch.Generator().manual_seed(0))
                    timing = time_loader(loader, batches=BATCHES, warmup=2, repeats=1)
                    rates.setdefault((name, workers, threads), []).append(timing.items_per_s)
        torch.set_num_threads(1)
        handover = {name: shared_memory_handover_s((BATCH_SIZE, 3, 250, 250), dtype)
                    for name, (_, dtype) in pipelines.items()}
    finally:
        torch.set_num_threads(default_threads)
    rate = {k: statistics.median(v) for k, v in rates.items()}
    note = f"batch {BATCH_SIZE}, median of {ROUNDS} interleaved rounds"
    out = []
    for name in pipelines:
        out += [figure(f"pipeline {name}, 0 workers, {default_threads} threads", rate[(name, 0, default_threads)],
                       "images/s", note),
                figure(f"pipeline {name}, 0 workers, 1 thread", rate[(name, 0, 1)], "images/s", note),
                figure(f"pipeline {name}, 2 workers", rate[(name, 2, 1)], "images/s", note)]
        load_s = BATCH_SIZE / rate[(name, 0, 1)]
        send_s, receive_s = handover[name].send_s, handover[name].receive_s
        predicted = load_s / steady_state_time_per_batch(2, load_s, 0.0, send_s, cores=cores, receive_s=receive_s)
        measured = rate[(name, 2, 1)] / rate[(name, 0, 1)]
        out += [figure(f"pipeline {name}: hand-over per batch, worker", send_s * 1e3, "ms",
                       "fresh shared memory written, minus fresh private memory written and freed"),
                figure(f"pipeline {name}: hand-over per batch, main process", receive_s * 1e3, "ms",
                       "next() of a ready batch, plus freeing its shared pages"),
                figure(f"pipeline {name}: 2-worker speed-up, measured", measured, "x", "against 0 workers, 1 thread"),
                figure(f"pipeline {name}: 2-worker speed-up, model", predicted, "x",
                       f"steady_state_time_per_batch(2, load, 0, send, cores={cores}, receive_s=receive)"),
                figure(f"pipeline {name}: model / measured", predicted / measured, "x", "budget 0.85 to 1.15")]
    out.append(figure("pipeline recommended 2 workers / naive default", rate[("recommended", 2, 1)]
                      / rate[("naive", 0, default_threads)], "x", "budget >= 2.5 on 2 cores"))
    return out


#: The simulated accelerator's step for :func:`bench_feeding`, and the batches timed.
FEEDING_STEP_S = 0.030
FEEDING_BATCHES = 16


def _token(images):
    """What the simulated accelerator is handed for a batch: one float per item. It only waits
    ``step_s`` (no model), as a GPU would run the step, with the conversion to float on it; the
    whole batch would cost the host its fingerprint (tens of ms for 64 crops), which a GPU does
    not ask for."""
    return images[:, :1, :1, :1].float()


def _busy_share(loader, step_s: float, batches: int) -> float:
    """The simulated accelerator's busy share over ``batches`` batches of ``loader``, after a warm-up."""
    from feedgpu.base.processes import shutdown_workers
    from feedgpu.models.accelerator import AsyncAccelerator

    iterator = iter(loader)
    try:
        with AsyncAccelerator(step_s) as device:
            fed = device.feed(iterator)  # records each wait in next()
            for _ in range(2 * max(1, loader.num_workers)):  # every worker's first batch: start-up, not steady
                images, labels = next(fed)
                device.step(_token(images), labels)
            start = time.perf_counter()
            for _ in range(batches):
                images, labels = next(fed)
                device.step(_token(images), labels)
            device.step(_token(images), labels).item()  # the queue drained
            return device.breakdown(start, time.perf_counter()).busy_share
    finally:
        shutdown_workers(iterator)


def bench_feeding() -> list[Figure]:
    """The course's recommended faces loader against the plain one (:mod:`feedgpu.workloads.faces_on_gpu`),
    2 workers each, feeding the simulated accelerator (a 30 ms step that, as on a GPU, includes
    the recommended batch's conversion to float: :func:`_token`), and the busy share the model
    (:mod:`feedgpu.models.feeding`) predicts for each from probes taken first: the item on one
    thread, collating a batch and handing it over through shared memory, and the slowdown of
    2 processes at once."""
    from dataclasses import replace

    import torch

    from feedgpu.measure.feeding import measure_item_ratio, measure_loader_costs
    from feedgpu.models.feeding import predict
    from feedgpu.workloads import faces_on_gpu as faces

    workers = 2
    ratio = measure_item_ratio(items=32, rounds=3)
    plain_ds, rec_ds = faces.plain_dataset(), faces.recommended_dataset()
    out, threads = [], torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        for name, dataset, item_s in (("plain", plain_ds, ratio.plain_s),
                                      ("recommended", rec_ds, ratio.recommended_s)):
            loading = measure_loader_costs(dataset, 64, counts=[workers], pin=False)
            costs = replace(loading, step_s=FEEDING_STEP_S, item_s=item_s)  # the item: the interleaved rounds'
            predicted = predict(costs, workers)
            loader = torch.utils.data.DataLoader(dataset, batch_size=64, shuffle=True, num_workers=workers,
                                                 persistent_workers=True, drop_last=True)
            measured = _busy_share(loader, FEEDING_STEP_S, FEEDING_BATCHES)
            note = f"{workers} workers, a {FEEDING_STEP_S * 1e3:.0f} ms step, {FEEDING_BATCHES} batches"
            out += [figure(f"feeding {name}: busy share, measured", measured, "", note),
                    figure(f"feeding {name}: busy share, model", predicted.busy_share, "",
                           f"predicted before the loop ran; slowest stage: {predicted.bound_by}"),
                    figure(f"feeding {name}: measured / model", measured / predicted.busy_share, "x",
                           "budget 0.85 to 1.15")]
    finally:
        torch.set_num_threads(threads)
    shares = {f["name"]: f["value"] for f in out}
    out.append(figure("feeding recommended / plain busy share", shares["feeding recommended: busy share, measured"]
                      / shares["feeding plain: busy share, measured"], "x",
                      f"the item ratio here {ratio.ratio:.2f} ({ratio.low:.2f}-{ratio.high:.2f})"))
    return out
