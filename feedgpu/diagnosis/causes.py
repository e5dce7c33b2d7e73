"""The vocabulary of causes, and how causes are named from the evidence (:mod:`.evidence`).

Causes are named from what a run measured, never from the loader's settings alone (0
workers over items that cost nothing is healthy). The ids are stable (:data:`CAUSES`);
the thresholds are constants of :mod:`.evidence`, stated here and in the README:

* ``input-bound`` when the data-wait share of the step's wall time is at least
  :data:`INPUT_BOUND_SHARE` (20%), else ``compute-bound``. TensorFlow's input-pipeline
  analyser calls a program highly input-bound from 20% of step time waiting for input,
  moderately from 5% (:data:`MODERATE_SHARE`; ``kHighlyInfeedBoundThresholdInPercent`` and
  ``kModeratelyInfeedBoundThresholdInPercent`` in its
  ``op_stats_to_input_pipeline_analysis.cc``); the text says "moderately" between the two.
* When the loop is input-bound with 0 workers, ``main-process-loading``: the main
  process loads every batch itself. Unless the loop, measured with workers, ran no faster
  at any count (within 5%) and still waited for data there, the main process busy
  receiving (its CPU inside ``next()`` at least :data:`HAND_OVER_SHARE` of the wait): a
  batch then costs more to hand over than to make, and ``hand-over`` is named instead,
  with the measured points.
* When the loop is input-bound with workers, the wait is the main process receiving
  (``hand-over``: its thread's CPU time inside ``next()`` is at least
  :data:`HAND_OVER_SHARE` of the wait), or the workers: ``cpu-saturated`` when they
  compute (each worker's CPU time is at least :data:`COMPUTING_SHARE` of the wall time)
  and no core is left (the machine idle less than :data:`IDLE_SHARE` of its cores'
  time, or this loop's processes use at least :data:`OWN_CPU_SHARE` of them), else
  ``too-few-workers`` (items that wait, or cores still idle, leave room for more).
  Computing workers that each keep more than one thread busy (at least
  :data:`THREADS_PER_WORKER` on average: each thread ran a tenth of the timed span,
  :mod:`~feedgpu.diagnosis.sensing.threads`), more threads in all than the cores, and no core left are
  ``thread-oversubscription`` instead: their BLAS, OpenMP or OpenCV pools take turns on
  the cores (PyTorch's own pool has one thread in a worker), where this process has such a
  pool of more than one thread (threadpoolctl; a forked worker inherits its size). Workers
  whose items read
  (at least :data:`READ_MIN_BYTES` per item, counted by the kernel, :mod:`~feedgpu.diagnosis.sensing.io_counters`) and
  that together read less than :data:`STORAGE_SHARE` of what as many processes would read
  alone (one process's rate, timed in the item probe, times the workers) are
  ``storage-bound`` instead of ``too-few-workers``: they queue on one storage channel at
  its limit (a network file system, a cold cache, a throttled disk), and more workers
  would queue too. One worker cannot show it: its rate is one process's either way.
  Where the kernel counts the workers' block I/O wait (delay accounting,
  :func:`~feedgpu.diagnosis.sensing.io_counters.io_wait_s`), its share joins the sentence; it names nothing alone.
* ``serialised`` instead of ``too-few-workers``: the measured points show that adding
  workers gains little. Between two measured counts ``a < b``, where the loop at ``a``
  waited (:data:`INPUT_BOUND_SHARE`), ``b`` workers cut the time per batch by less than
  :data:`SERIAL_GAIN` of what as many independent workers would (``a``'s pace times ``a /
  b``, no faster than the main process's part of ``a``'s batch), although that would have
  been a gain of at least :data:`SERIAL_MIN_GAIN` of the batch; the cores were not full at
  ``b`` (idle at least :data:`IDLE_SHARE` of their time), the main process was not busy
  receiving (its CPU inside ``next()`` under :data:`HAND_OVER_SHARE` of the wait: else the
  resource is the main process, ``hand-over``), and the workers' CPU per batch did
  not grow by more than :data:`SERIAL_CPU_GROWTH` (more CPU for the same batch is workers
  contending for the cores or the memory, not waiting); and nothing shows as reads (an
  item reads less than :data:`READ_MIN_BYTES`). The workers then wait on one resource
  they share: a lock, one file handle or connection, a service limited to so many
  requests a second. Where the items do read, the same points name ``storage-bound``.
* ``worker-start-up``: without persistent workers, starting them (the first batch's
  time beyond one batch's cost) is at least :data:`START_UP_SHARE` of an epoch.
* ``memory-growth``: what an epoch will cost each worker. The growth must first be
  measurable: each worker's USS grew at least :data:`GROWTH_MB` over the timed batches
  (a worker that copies nothing adds ~0.1-0.3 MB in all on the course's machine), and at
  least twice what the batches a worker holds at once can explain (``prefetch_factor +
  1`` batches: a worker of 8 MB batches measured 28 to 40 MB of USS a few hundred
  milliseconds apart, with nothing copied). It is then projected over an epoch (the
  growth per item times the items each worker reads in one: the dataset's length over
  the workers) and named from :data:`EPOCH_GROWTH_MB` per worker, the figure and its
  share of the machine's memory in the sentence. (A fixed rate per item missed notebook
  06's case: 7 KB per item over 1,300 items, but hundreds of thousands of items in an
  epoch.) A dataset without a length is judged by the rate, :data:`GROWTH_KB_PER_ITEM`
  per item (two 4 KiB pages). A worker's first allocations (decoders, buffers, lazily
  opened files) are left out of the growth: the timed batches start after two batches
  per worker. Where the growth per item is at least :data:`CACHE_SHARE` of the bytes one
  item holds (its arrays and tensors), the worker keeps the items themselves: a cache of
  its own, not copy-on-write, and the sentence and the advice say so.
* ``main-thread-work``: the step's own CPU work in this process (its thread's CPU time per
  batch, ``time.thread_time``) is at least :data:`MAIN_WORK_SHARE` of the loop's time per
  batch (and :data:`MAIN_WORK_MIN_S`), while the accelerator idles at least that share.
  The accelerator's part of a step is the step's time off the CPU when it runs *alone*,
  before any worker starts (a step that waits for its device, as ``loss.item()`` does):
  beside busy workers a step also loses time to them, which is no accelerator. A step
  that alone is CPU through and through (:data:`DEVICE_MIN_SHARE` of its time or less off
  the CPU) is training on the CPU, or an asynchronous GPU step whose device time the host
  cannot see without synchronising: not named. (CUDA events around a step are no help:
  they span the host's work inside it too.)
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from .evidence import (CACHE_SHARE, COMPUTING_SHARE, DEVICE_MIN_SHARE, EPOCH_GROWTH_MB, Evidence, GROWTH_KB_PER_ITEM,
                       GROWTH_MB, HAND_OVER_SHARE, IDLE_SHARE, INPUT_BOUND_SHARE, MAIN_WORK_MIN_S, MAIN_WORK_SHARE,
                       MODERATE_SHARE, OWN_CPU_SHARE, READ_MIN_BYTES, SERIAL_CPU_GROWTH, SERIAL_GAIN,
                       SERIAL_MIN_GAIN, START_UP_SHARE, THREADS_PER_WORKER, ms, pct)

__all__ = ["CAUSES", "Finding", "verdict_of", "band_of", "find_causes"]

#: Every cause the diagnosis can name: its id and what it means.
CAUSES: dict[str, str] = {
    "main-process-loading": "0 workers while loading costs time: the main process loads each batch, then steps",
    "too-few-workers": "the workers are the bottleneck, and the waiting or the idle cores leave room for more",
    "cpu-saturated": "the workers compute and no core is left: more workers cannot help; make items cheaper",
    "thread-oversubscription": "each worker runs a pool of threads (BLAS, OpenMP, OpenCV) on cores that are all busy",
    "storage-bound": "the workers read through a storage channel at its limit: more workers would only queue on it",
    "serialised": "more workers gain little while cores idle and nothing is read: they wait on one resource they share",
    "hand-over": "the main process spends the time receiving batches (pickled numpy, float64, huge batches)",
    "worker-start-up": "the workers are started again every epoch and that costs a large part of it",
    "memory-growth": "the workers' private memory (USS) grows as they read: copy-on-write of Python objects",
    "main-thread-work": "CPU work in the loop's own thread, beside the step's device work, keeps the accelerator waiting",
}


@dataclass
class Finding:
    """One cause found: its id (a key of :data:`CAUSES`), the evidence in a sentence,
    and what to change in words."""

    cause: str
    sentence: str
    advice: str


def verdict_of(data_wait_share: float) -> str:
    """``"input-bound"`` from :data:`INPUT_BOUND_SHARE` of waiting, else ``"compute-bound"``."""
    return "input-bound" if data_wait_share >= INPUT_BOUND_SHARE else "compute-bound"


def band_of(data_wait_share: float) -> str:
    """The input-pipeline analyser's words: highly, moderately or not input-bound."""
    if data_wait_share >= INPUT_BOUND_SHARE:
        return "highly input-bound"
    return "moderately input-bound" if data_wait_share >= MODERATE_SHARE else "not input-bound"


def _wait_cause(ev: Evidence) -> Finding:
    """Why an input-bound loop with workers waits: the hand-over, the cores, or too few workers."""
    if math.isfinite(ev.receive_share) and ev.receive_share >= HAND_OVER_SHARE:
        kind = ("numpy arrays or Python objects are pickled and unpickled" if ev.pickled is not False
                else "tensors this large take long to map and free")
        advice = ("Return one tensor per batch from collate_fn (default_collate stacks the items straight into "
                  "shared memory, so only a handle crosses), in uint8 rather than float64 where you can."
                  if ev.pickled is not False else
                  "Send less per batch: uint8 instead of float32 or float64, smaller images, or fewer items.")
        return Finding("hand-over", f"The main process spends {ms(ev.main_next_cpu_s)} of CPU receiving each batch "
                       f"({pct(ev.receive_share)} of its {ms(ev.wait_s)} wait): {kind}, on the one main process, "
                       "however many workers there are.", advice)
    computing = math.isfinite(ev.worker_cpu_share) and ev.worker_cpu_share >= COMPUTING_SHARE
    no_core_left = (math.isfinite(ev.idle_share) and ev.idle_share < IDLE_SHARE) or (
        math.isfinite(ev.own_cpu_share) and ev.own_cpu_share >= OWN_CPU_SHARE)
    threads = ev.worker_threads
    pools = not math.isfinite(ev.pool_threads) or ev.pool_threads >= 2
    if (computing and no_core_left and pools and math.isfinite(threads) and threads >= THREADS_PER_WORKER
            and ev.num_workers * threads > ev.cores):
        return Finding("thread-oversubscription", f"Each of the {ev.num_workers} workers keeps {threads:.1f} threads "
                       f"busy, about {ev.num_workers * threads:.0f} threads on {ev.cores} cores that are all busy "
                       f"(this loop uses {pct(ev.own_cpu_share)} of them): a thread pool in each worker (numpy's "
                       "BLAS, OpenMP, OpenCV) starts one thread per core, and the threads take turns and wait for "
                       "each other. PyTorch keeps its own pool at one thread in a worker; these pools it leaves alone.",
                       "Keep every pool at one thread in each worker: a worker_init_fn that calls "
                       "threadpoolctl.threadpool_limits(1) (and cv2.setNumThreads(1) for OpenCV); OMP_NUM_THREADS "
                       "and its kin come too late after fork, unless set before the program starts.")
    if computing and no_core_left:
        return Finding("cpu-saturated", f"Each of the {ev.num_workers} workers computes ({pct(ev.worker_cpu_share)} "
                       f"of its time on a CPU) and the cores are full: this loop uses {pct(ev.own_cpu_share)} of "
                       f"{ev.cores} cores and the machine was idle {pct(ev.idle_share)} of the time. More workers "
                       "would only share the same cores.",
                       "Make each item cheaper: decode with torchvision.io.decode_jpeg, store images at the size you "
                       "train on, move augmentation to the accelerator, cache decoded items; or use a machine with "
                       "more cores. No loader setting fixes it.")
    flat = _flat_scaling(ev)
    reads = math.isfinite(ev.item_read_bytes) and ev.item_read_bytes >= READ_MIN_BYTES
    if flat is not None and not reads:
        return _serialised_finding(ev, flat)
    if not computing and (ev.storage_limited or (flat is not None and reads)):
        if not ev.storage_limited:  # one worker's rate is one process's: the points show the limit
            return _serialised_finding(ev, flat, storage=True)
        return Finding("storage-bound", f"The {ev.num_workers} workers read {_rate(ev.read_per_s)} together, "
                       f"{ev.read_per_s / ev.item_read_per_s:.1f} times what one process reads alone "
                       f"({_rate(ev.item_read_per_s)}, {_mb(ev.item_read_bytes / 2**20)} an item), where "
                       f"{ev.num_workers} independent readers would read {ev.num_workers} times as much: they queue on "
                       f"one storage channel at its limit, and the loop waits {ms(ev.wait_s)} per batch for it."
                       + (f" The kernel counts each worker waiting for block I/O {pct(ev.io_wait_share)} of its time."
                          if math.isfinite(ev.io_wait_share) else ""),
                       "More workers would queue too. Read less or from faster storage: copy the data to a local "
                       "disk or into memory first, cache what you read, store smaller items (images at the size "
                       "you train on), or read large shards sequentially instead of many small files.")
    room = (f"the items wait ({pct(ev.worker_cpu_share)} of a worker's time is CPU)" if not computing
            else f"{pct(ev.idle_share)} of the cores' time was idle")
    return Finding("too-few-workers", f"The {ev.num_workers} {'worker' if ev.num_workers == 1 else 'workers'} cannot keep up: the loop waits "
                   f"{ms(ev.wait_s)} per batch, and {room}, so more workers can load at the same time.",
                   "Raise num_workers.")


def _measured(point: dict[str, Any], key: str) -> float:
    value = point.get(key)
    return float(value) if isinstance(value, (int, float)) and value is not None else math.nan


def _flat_scaling(ev: Evidence) -> tuple[dict[str, Any], dict[str, Any]] | None:
    """Two measured counts ``a < b`` between which more workers gained little though they
    could have gained (see the module's docstring), the farthest apart of such pairs; or None."""
    points = sorted((p for p in ev.points if (p.get("num_workers") or 0) >= 1
                     and math.isfinite(_measured(p, "s_per_batch")) and _measured(p, "s_per_batch") > 0),
                    key=lambda p: p["num_workers"])
    widest = None
    for i, a in enumerate(points):
        s_a, wait_a = _measured(a, "s_per_batch"), _measured(a, "wait_share")
        if not wait_a >= INPUT_BOUND_SHARE:  # the loop did not wait at a: the workers kept up
            continue
        for b in points[i + 1:]:
            s_b = _measured(b, "s_per_batch")
            ideal = max(s_a * a["num_workers"] / b["num_workers"], s_a * (1 - wait_a))
            possible = s_a - ideal
            if possible < SERIAL_MIN_GAIN * s_a or s_a - s_b >= SERIAL_GAIN * possible:
                continue
            idle = _measured(b, "idle_share")
            if math.isfinite(idle) and idle < IDLE_SHARE:  # the cores were full: not a resource of its own
                continue
            receiving = _measured(b, "main_next_s")
            if math.isfinite(receiving) and receiving >= HAND_OVER_SHARE * _measured(b, "wait_share") * s_b:
                continue  # the main process was busy receiving: the resource is the main process (hand-over)
            cpu_a = _measured(a, "workers_cpu_per_s") * s_a
            cpu_b = _measured(b, "workers_cpu_per_s") * s_b
            if math.isfinite(cpu_a) and math.isfinite(cpu_b) and cpu_b > cpu_a * (1 + SERIAL_CPU_GROWTH) + 0.05 * s_a:
                continue  # the same batch cost more CPU: contention for the cores or the memory
            if widest is None or b["num_workers"] - a["num_workers"] > widest[1]["num_workers"] - widest[0]["num_workers"]:
                widest = (a, b)  # the sentence gives the widest such pair
    return widest


def _workers_slower(ev: Evidence) -> bool:
    """Whether the loop was measured with workers and ran no faster at any count than with
    0 while it still waited for data (a batch costs more to hand over than to make): then
    workers are no advice. A loop that stopped waiting with workers yet ran no faster lost
    its time in the step (torch's threads beside busy workers), not in the hand-over: the
    model and its check speak for that one."""
    at_zero = [_measured(p, "s_per_batch") for p in ev.points if p.get("num_workers") == 0]
    with_workers = [p for p in ev.points if (p.get("num_workers") or 0) >= 1
                    and math.isfinite(_measured(p, "s_per_batch"))]
    if not (at_zero and with_workers and math.isfinite(at_zero[0])):
        return False
    fastest = min(with_workers, key=lambda p: _measured(p, "s_per_batch"))
    s, waited, receiving = (_measured(fastest, k) for k in ("s_per_batch", "wait_share", "main_next_s"))
    if s < 0.95 * at_zero[0]:
        return False
    if math.isfinite(waited) and waited < INPUT_BOUND_SHARE:
        return False  # it stopped waiting: the time went to the step
    # the wait was the main process receiving (its CPU inside next()), as hand-over with workers is named
    return not (math.isfinite(receiving) and math.isfinite(waited) and receiving < HAND_OVER_SHARE * waited * s)


def _slower_with_workers(ev: Evidence) -> Finding:
    """``hand-over`` at 0 workers: the loop measured with workers ran slower at every count."""
    points = sorted((p for p in ev.points if math.isfinite(_measured(p, "s_per_batch"))),
                    key=lambda p: p["num_workers"])
    said = ", ".join(f"{p['num_workers']}: {ms(_measured(p, 's_per_batch'))}" for p in points)
    return Finding("hand-over", f"With 0 workers the main process builds every batch itself ({ms(ev.wait_s)} inside "
                   f"next(), {pct(ev.data_wait_share)} of the loop), yet the loop ran no faster with workers (a batch "
                   f"by num_workers, {said}): handing a batch from a worker to the main process costs more than "
                   "making it (large batches are written into shared memory by the worker, then mapped, touched "
                   "and freed by the main process).",
                   "Send less per batch (uint8 instead of float32, smaller images, fewer items) before adding "
                   "workers; until then 0 workers is the fastest setting measured.")


def _serialised_finding(ev: Evidence, flat: tuple[dict[str, Any], dict[str, Any]], storage: bool = False) -> Finding:
    """``serialised`` (or ``storage-bound`` where the items read) from the measured points."""
    points = sorted((p for p in ev.points if math.isfinite(_measured(p, "s_per_batch"))),
                    key=lambda p: p["num_workers"])
    counts = ", ".join(str(p["num_workers"]) for p in points)
    rates = ", ".join(f"{1 / _measured(p, 's_per_batch'):.3g}" for p in points)
    a, b = flat
    idle = _measured(b, "idle_share")
    cpu_a = _measured(a, "workers_cpu_per_s") * _measured(a, "s_per_batch")
    cpu_b = _measured(b, "workers_cpu_per_s") * _measured(b, "s_per_batch")
    cpu = (f" and the workers' CPU per batch stayed at {ms(cpu_a)} to {ms(cpu_b)}"
           if math.isfinite(cpu_a) and math.isfinite(cpu_b) else "")
    measured = (f"With {counts} workers the loop ran at {rates} batches/s: {b['num_workers']} workers gained "
                f"{pct(1 - _measured(b, 's_per_batch') / _measured(a, 's_per_batch'))} over {a['num_workers']}, "
                f"while the cores were idle {pct(idle)} of the time{cpu}")
    if storage:
        return Finding("storage-bound", measured + f", and each item reads {_mb(ev.item_read_bytes / 2**20)}: the "
                       "workers queue on one storage channel at its limit.",
                       "More workers would queue too. Read less or from faster storage: copy the data to a local "
                       "disk or into memory first, cache what you read, store smaller items, or read large shards "
                       "sequentially instead of many small files.")
    return Finding("serialised", measured + ", and nothing shows as reads (the kernel's count of an item's bytes): "
                   "the workers wait on one resource they share (a lock, one file handle or connection, a service "
                   "that takes so many requests a second), and more workers only queue for it.",
                   "Give each worker a resource of its own (open the file, connection or client in the dataset's "
                   "first __getitem__ or a worker_init_fn, not in __init__), hold a lock for less of each item, "
                   "cache what the resource returns, or reach the data another way (local copies, shards). Until "
                   "then, workers beyond the resource's pace only queue for it.")


def _memory_finding(ev: Evidence) -> Finding | None:
    """``memory-growth`` where the growth is measurable and an epoch's projection is large
    (see the module's docstring), else None."""
    growth = ev.memory
    if growth is None or not growth.per_worker_mb or growth.mean_mb < max(GROWTH_MB, 2 * ev.in_flight_mb):
        return None
    cache = math.isfinite(ev.item_bytes) and ev.item_bytes > 0 and growth.kb_per_item * 1024 >= CACHE_SHARE * ev.item_bytes
    measured = (f"Each worker's private memory (USS) grew {growth.mean_mb:.1f} MB while it read about "
                f"{growth.items_per_worker:.0f} items ({growth.kb_per_item:.0f} KB per item"
                + (f", about the {_mb(ev.item_bytes / 2**20)} an item holds" if cache else "") + ")")
    projected = ev.projected_epoch_mb
    if math.isfinite(projected):
        if projected < EPOCH_GROWTH_MB:
            return None
        total = projected * ev.num_workers
        share = f", {pct(total / ev.memory_mb)} of this machine's memory" if ev.memory_mb else ""
        measured += (f"; at that rate one epoch of {ev.dataset_items} items costs each worker about "
                     f"{_mb(projected)}, {_mb(total)} for the {ev.num_workers} workers{share}")
    elif growth.kb_per_item < GROWTH_KB_PER_ITEM:
        return None
    if cache:
        return Finding(
            "memory-growth", measured + ": the dataset keeps the items it makes (a cache), and each worker keeps "
            "its own copy of it" + ("" if ev.persistent_workers else ", lost at the end of every epoch when the "
                                    "workers stop (no persistent_workers), and made again in the next") + ".",
            "Make the items once for every worker instead: decode them to a file before training and open it in "
            "each worker (a numpy memmap), or into one tensor in shared memory; or bound the cache. Keeping the "
            "workers (persistent_workers=True) at least keeps what they cached from one epoch to the next.")
    return Finding(
        "memory-growth", measured + ": reading Python objects writes their reference counts, so forked workers "
        "copy the pages they read (copy-on-write).",
        "Hold the dataset in numpy arrays or one serialised buffer instead of a list of Python objects "
        "(notebook 06). No loader setting fixes it.")


def _main_work_finding(ev: Evidence) -> Finding | None:
    """``main-thread-work`` where the step's own CPU keeps the accelerator idle (the
    module's docstring), else None."""
    host, pace = ev.step_cpu_s, ev.s_per_batch
    if not (math.isfinite(host) and math.isfinite(pace) and pace > 0):
        return None
    if host < MAIN_WORK_MIN_S or host < MAIN_WORK_SHARE * pace:
        return None
    device = ev.device_s
    if not math.isfinite(device) or device <= DEVICE_MIN_SHARE * ev.step_s:
        return None  # no wait for an accelerator seen: training on the CPU, or a step it cannot see into
    idle = 1 - min(device / pace, 1.0)
    if idle < MAIN_WORK_SHARE:
        return None
    return Finding(
        "main-thread-work", f"The step spends {ms(host)} of CPU per batch in this process, {pct(host / pace)} of the "
        f"loop's {ms(pace)} per batch, beside {ms(device)} waiting for the accelerator (the step alone): the "
        f"accelerator idles {pct(idle)} of the loop while the main thread works, whatever the loader does.",
        "Move per-batch CPU work (tokenising, packing, augmenting, converting to tensors) out of the step into the "
        "dataset's __getitem__ or the collate_fn, where the workers do it ahead of the step, or onto the "
        "accelerator. No loader setting fixes it.")


def _mb(mb: float) -> str:
    if mb < 1:
        return f"{mb * 1024:.0f} KB"
    return f"{mb / 1024:.1f} GB" if mb >= 1024 else f"{mb:.0f} MB"


def _rate(bytes_per_s: float) -> str:
    return f"{bytes_per_s / 2**20:.3g} MB/s"


def find_causes(ev: Evidence) -> list[Finding]:
    """Every cause the evidence shows, in the order of :data:`CAUSES`; empty when healthy."""
    findings: list[Finding] = []
    flat = _flat_scaling(ev)
    if ev.input_bound and ev.num_workers == 0 and flat is not None:  # one worker helps, more do not
        reads = math.isfinite(ev.item_read_bytes) and ev.item_read_bytes >= READ_MIN_BYTES
        findings.append(_serialised_finding(ev, flat, storage=reads))
    if ev.input_bound and ev.num_workers == 0 and _workers_slower(ev):
        findings.append(_slower_with_workers(ev))
    elif ev.input_bound and ev.num_workers == 0:
        findings.append(Finding(
            "main-process-loading", f"With 0 workers the main process builds every batch itself ({ms(ev.wait_s)} "
            f"inside next(), beside {ms(ev.step_s)} in the step): {pct(ev.data_wait_share)} of the loop's time is "
            "spent waiting for data, and the step can overlap it only with what it left queued on the accelerator.",
            "Set num_workers: workers build the next batches while the step runs."))
    elif ev.input_bound:
        findings.append(_wait_cause(ev))
    if ev.num_workers > 0 and not ev.persistent_workers and ev.batches_per_epoch:
        epoch = ev.epoch_s()
        share = ev.start_up_extra_s / epoch if epoch > 0 else 0.0
        if share >= START_UP_SHARE:
            findings.append(Finding(
                "worker-start-up", f"Starting the {ev.num_workers} workers costs {ms(ev.start_up_extra_s)} at the "
                f"start of every epoch, {pct(share)} of an epoch of {ev.batches_per_epoch} batches "
                f"({epoch:.2f} s): without persistent_workers they are started again each time.",
                "Set persistent_workers=True: the workers are started once and kept for every epoch."))
    for finding in (_memory_finding(ev), _main_work_finding(ev)):
        if finding is not None:
            findings.append(finding)
    order = list(CAUSES)
    return sorted(findings, key=lambda f: order.index(f.cause))
