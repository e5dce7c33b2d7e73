"""The live diagnosis of a loader handed over whole: probes, a baseline, a scaling sweep and a
what-if, within one budget (``feedgpu.diagnose(loader)``).

The phases and the share of ``max_seconds`` by whose end each must be done, fixed in
advance (:data:`PHASES`; a phase that ends early leaves its time to the next):

=============  =====  ==========================================================
phase          ends   what it measures
=============  =====  ==========================================================
items          8%     ``dataset[i]`` and the collate in this process, and pinning
                      a batch warm (:mod:`~feedgpu.diagnosis.sensing.probes`), each repeated
baseline       36%    the loader as it is, with the step: waits, CPU, worker memory
hand-over      44%    what a batch costs to hand over, for the model (and the fix);
                      the main process's floor: the loop over ready items, at a
                      high batch rate (:meth:`_Diagnosis.measure_floor`)
scaling        84%    ``num_workers`` around the current setting and beyond it,
                      where the model reaches its best (:meth:`_Diagnosis.scale`)
what-if        100%   the setting to try first, measured the same way
=============  =====  ==========================================================

Between the scaling and the what-if the model is checked against every point it measured
and corrected where it misses them (:mod:`~feedgpu.diagnosis.fitting`); the conclusion (the causes, the
verdict, the setting to try) is :func:`~feedgpu.diagnosis.conclusion.conclude`'s, as in every mode, once
to choose the what-if and once more with its point.

Every run reads the same seeded sample of batches, stops at its phase's end, and stops
its workers before the next starts, also on an error or Ctrl-C. Every run is timed at a
steady state, as the baseline is: two batches per worker go by untimed (the workers'
first burst), the baseline's count of batches is timed where the budget allows, the
start-up is reported apart, and each run's spread (its two halves' difference) is kept.
No run synchronises the GPU inside its loop (:func:`~feedgpu.diagnosis.sensing.runs.measure_run`).
"""

from __future__ import annotations

import logging
import math
import os
import statistics
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from torch.utils.data import DataLoader, IterableDataset

from ...base.checks import check_number, check_seconds
from ...measure.machine import total_memory_mb, usable_cores
from ...measure.transfer import payload_bytes
from ..sensing.steps import ReplayedStep, SimulatedAccelerator, TimedStep
from ..causes import Finding, find_causes
from ..evidence import THREADS_PER_WORKER, Evidence, ms
from ..sensing.cloning import check_importable, loader_settings, start_method_of
from ..handover_fix import SharedTensorCollate, restore
from ..conclusion import Conclusion, Model, conclude
from ..sensing.probes import (HandOverCost, ItemCost, Reading, ReadyItems, crosses_pickled, disagreement_note, in_flight_mb,
                     one_thread, probe_hand_over, probe_items, probe_pinning)
from ..report import Diagnosis
from ..sensing.runs import MIN_TIMED, Run, measure_run, min_timed
from ..sensing.threads import OneThreadPerPool, can_limit_pools, one_thread_pools, pool_threads
from ..whatif import Costs, choose_workers, epoch_speedup, max_workers

__all__ = ["PHASES", "MAX_TIMED", "diagnose"]

logger = logging.getLogger(__name__)

#: Each phase and the share of the budget by whose end it is done.
PHASES: tuple[tuple[str, float], ...] = (("items", 0.08), ("baseline", 0.36), ("hand-over", 0.44),
                                         ("scaling", 0.84), ("what-if", 1.0))
#: Share of the cores other programs held during the baseline from which, with the load
#: average above the cores, the verdict is said to rest on disturbed readings.
BUSY_OTHERS = 0.25
#: The most batches a run times (a sample, never a whole epoch of a large dataset).
MAX_TIMED = 40



class Budget:
    """The diagnosis's clock: each phase's deadline, and a progress bar over the phases."""

    def __init__(self, max_seconds: float, progress: bool, spare_s: float = 0.0) -> None:
        from tqdm.auto import tqdm

        self.max_seconds = max_seconds
        self.start = time.perf_counter()
        self.end = self.start + max_seconds
        self.spare_s = spare_s  # what the what-if may take past the end, where its share is too short
        self.borrowed_s = 0.0
        self.bar = tqdm(total=len(PHASES), desc="diagnosis", unit="phase", disable=not progress, leave=False)

    def deadline(self, phase: str) -> float:
        return self.start + dict(PHASES)[phase] * self.max_seconds

    def begin(self, phase: str) -> None:
        self.bar.set_postfix_str(phase)

    def done(self) -> None:
        self.bar.update(1)

    def borrow(self, needed_s: float) -> float:
        """Move the end so that ``needed_s`` from now fits (with a fifth more), from the spare
        seconds at most; the seconds borrowed."""
        extra = min(self.spare_s - self.borrowed_s, 1.2 * needed_s - (self.end - time.perf_counter()))
        if extra <= 0:
            return 0.0
        self.end += extra
        self.borrowed_s += extra
        return extra

    def close(self) -> None:
        self.bar.close()

    @property
    def elapsed_s(self) -> float:
        return time.perf_counter() - self.start


def _plan(estimate_s: float, deadline: float, warmup: int) -> int:
    """Batches for a run: as many timed batches as fit before ``deadline`` (3 to MAX_TIMED)."""
    room = deadline - time.perf_counter()
    timed = int(room / estimate_s) - 1 - warmup if estimate_s > 0 else MAX_TIMED
    return 1 + warmup + max(3, min(MAX_TIMED, timed))


def _check_arguments(loader: Any, step: Any, step_s: Any, max_seconds: Any) -> tuple[float | None, float]:
    if not isinstance(loader, DataLoader):
        raise TypeError(f"loader must be a torch.utils.data.DataLoader, got {type(loader).__name__}")
    if (step is None) == (step_s is None):
        raise ValueError("give exactly one of step (your training step: a callable taking a batch) and step_s "
                         f"(seconds of a simulated step); got step={step!r}, step_s={step_s!r}")
    if step is not None and not callable(step):
        raise TypeError(f"step must be a callable taking a batch, got {type(step).__name__}")
    step_s = None if step_s is None else check_seconds("step_s", step_s)
    max_seconds = check_number("max_seconds", max_seconds, minimum=None)
    if max_seconds <= 0:
        raise ValueError(f"max_seconds must be > 0, got {max_seconds!r}")
    return step_s, max_seconds


def _length(obj: Any) -> int | None:
    try:
        return len(obj)
    except TypeError:
        return None


class _Diagnosis:
    """One diagnosis in progress: the loader, the step, the budget and what was measured."""

    def __init__(self, loader: DataLoader, step: Callable[[Any], Any] | None, step_s: float | None,
                 budget: Budget, try_fix: bool) -> None:
        self.loader, self.step, self.step_s, self.budget, self.try_fix = loader, step, step_s, budget, try_fix
        self.cores = usable_cores()
        self.workers = loader.num_workers
        self.step_threads = 1.0  # the threads the step keeps busy, once timed alone
        self.context = loader.multiprocessing_context
        self.notes: list[str] = []
        self.runs: list[Run] = []
        self.scaling: dict[int, Run] = {}
        self.baseline_timed = 0
        self.sharing_source = "assumed"
        self.floor_run: Run | None = None
        self.held_out: dict[int, float] = {}  # the what-if's prediction, made before it was measured
        self.fixed_costs: Costs | None = None
        self.thread_costs: Costs | None = None
        # a first guess of a worker's start-up (a spawned one imports torch afresh), until one is measured
        self.start_s_per_worker = 0.15 if start_method_of(loader) == "fork" else 1.5
        # the main process starts workers one after another (a fork each, or a spawn), and they
        # then start and load their first batch side by side: each worker more costs about this
        self.start_s_per_more_worker = 0.05 if start_method_of(loader) == "fork" else 0.5
        self.last_start: tuple[int, float] | None = None  # (workers, seconds) of the last run measured

    # ------------------------------------------------------------------ steps and runs
    def new_step(self, cuda: bool = False) -> Callable[[Any], Any]:
        if self.step is None:
            return SimulatedAccelerator(self.step_s)
        return TimedStep(self.step, cuda_events=None if cuda else False)

    def run(self, label: str, estimate_s: float, soft_deadline: float, *, memory: bool = False, repeats: int = 1,
            restore: Callable[[Any], Any] | None = None, cuda: bool = False, loader: DataLoader | None = None,
            **changes: Any) -> Run:
        loader = self.loader if loader is None else loader
        workers = changes.get("num_workers", loader.num_workers)
        warmup = max(2, 2 * workers)  # every worker has delivered its first burst: the timed batches are steady
        needed = self.start_s(workers) + (warmup + 1 + min_timed(workers)) * estimate_s * repeats
        room = soft_deadline - time.perf_counter()
        if label != "baseline" and needed > 1.1 * room:  # it could not time a batch before its deadline
            run = Run(label, workers, None, f"skipped: it needs about {needed:.1f} s and its share of the budget "
                      f"has {max(room, 0.0):.1f} s left")
            self.runs.append(run)
            self.notes.append(f"{label}: not measured ({run.reason})")
            return run
        step = self.new_step(cuda)
        gpu = step.gpu_busy_s if isinstance(step, TimedStep) and step.cuda_events else None
        batches = _plan(estimate_s * repeats, soft_deadline, warmup)
        if label != "baseline" and self.baseline_timed:  # the same count as the baseline, where time allows
            batches = min(batches, 1 + warmup + self.baseline_timed)
        run = measure_run(loader, step, label=label, batches=batches, warmup=warmup,
                          soft_deadline=soft_deadline, hard_deadline=self.budget.end, cores=self.cores,
                          repeats=repeats, memory=memory, restore=restore, gpu_busy=gpu, **changes)
        if isinstance(step, TimedStep):
            run.cpu["step_cpu_share"] = step.cpu_share
        if run.measured and workers:  # what starting a worker costs here, for planning the next runs
            self.last_start = (workers, run.timing.first_startup_s)
        self.runs.append(run)
        if run.stopped_early:
            self.notes.append(f"{label}: stopped at its share of the budget after {run.timing.n_batches[0]} timed "
                              "batches" if run.measured else f"{label}: not measured ({run.reason})")
        elif not run.measured:
            self.notes.append(f"{label}: not measured ({run.reason})")
        return run

    # ------------------------------------------------------------------ phases
    def probe(self) -> None:
        self.budget.begin("items")
        self.items: ItemCost = probe_items(self.loader, self.budget.deadline("items"))
        # pinning as the loop pays it, warm: the pin thread's one thread with workers, torch's threads without
        self.pinning: dict[str, Reading | None] = {"one_thread": None, "main_thread": None}
        if self.loader.pin_memory:
            deadline = max(self.budget.deadline("items"), time.perf_counter() + 1.0)
            self.pinning = {"one_thread": probe_pinning(self.items.batch, threads=1, deadline=deadline),
                            "main_thread": probe_pinning(self.items.batch, deadline=deadline)}
            if self.pinning["one_thread"] is None:
                self.notes.append("pin_memory=True does nothing here: there is no accelerator")
        pin = self.pinning["one_thread" if self.workers else "main_thread"]
        self.pin_s = pin.median_s if pin is not None else None
        self.step_alone: Reading | None = None
        if self.step is not None:  # one call, to plan the runs (and to warm the step up)
            once = TimedStep(self.step, cuda_events=False)
            once(self.items.batch)
            self.step_guess, self.step_cpu = once.wall_s, once.cpu_share
            self.time_step_alone()
        else:
            self.step_guess, self.step_cpu = self.step_s, 0.0
            self.step_off_cpu_s = math.nan  # a simulated accelerator: no CPU, nothing to tell
        self.pickled = crosses_pickled(self.items.batch)
        self.budget.done()

    def time_step_alone(self) -> None:
        """Up to three more calls of the step with no worker running, where the budget has room:
        the step alone, against which the baseline's shows what sharing the cores costs it."""
        timed = TimedStep(self.step, cuda_events=False)
        walls = []
        room = self.budget.deadline("items") + 0.05 * self.budget.max_seconds
        while len(walls) < 3 and time.perf_counter() + self.step_guess < room:
            before = timed.wall_s
            timed(self.items.batch)
            walls.append(timed.wall_s - before)
        if len(walls) >= 2:
            self.step_alone = Reading(walls, threads=torch_threads_now())
            self.step_guess, self.step_cpu = self.step_alone.median_s, timed.cpu_share
            self.step_threads = timed.threads
        # the step alone, off the CPU: its wait for an accelerator (no worker takes a core from it yet),
        # unless the step says it had none (a CPU-only script's step, played again)
        no_device = isinstance(self.step, ReplayedStep) and not self.step.accelerator
        self.step_off_cpu_s = math.nan if no_device else self.step_guess * max(1.0 - self.step_cpu, 0.0)

    def measure_baseline(self) -> None:
        self.budget.begin("baseline")
        guess = Costs(self.items.load_s, self.step_guess, 0.0, 0.0, self.items.cpu_share, self.cores,
                      self.step_cpu).s_per_batch(self.workers)
        self.baseline = self.run("baseline", guess, self.budget.deadline("baseline"), memory=self.workers > 0,
                                 cuda=True)
        self.scaling[self.workers] = self.baseline
        if self.baseline.measured:
            self.baseline_timed = self.baseline.timing.n_batches[0]
        self.budget.done()

    def evidence(self) -> Evidence:
        b = self.baseline
        if b.measured:
            step_s = b.step_s
            self.step_cpu = b.cpu.get("step_cpu_share", self.step_cpu)
            return Evidence(
                num_workers=self.workers, persistent_workers=self.loader.persistent_workers, cores=self.cores,
                data_wait_share=b.wait_share, s_per_batch=b.s_per_batch, wait_s=b.wait_s, step_s=step_s,
                startup_s=b.timing.first_startup_s, one_batch_s=self.items.load_s,
                batches_per_epoch=_length(self.loader), main_next_cpu_s=b.cpu.get("main_next_s", math.nan),
                main_cpu_per_s=b.cpu.get("main_per_s", math.nan),
                workers_cpu_per_s=b.cpu.get("workers_per_s", math.nan),
                idle_share=b.cpu.get("idle_share", math.nan), memory=b.memory, pickled=self.pickled,
                in_flight_mb=in_flight_mb(self.loader, self.items.batch), dataset_items=_length(self.loader.dataset),
                memory_mb=total_memory_mb(), step_cpu_s=step_s * b.cpu.get("step_cpu_share", math.nan),
                device_s=self.step_off_cpu_s, worker_threads=b.cpu.get("worker_threads", math.nan),
                pool_threads=pool_threads(),
                read_per_s=b.cpu.get("workers_read_per_s", math.nan), item_read_bytes=self.items.read_bytes,
                item_read_per_s=self.items.read_per_s,
                io_wait_share=b.cpu.get("workers_io_wait_share", math.nan),
                item_bytes=float(payload_bytes(self.one_item())))
        # no batch could be timed within the budget: judge from the item probe and the model
        self.notes.append("the baseline could not be timed within the budget: its figures are the model's "
                          "estimate from the item probe (raise max_seconds for a measurement)")
        guess = Costs(self.items.load_s, self.step_guess, 0.0, 0.0, self.items.cpu_share, self.cores,
                      self.step_cpu).s_per_batch(self.workers)
        wait = max(guess - self.step_guess, 0.0)
        return Evidence(self.workers, self.loader.persistent_workers, self.cores, wait / guess if guess else 0.0,
                        guess, wait, self.step_guess, math.nan, self.items.load_s, None, pickled=self.pickled,
                        dataset_items=_length(self.loader.dataset), memory_mb=total_memory_mb())

    def one_item(self) -> Any:
        """One item as the dataset gives it (the probe's first)."""
        batching = self.loader.batch_size is not None or self.loader.batch_sampler is not None
        chunk = self.items.chunk
        return chunk[0] if batching and isinstance(chunk, list) and chunk else chunk

    def hand_over(self, ev: Evidence, findings: list[Finding]) -> None:
        """The hand-over costs of the current batches (and of the fix, if it is tried)."""
        self.budget.begin("hand-over")
        causes = {f.cause for f in findings}
        batch = self.items.batch
        if self.workers > 0 and math.isfinite(ev.main_next_cpu_s) and math.isfinite(ev.workers_cpu_per_s):
            # measured in the loop itself: the main thread's CPU inside next() is the receiving; the
            # workers' CPU per batch beyond building it (items and collate, timed here) is the sending
            receive = ev.main_next_cpu_s
            send = max(ev.workers_cpu_per_s * ev.s_per_batch - self.items.fetch_cpu_s - self.items.collate_cpu_s, 0.0)
            if "hand-over" in causes:
                # receiving a pickle takes longer on the clock than on the CPU (the pipe is read as the
                # worker writes it): time it as the fix's will be, with the course's instrument
                receive = probe_hand_over(batch, self.context).receive_s
            if ev.worker_threads >= THREADS_PER_WORKER:
                # workers that keep several threads busy spend CPU beyond the items that is their pools'
                # (threads that spin while they wait for each other), not the sending: time the sending
                send = probe_hand_over(batch, self.context).send_s
            self.handover = HandOverCost(send, receive, self.pickled, payload_bytes(batch))
        elif check_importable(self.loader, max(self.workers, 1)) is None:
            self.handover = probe_hand_over(batch, self.context)
        else:
            self.handover = HandOverCost(0.0, 0.0, self.pickled, payload_bytes(batch))
            self.notes.append("the hand-over was not measured (the dataset cannot reach a spawned worker)")
        step_s, step_cpu, sharing = self.model_step(ev)
        one, main = self.pinning["one_thread"], self.pinning["main_thread"]
        self.costs = Costs(self.items.load_s, step_s, self.handover.send_s, self.handover.receive_s,
                           self.items.cpu_share, ev.available_cores, step_cpu,
                           pin_s=one.median_s if one is not None else 0.0,
                           pin_main_s=main.median_s if main is not None else None, sharing=sharing,
                           step_threads=self.step_threads)
        if "storage-bound" in causes and ev.read_per_s > 0:  # the rate the workers reached is the storage's
            self.costs = replace(self.costs, storage_s=ev.item_read_bytes * self.items.batch_size / ev.read_per_s)
        self.measure_floor()
        if "hand-over" in causes and self.pickled and payload_bytes(batch) > 0:
            self.collate = SharedTensorCollate(self.loader.collate_fn)
            items = self.items.chunk
            with one_thread():  # as in a worker; the least of five: the cost with nothing else in the way
                made = [_timed(lambda: self.collate(items)) for _ in range(5)]
            new_batch, collate_s, collate_cpu = min(made, key=lambda m: m[1])
            _, restore_s, _ = _timed(lambda: restore(new_batch))
            fixed = probe_hand_over(new_batch, self.context)
            self.fixed_costs = replace(self.costs.with_hand_over(self.items.fetch_s + collate_s,
                                                                 self.items.fetch_cpu_s + collate_cpu, fixed.send_s,
                                                                 fixed.receive_s + restore_s),
                                       main_floor_s=None)  # the floor was the pickled batches' receiving
        if "thread-oversubscription" in causes and can_limit_pools():
            # the items as a worker with one thread per pool would fetch them
            deadline = time.perf_counter() + max(min(2.0, self.budget.end - time.perf_counter()) / 4, 0.2)
            with one_thread_pools():
                items = probe_items(self.loader, deadline, batches=2, threads=1)
            # the hand-over timed with the course's instrument: the loop's own estimate of the
            # sending (the workers' CPU beyond building the batch) holds the threads' waiting too
            timed = probe_hand_over(batch, self.context) if self.workers else self.handover
            self.thread_costs = replace(self.costs, load_s=items.load_s, cpu_share=items.cpu_share,
                                        send_s=timed.send_s, receive_s=timed.receive_s)
        self.budget.done()

    def measure_floor(self) -> None:
        """The main process's floor: its seconds per batch at a high batch rate.

        The loop runs with its step, its pinning and its collate over items that are ready
        (:class:`~feedgpu.diagnosis.sensing.probes.ReadyItems`: the item probe's items, given again for every
        batch), with enough workers that collating and sending are not what it waits for
        (at most one per core): the workers only collate and send, so the main process sets
        the pace with what it does per batch (its step, receiving, freeing and pinning a
        batch, the loader's own bookkeeping), beside workers that hand over as fast as the
        real ones can. Its floor is that run's time per batch, less what it spent waiting
        without working (its wait beyond its CPU inside ``next()``). The model takes it
        instead of the sum of the probes (:meth:`~feedgpu.diagnosis.whatif.Costs.main_alone_s`).
        """
        problem = check_importable(self.loader, 1)
        if problem is not None:
            self.notes.append(f"the main process's floor was not measured: {problem}")
            return
        c = self.costs
        main = c.step_s + c.receive_s + c.pin_s
        hand_over = self.items.collate_s + c.send_s
        workers = max(1, min(int(self.cores), max_workers(self.cores),
                             math.ceil(2 * hand_over / max(main, 1e-4))))
        ready = DataLoader(ReadyItems(self.items.chunk), batch_size=None, collate_fn=self.loader.collate_fn,
                           num_workers=workers, pin_memory=self.loader.pin_memory,
                           pin_memory_device=self.loader.pin_memory_device,
                           prefetch_factor=self.loader.prefetch_factor, multiprocessing_context=self.context)
        estimate = max(main, hand_over / workers)
        # its share of the phase, or at least what it needs for a few batches (from the scaling's share)
        needed = 1.2 * (self.start_s(workers) + (max(2, 2 * workers) + 5) * estimate)
        deadline = min(max(self.budget.deadline("hand-over"), time.perf_counter() + needed),
                       self.budget.deadline("scaling"))
        run = self.run("main process's floor", estimate, deadline, loader=ready)
        if not run.measured:
            return
        idle = max(run.wait_s - run.cpu.get("main_next_s", 0.0), 0.0)
        self.floor_run = run
        self.costs = replace(self.costs, main_floor_s=max(run.s_per_batch - idle, 0.0))
        sent = run.cpu.get("workers_per_s", math.nan) * run.s_per_batch - self.items.collate_cpu_s
        if not self.workers and math.isfinite(sent):
            # the workers' CPU per batch beyond the collate is what sending costs them: a collate that
            # writes into shared memory in a worker (default_collate does) sends only a handle, where the
            # probe wrote the batch twice (collated here, then copied into fresh shared memory)
            self.costs = replace(self.costs, send_s=max(sent, 0.0))

    def model_step(self, ev: Evidence) -> tuple[float, float, float]:
        """The step as the model takes it (alone), the share of it that is the host's CPU, and
        how much a busy core slows that CPU work (the model's ``sharing``).

        The loop is timed without a synchronisation per step, so with an asynchronous step
        on a GPU the host's time in the step is its launching; the device's time per step
        (CUDA events) is then the step's time, when longer. Where the baseline ran busy
        workers and the step was also timed alone, the difference is what sharing the cores
        cost it: ``sharing`` is measured (at most 1), and the step the model takes is the
        baseline's without it. Otherwise ``sharing`` is 1 (:mod:`~feedgpu.diagnosis.whatif`).
        """
        b = self.baseline
        step_s = ev.step_s
        gpu = b.gpu_busy_s / b.timing.n_batches[0] if b.measured and b.gpu_busy_s else None
        if gpu is not None and math.isfinite(gpu) and gpu > step_s:
            self.sharing_source = "assumed: the device's time sets the step"
            return gpu, min(self.step_cpu * step_s / gpu, 1.0), 1.0
        busy = b.cpu.get("workers_per_s", math.nan) if b.measured else math.nan
        alone = self.step_alone.median_s if self.step_alone is not None else math.nan
        per_busy = alone * self.step_cpu * busy / max(self.cores, 1)  # the slowdown at sharing 1
        if math.isfinite(per_busy) and busy >= 0.5 and per_busy > 0 and math.isfinite(step_s):
            sharing = min(max((step_s - alone) / per_busy, 0.0), 1.0)
            self.sharing_source = (f"measured: the step took {ms(alone)} alone and {ms(step_s)} beside workers "
                                   f"keeping {busy:.2g} cores busy")
            return step_s - sharing * per_busy, self.step_cpu, sharing
        self.sharing_source = "assumed: the baseline had no busy workers to measure it beside"
        return step_s, self.step_cpu, 1.0

    def points(self) -> tuple[dict[int, float], list[dict[str, Any]]]:
        """The loop measured at each worker count: seconds per batch, and each point's figures
        for the causes (:attr:`~feedgpu.diagnosis.evidence.Evidence.points`)."""
        counted = {w: run for w, run in sorted(self.scaling.items()) if _counts(run)}
        measured = {w: run.s_per_batch for w, run in counted.items()}
        rows = [{"num_workers": w, "s_per_batch": run.s_per_batch, "wait_share": run.wait_share,
                 "workers_cpu_per_s": run.cpu.get("workers_per_s"), "idle_share": run.cpu.get("idle_share"),
                 "main_next_s": run.cpu.get("main_next_s")} for w, run in counted.items()]
        return measured, rows

    def conclude(self, ev: Evidence, held_out: dict[int, float] | None = None) -> Conclusion:
        """The conclusion from everything measured so far (:func:`~feedgpu.diagnosis.conclusion.conclude`)."""
        measured, rows = self.points()
        ev = replace(ev, points=rows)
        return conclude(ev, Model(self.costs, self.fixed_costs, self.thread_costs, measured, held_out or {},
                                  fit_sharing=self.sharing_source.startswith("assumed")
                                  and not self.sharing_source.startswith("assumed: the device")))

    def choose_tries(self, conclusion: Conclusion) -> list[dict[str, Any]]:
        tries = [dict(t) for t in conclusion.tries]
        causes = set(conclusion.causes)
        kept = []
        for t in tries:
            if t["setting"] == "num_workers":
                problem = check_importable(self.loader, t["value"])
                if problem:
                    self.notes.append(f"num_workers={t['value']} not tried: {problem}")
                    continue
                t["changes"] = {"num_workers": t["value"]}
                if isinstance(self.loader.dataset, IterableDataset):
                    self.notes.append("an IterableDataset must split its stream between workers itself "
                                      "(torch.utils.data.get_worker_info()), or each worker yields all of it")
            elif t["setting"] == "collate_fn":
                t.update(value=repr(self.collate), changes={"collate_fn": self.collate}, restore=restore)
            elif t["setting"] == "persistent_workers":
                t.update(changes={"persistent_workers": True}, repeats=2)
            elif t["setting"] == "worker_init_fn":
                wrapper = OneThreadPerPool(self.loader.worker_init_fn)
                t.update(value=repr(wrapper), changes={"worker_init_fn": wrapper})
            kept.append(t)
        if causes & {"main-process-loading", "too-few-workers"} and not any(
                t["setting"] == "num_workers" for t in tries):
            self.notes.append("the model predicts no gain from more workers on these costs")
        return kept

    def scaling_counts(self) -> list[int]:
        """The worker counts the scaling runs measure: the two nearest the current setting
        (one more and one fewer, or two more from 0), then up to two beyond them where the
        probes' model reaches its best (twice the fewest workers that reach it, at least two
        more than the nearest; and half-way), never the count the model would try first, so
        that its what-if is measured where the model was not fitted. Points beyond the best
        show what the probes cannot: a ceiling the workers share, the main process slowed by
        busy cores."""
        top = max_workers(self.cores)
        near: list[int] = []
        for w in (self.workers + 1, self.workers - 1, 2 * self.workers, self.workers + 2):
            if 0 <= w <= top and w != self.workers and w not in near:
                near.append(w)
        near = near[:2]
        times = {w: self.costs.s_per_batch(w) for w in range(1, top + 1)}
        best = min(times.values())
        fewest = min(w for w, t in times.items() if t <= best * 1.02)
        first, _ = choose_workers(self.costs, self.workers, top)
        reach = max(near + [self.workers])
        far = []
        beyond = min(top, max(2 * fewest, reach + 2))
        for w in (beyond, (reach + beyond) // 2):
            if w == first:
                w = w + 1 if w + 1 <= top and w + 1 not in far else w - 1
            if reach < w <= top and w != first and w not in far:
                far.append(w)
        return [w for w in near + sorted(far) if check_importable(self.loader, w) is None]

    def start_s(self, num_workers: int) -> float:
        """Seconds a run's start-up is planned with (its workers started, its first batch):
        the last measured start-up, and a worker's start for each worker more; a first guess
        per worker before any was measured."""
        if not num_workers:
            return 0.0
        if self.last_start is None:
            return self.start_s_per_worker * num_workers
        workers, seconds = self.last_start
        return seconds + self.start_s_per_more_worker * max(num_workers - workers, 0)

    def estimate_s(self, num_workers: int) -> float:
        """Seconds per batch to plan a run with: the model's, times what the loop measured
        over the model at the most workers measured up to this count (a ceiling the probes
        cannot see shows there), within a quarter to four times the model's."""
        model = self.costs.s_per_batch(num_workers)
        below = [w for w, run in self.scaling.items() if 0 < w <= num_workers and _counts(run)]
        if not below:
            return model
        w = max(below)
        ratio = self.scaling[w].s_per_batch / self.costs.s_per_batch(w)
        return model * min(max(ratio, 0.25), 4.0)

    def run_need_s(self, num_workers: int, timed: int) -> float:
        """Seconds a run at ``num_workers`` needs: its workers' start, their warm-up and
        ``timed`` batches (the estimate of :meth:`estimate_s`)."""
        return self.start_s(num_workers) + (max(2, 2 * num_workers) + 1 + timed) * self.estimate_s(num_workers)

    def scale(self) -> None:
        """The scaling runs (:meth:`scaling_counts`), as many as the phase has room for:
        the nearest counts first, then the farthest beyond, then the one half-way; each
        run's share of what is left in proportion to what it needs for the baseline's count
        of timed batches, and never less than what it needs to be a point (:func:`~feedgpu.diagnosis.sensing.runs.min_timed`).
        They run in that order too: where one overruns its share, the one half-way is lost."""
        self.budget.begin("scaling")
        counts = self.scaling_counts()
        order = counts[:2] + sorted(counts[2:], reverse=True)  # near, then the farthest beyond, then half-way
        timed = self.baseline_timed or 8
        while order:
            room = self.budget.deadline("scaling") - time.perf_counter()
            kept, total = [], 0.0
            for w in order:  # what fits, in order of priority
                if total + self.run_need_s(w, min_timed(w)) <= room:
                    kept.append(w)
                    total += self.run_need_s(w, min_timed(w))
            for w in [w for w in counts if w in order and w not in kept]:
                self.scaling[w] = self.run(f"num_workers={w}", self.estimate_s(w), time.perf_counter(),
                                           num_workers=w)  # not measured: it says why
            order = kept  # what fits, in order of priority
            if not order:
                break
            # in order of priority, so that a run which overran its share costs the half-way point, never
            # the farthest: beyond the best is where a resource the workers share shows, and a second point
            # showing it is what lets the model be checked on it out of sample
            w = order[0]
            needs = [self.run_need_s(v, timed) for v in order]
            share = max(room * needs[0] / sum(needs), self.run_need_s(w, min_timed(w)))
            self.scaling[w] = self.run(f"num_workers={w}", self.estimate_s(w), time.perf_counter() + share,
                                       num_workers=w)
            order = order[1:]
        self.budget.done()

    def what_if(self, chosen: dict[str, Any]) -> None:
        self.budget.begin("what-if")
        label = f"{chosen['setting']}={chosen['value']}"
        repeats = chosen.get("repeats", 1)
        changes = chosen["changes"]
        if chosen["setting"] == "collate_fn":
            estimate = self.fixed_costs.s_per_batch(self.workers)
        elif chosen["setting"] == "worker_init_fn":
            estimate = self.thread_costs.s_per_batch(self.workers)
        else:
            estimate = chosen.get("predicted_s_per_batch") or self.corrected.s_per_batch(
                changes.get("num_workers", self.workers))
        workers = changes.get("num_workers", self.workers)
        needed = self.start_s(workers) + (max(2, 2 * workers) + 1 + min_timed(workers)) * estimate * repeats
        if needed > self.budget.end - time.perf_counter() and self.budget.borrow(needed):
            self.notes.append(f"the what-if took {self.budget.borrowed_s:.1f} s past the diagnosis's budget, "
                              "from the caller's spare time, to be measured at all")
        run = self.run(label, estimate, self.budget.end, repeats=repeats, restore=chosen.get("restore"), **changes)
        measured = None
        if run.measured and chosen["setting"] == "persistent_workers":
            # epochs compared as the cause weighs them: the start-up measured again, the pace the
            # baseline's (the same workers keep the same pace; a difference between two short runs
            # is noise, which put a 1.17x prediction at 0.84x on an H200)
            later = run.timing.later_startup_s
            if math.isfinite(later) and self.baseline.measured:
                measured = epoch_speedup(self.baseline.timing.first_startup_s, later, _length(self.loader),
                                         self.baseline.s_per_batch)
        elif run.measured and self.baseline.measured:
            measured = self.baseline.s_per_batch / run.s_per_batch
        if chosen["setting"] == "num_workers" and run.measured and chosen["value"] not in self.points()[0]:
            # measured after it was chosen: a point the model predicted without it (held out). A count
            # the scaling runs had measured keeps that run, the one the choice was made from, so that
            # the conclusion drawn again (the report's, a replay's) rests on the same points
            self.scaling[chosen["value"]] = run
            self.held_out = {chosen["value"]: estimate}
        chosen["measured_speedup"] = measured
        if measured is None:
            chosen["note"] = f"not measured ({run.reason or 'the budget ran out first'})"
        self.budget.done()

    # ------------------------------------------------------------------ the report
    def report(self, ev: Evidence, chosen: dict[str, Any] | None) -> Diagnosis:
        """The diagnosis: the conclusion drawn again with every point (the what-if's too, at
        the prediction it was tried with), and what was measured."""
        conclusion = self.conclude(ev, self.held_out)
        ev = conclusion.evidence
        b = self.baseline
        w = self.workers
        breakdown = {"fetch_s": self.items.fetch_s, "collate_s": self.items.collate_s,
                     "send_s": self.handover.send_s if w else None,
                     "receive_s": self.handover.receive_s if w else None,
                     "pin_s": self.pin_s, "step_s": ev.step_s, "s_per_batch": ev.s_per_batch, "wait_s": ev.wait_s,
                     "item_cpu_share": self.items.cpu_share}
        for k, run in sorted(self.scaling.items()):
            if run.measured and not _counts(run):
                self.notes.append(f"{run.label}: {run.timing.n_batches[0]} timed batches, fewer than the "
                                  f"{min_timed(run.num_workers)} a point needs (two rounds of its workers, at least "
                                  f"{MIN_TIMED}: one can be a burst): not measured")
        scaling = conclusion.scaling_rows([
            {"num_workers": k, "label": run.label, "s_per_batch": run.s_per_batch if _counts(run) else None,
             "spread": _halves_spread(run), "timed_batches": run.timing.n_batches[0] if run.measured else 0,
             "what_if": k in self.held_out}
            for k, run in sorted(self.scaling.items())])
        memory = self.memory_figures(ev, named="memory-growth" in conclusion.causes)
        try_first = None
        if chosen is not None:
            try_first = {k: chosen.get(k) for k in ("setting", "value", "predicted_speedup", "measured_speedup", "why")}
            if chosen.get("note"):
                try_first["note"] = chosen["note"]
        gpu = b.gpu_busy_s / b.timed_wall_s if b.gpu_busy_s is not None and b.measured else None
        load = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
        disturbances = []
        if load is not None and load > self.cores:
            self.notes.append(f"the machine was busy (load average {load:.1f} on {self.cores} cores): "
                              "timings are noisier than on a quiet machine")
            others = self.cores - ev.available_cores  # the load counts the loop's own processes too
            if others >= BUSY_OTHERS * self.cores:
                disturbances.append(f"load average {load:.1f} on {self.cores} cores, other programs holding "
                                    f"{others:.1f} of them during the baseline")
        step = (f"a simulated accelerator, {ms(self.step_s)} a step" if self.step is None
                else f"your step ({ms(ev.step_s)} measured)")
        probes = self.probe_readings()
        for name, reading in probes.items():
            note = disagreement_note(name, reading, ev.s_per_batch) if reading is not None else None
            if note:
                self.notes.append(note)
                disturbances.append(f"the {name} probe's readings {reading.spread:.0%} apart")
        disturbed = disturbed_sentence(disturbances, ev) if disturbances else None
        model = {"costs": self.costs.to_dict(), "fixed_costs": self.fixed_costs.to_dict() if self.fixed_costs else None,
                 "thread_costs": self.thread_costs.to_dict() if self.thread_costs else None,
                 "probes": {k: (r.to_dict() if r is not None else None) for k, r in probes.items()},
                 "usable_cores": self.cores, "sharing": self.sharing_source}
        return conclusion.diagnosis(
            busy_share=b.busy_share if b.measured else 1 - ev.data_wait_share, try_first=try_first,
            breakdown=breakdown, scaling=scaling, memory=memory, settings=loader_settings(self.loader), step=step,
            runs=[_run_row(r) for r in self.runs], notes=self.notes, gpu_busy_share=gpu,
            elapsed_s=self.budget.elapsed_s, max_seconds=self.budget.max_seconds, model=model, disturbed=disturbed)

    def partial(self, ev: Evidence, what: str, err: BaseException) -> Diagnosis:
        """The diagnosis of the baseline alone, where ``what`` failed with ``err``: the causes
        its evidence shows, no model, no scaling, no what-if (said in a note)."""
        self.notes.append(f"{what} failed ({type(err).__name__}: {err}): the diagnosis rests on the item probe and "
                          "the baseline alone; the model, the scaling runs and the what-if are missing")
        b = self.baseline
        conclusion = conclude(replace(ev, points=self.points()[1]))
        return conclusion.diagnosis(
            busy_share=b.busy_share if b.measured else 1 - ev.data_wait_share,
            breakdown={"fetch_s": self.items.fetch_s, "collate_s": self.items.collate_s, "step_s": ev.step_s,
                       "s_per_batch": ev.s_per_batch, "wait_s": ev.wait_s, "item_cpu_share": self.items.cpu_share},
            memory=self.memory_figures(ev, named="memory-growth" in conclusion.causes),
            settings=loader_settings(self.loader), step=f"your step ({ms(ev.step_s)} measured)",
            runs=[_run_row(r) for r in self.runs], notes=self.notes, elapsed_s=self.budget.elapsed_s,
            max_seconds=self.budget.max_seconds)

    def probe_readings(self) -> dict[str, Reading | None]:
        """Every repeated probe's readings: the load of a batch, pinning, and the step in the baseline."""
        b = self.baseline
        step = None
        if b.measured and len(b.timing.steps_s[0]) >= 4:
            step = Reading(_chunk_means(b.timing.steps_s[0], 4), threads=torch_threads_now())
        return {"load": self.items.load_reading, "pinning, one thread": self.pinning["one_thread"],
                "pinning, main thread": self.pinning["main_thread"], "step alone": self.step_alone,
                "step": step}

    def memory_figures(self, ev: Evidence, named: bool) -> dict[str, Any]:
        """Each worker's USS growth and its projection over an epoch (the report says the
        projection in words only where ``memory-growth`` was named: growth that is not
        steady, such as a worker's first allocations, does not go on)."""
        if self.workers == 0:
            return {"per_worker_mb": [], "reason": "0 workers: no worker to measure"}
        growth = ev.memory
        if growth is None:
            return {"per_worker_mb": [], "reason": "the baseline was not measured"}
        if not growth.per_worker_mb:
            return {"per_worker_mb": [], "reason": growth.reason}
        projected = ev.projected_epoch_mb
        return {"per_worker_mb": growth.per_worker_mb, "items_per_worker": growth.items_per_worker,
                "kb_per_item": growth.kb_per_item,
                "projected_epoch_mb": projected if math.isfinite(projected) else None, "named": named, "reason": None}


def _timed(call: Callable[[], Any]) -> tuple[Any, float, float]:
    """``call()``, its wall seconds and its CPU seconds on this thread."""
    start, cpu = time.perf_counter(), time.thread_time()
    out = call()
    return out, time.perf_counter() - start, time.thread_time() - cpu


def disturbed_sentence(disturbances: list[str], ev: Evidence) -> str:
    """Why the readings were disturbed, and the reading the verdict rests on: the baseline's
    wait for data against its step (a step stretched by a busy machine can turn an
    input-bound loop compute-bound)."""
    return (f"{'; '.join(disturbances)}. The verdict rests on the baseline's wait for data, {ms(ev.wait_s)} a "
            f"batch, against its step, {ms(ev.step_s)}: a busy machine stretches either; run it again on a quiet "
            "machine before acting on it")


def torch_threads_now() -> int:
    """The torch threads of this process (what the main process's own work runs on)."""
    import torch

    return torch.get_num_threads()


def _chunk_means(values: list[float], chunks: int) -> list[float]:
    """The means of ``values`` cut into ``chunks`` consecutive runs of (about) equal length."""
    size = len(values) / chunks
    return [statistics.fmean(values[round(k * size):round((k + 1) * size)]) for k in range(chunks)]


def _counts(run: Run) -> bool:
    """Whether a run timed enough batches to be a point of the model's check."""
    return run.measured and run.timing.n_batches[0] >= min_timed(run.num_workers)


def _halves_spread(run: Run) -> float | None:
    """How far the two halves of a run's timed batches differ in time per batch, over their
    mean: near 0 at a steady state, large where start-up or noise entered (None: too few)."""
    if not run.measured or run.timing.n_batches[0] < 4:
        return None
    per_batch = [w + s for w, s in zip(run.timing.waits_s[0], run.timing.steps_s[0])]
    first, second = _chunk_means(per_batch, 2)
    mean = (first + second) / 2
    return abs(first - second) / mean if mean > 0 else None


def _run_row(run: Run) -> dict[str, Any]:
    t = run.timing
    return {"label": run.label, "num_workers": run.num_workers, "s_per_batch": run.s_per_batch if t else None,
            "wait_share": run.wait_share if t else None, "startup_s": t.first_startup_s if t else None,
            "step_s": run.step_s if t else None, "warmup": t.warmup if t else None,
            "timed_batches": t.n_batches[0] if t else 0, "spread": _halves_spread(run), "cpu": run.cpu,
            "gpu_busy_s": run.gpu_busy_s, "reason": run.reason}


def diagnose(loader: DataLoader, step: Callable[[Any], Any] | None = None, *, step_s: float | None = None,
             max_seconds: float = 60, try_fix: bool = True, progress: bool = True,
             spare_s: float = 0.0) -> Diagnosis:
    """Measure a DataLoader feeding a training step, name what keeps the step waiting, and try a fix.

    See :mod:`feedgpu.diagnosis` for what is measured and the vocabulary of causes.

    Args:
        loader: any ``torch.utils.data.DataLoader`` (map-style or iterable, any workers,
            pinning, persistence or collate). It is never iterated itself: every run reads
            a sample of its batches through a new loader with its settings.
        step: your training step, a callable taking a batch; or
        step_s: a fixed step time in seconds, run on a simulated accelerator (a sleep, as a
            GPU step holds the host). Exactly one of the two.
        max_seconds: the wall time the whole diagnosis may take, what-if included (a batch
            in progress is finished first: one slow batch can run past it).
        try_fix: build the loader with the setting to try first, measure it the same way,
            and report the measured speed-up beside the predicted one.
        progress: show a progress bar over the phases (tqdm).
        spare_s: seconds past ``max_seconds`` the what-if may take where too little of the
            budget is left to time it (``feedgpu-diagnose run`` lends the second run's reserve).

    Returns:
        A :class:`~feedgpu.diagnosis.report.Diagnosis`.

    Raises:
        TypeError: ``loader`` is not a DataLoader, ``step`` is not callable, or a number is not a number.
        ValueError: both or neither of ``step`` and ``step_s``; ``step_s`` negative or not
            finite; ``max_seconds`` not above 0; the loader's workers cannot start under its
            start method (a dataset defined in a notebook under *spawn*: the message says
            how to fix it); the dataset has no items.
    """
    step_s, max_seconds = _check_arguments(loader, step, step_s, max_seconds)
    problem = check_importable(loader)
    if problem:
        raise ValueError(f"the loader's workers cannot start ({start_method_of(loader)}): {problem}")
    budget = Budget(max_seconds, progress, check_seconds("spare_s", spare_s))
    state = _Diagnosis(loader, step, step_s, budget, try_fix)
    try:
        state.probe()
        state.measure_baseline()
        ev = state.evidence()
        chosen = None
        try:
            state.hand_over(ev, find_causes(ev))  # what to probe follows the causes the baseline shows
        except Exception as err:  # noqa: BLE001 - the baseline stands: a partial diagnosis, saying why
            return state.partial(ev, "the hand-over probe", err)
        try:
            state.scale()
            chosen_from = state.conclude(ev)  # the model checked against its points, before it advises
            state.corrected = chosen_from.costs
            tries = state.choose_tries(chosen_from)
            chosen = tries[0] if tries else None
            if chosen is not None and try_fix:
                state.what_if(chosen)
        except Exception as err:  # noqa: BLE001 - what was measured stands, the rest is said to be missing
            state.notes.append(f"the diagnosis stopped in its {'what-if' if chosen else 'scaling runs'}: "
                               f"{type(err).__name__}: {err}; what it measured before stands, "
                               f"{'the what-if is' if chosen else 'the scaling and the what-if are'} missing")
            if chosen is not None:
                chosen.setdefault("note", f"not measured ({type(err).__name__}: {err})")
        return state.report(ev, chosen)
    finally:
        budget.close()
