"""The capstone (notebook 09): how busy the simulated accelerator is before and after the fixes.

The face-training loop of :mod:`feedgpu.workloads.face_training` on an
:class:`~feedgpu.models.accelerator.AsyncAccelerator` with its 30 ms step, all in one run:

* the slow loop (``slow_loader`` + ``slow_train_epoch``, all seven planted bottlenecks),
  over its first :data:`SLOW_STEPS` steps (after the first, which also opens the index,
  its steps all look alike: the main process loads every batch while the device waits);
  target: busy at most 0.4 of the time;
* the fixed loop (``fixed_loader`` + ``fixed_train_epoch``), two epochs with persistent
  workers under this machine's default start method; the second epoch is the one
  compared (the first also starts the workers, each opening the index); target: busy
  at least 0.85;
* its stall-free bound: the same loop and model fed the batches of one epoch from memory
  (the last epoch's, kept by ``Keeping``), so no step can wait for data; bound / fixed epoch says how close the
  fixed loop comes (1.0: no stall at all);
* the fixed loop once more under *spawn* (macOS, Windows), two epochs, the second
  compared: spawned workers import torch (and open the index) before their first batch,
  which the first epoch pays and the second does not.

Validation accuracy after the two fixed epochs shows that the fixed loop still trains.
"""

from __future__ import annotations

import gc
import multiprocessing as mp
import time
import warnings
from typing import Any

from . import Figure, figure

SLOW_STEPS = 20
EPOCHS = 2


def _fixed_epochs(train: list, classes: int, context: str | None) -> tuple[list[dict], Any, Any]:
    """Two epochs of the fixed loop on a fresh model: (rows, the loader kept in a
    :class:`~feedgpu.workloads.face_training.Keeping` with the last epoch's batches, model).
    The loader keeps its persistent workers until it is collected: the caller drops it."""
    import torch

    from feedgpu.models.accelerator import AsyncAccelerator
    from feedgpu.workloads import face_training as ft

    torch.manual_seed(ft.SEED)  # the same initial model every run: the accuracy is comparable
    model = ft.TinyFaceClassifier(classes)
    loader = ft.fixed_loader(train)
    if context is not None:
        loader.multiprocessing_context = context
    keeping = ft.Keeping(loader)
    with AsyncAccelerator(ft.STEP_S, model) as device:
        rows = ft.run_epochs(keeping, ft.fixed_train_epoch, device, epochs=EPOCHS)
    return rows, keeping, model


def bench_capstone() -> list[Figure]:
    """Busy share of the slow loop and of the fixed one (fork and spawn), and the stall-free bound."""
    import numpy as np

    from feedgpu.models.accelerator import AsyncAccelerator
    from feedgpu.workloads import face_training as ft

    records = ft.face_records()
    train, val = ft.split_records(records)
    classes = len({r["label"] for r in records})
    step_ms = ft.STEP_S * 1e3
    out: list[Figure] = []

    with AsyncAccelerator(ft.STEP_S, ft.TinyFaceClassifier(classes)) as device:
        slow = ft.run_epochs(ft.FirstBatches(ft.slow_loader(train), SLOW_STEPS), ft.slow_train_epoch, device)[0]
    slow_step_s = slow["wall_s"] / slow["steps"]
    out += [figure("capstone slow loop: busy share", slow["busy_share"], "",
                   f"first {slow['steps']} steps, {step_ms:g} ms step, 0 workers; target <= 0.4"),
            figure("capstone slow loop: waiting-for-data share", slow["waiting_share"], ""),
            figure("capstone slow loop: other share", slow["other_share"], "",
                   f"{slow['syncs']} synchronisations in {slow['steps']} steps"),
            figure("capstone slow loop: time per step", slow_step_s * 1e3, "ms")]

    with warnings.catch_warnings():  # more workers than cores, on purpose: the items wait
        warnings.filterwarnings("ignore", message="This DataLoader will create")
        method = mp.get_start_method()
        rows, keeping, model = _fixed_epochs(train, classes, None)
        truth, predicted = ft.evaluate(model, val)
        with AsyncAccelerator(ft.STEP_S, model) as device:  # the last epoch's batches, from memory
            bound = ft.run_epochs(keeping.batches, ft.fixed_train_epoch, device)[0]
        workers = keeping.loader.num_workers
        del keeping  # the loader's iterator stops its persistent workers when collected
        gc.collect()
        first, last = rows[0], rows[-1]
        fixed_step_s = last["wall_s"] / last["steps"]
        note = f"{workers} persistent workers, {method}"
        out += [figure("capstone fixed loop: busy share, epoch 1", first["busy_share"], "",
                       note + "; the workers start and open the index"),
                figure(f"capstone fixed loop: busy share, epoch {EPOCHS}", last["busy_share"], "",
                       note + f"; {last['steps']} steps, {last['syncs']} synchronisations; target >= 0.85"),
                figure(f"capstone fixed loop: waiting-for-data share, epoch {EPOCHS}", last["waiting_share"], ""),
                figure(f"capstone fixed loop: epoch {EPOCHS} time", last["wall_s"], "s"),
                figure("capstone stall-free bound: epoch time", bound["wall_s"], "s",
                       f"the same loop fed from memory; busy share {bound['busy_share']:.2f}"),
                figure(f"capstone bound / fixed epoch {EPOCHS}", bound["wall_s"] / last["wall_s"], "x",
                       "1.0: the fixed loop never waits for data"),
                figure("capstone slow / fixed time per step", slow_step_s / fixed_step_s, "x",
                       f"{slow_step_s * 1e3:.0f} ms vs {fixed_step_s * 1e3:.0f} ms"),
                figure("capstone validation accuracy", float(np.mean(truth == predicted)), "",
                       f"{len(val)} faces of {classes} people, after {EPOCHS} fixed epochs")]

        start = time.perf_counter()
        rows, loader, _ = _fixed_epochs(train, classes, "spawn")
        seconds = time.perf_counter() - start
        del loader
        gc.collect()
    out += [figure("capstone fixed loop under spawn: busy share, epoch 1", rows[0]["busy_share"], "",
                   f"{workers} persistent workers, spawn: each imports torch and opens the index first"),
            figure(f"capstone fixed loop under spawn: busy share, epoch {EPOCHS}", rows[-1]["busy_share"], "",
                   f"target >= 0.85; both epochs took {seconds:.1f} s")]
    return out


__all__ = ["bench_capstone"]
