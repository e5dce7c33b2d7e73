"""The setting to try first, and what the course's model predicts it buys.

The model is :func:`feedgpu.models.pipeline.steady_state_time_per_batch`, fed with what the
diagnosis measured (:class:`Costs`): a batch's load time in one process, the step, both
sides of the hand-over, pinning, and the cores. Two things are added to the course's
formula, both measured on real machines where it fell short:

* **The main process's own work.** Besides the step it receives each batch and, with
  ``pin_memory=True``, pins it (its pin thread, one torch thread; with 0 workers the main
  thread itself, on torch's threads). Those are its time per batch, not a loading stage:
  the main process's stage is ``step + receive + pin``.
* **The cores it shares.** The main process's CPU work per batch (the step's host part,
  ``step_s * step_cpu_share``, receiving and pinning: :meth:`Costs.main_cpu_s`) can run slower while the
  workers keep other cores busy: a core's other hardware thread, its caches, the memory
  bus and the clock (a CPU runs all its cores slower than one) are shared. The model
  charges that work ``sharing * busy / cores`` more, where ``busy`` is the cores the
  workers keep busy at the main process's pace (their CPU per batch over its seconds per
  batch, at most one per worker) and ``sharing`` how much a busy core slows it (1: as
  much as its share of the cores; 0: not at all). The diagnosis measures ``sharing``
  where its baseline ran workers (the step timed alone, then beside them); on an H200
  with 16 cores, where the loop stopped at about 10 ms a batch at 12 and 15 workers while
  the formula without this term said 8.1, ``sharing = 1`` brings the model within 5%.

* **A resource the workers share.** Where the workers hold one resource for part of
  every batch (a lock, one file handle or connection, a service that takes so many
  requests a second), ``serial_s`` seconds of it per batch, the workers' stage is a closed
  queue: each worker spends the rest of its batch (``load_s + send_s - serial_s``) on its
  own and then queues for the resource. Its pace with ``w`` workers
  (:func:`shared_resource_s`) is ``(load_s + send_s) / w`` while the resource is seldom
  busy, ``serial_s`` once it is always busy, and between the two a curve that charges
  the queueing: mean-value analysis where the holds are as irregular as random ones
  (``serial_cv2 = 1``), none at all where every hold is the same (``serial_cv2 = 0``, a
  lock around fixed work: the workers queue only once together they ask more than it
  serves). ``serial_s`` and ``serial_cv2`` are not probed: they are fitted to the
  measured points when the probes' model misses them (:mod:`.fitting`), as is
  ``load_scale``, the workers' load relative to the item probe's.
* **The main process's floor.** Its seconds per batch when batches are ready (the step,
  receiving and pinning at a high batch rate) are measured by a run whose workers only
  collate and send ready items (``main_floor_s``); the model takes that instead of the sum
  of its probes, which leave out what a loop pays per batch besides (freeing a batch, the
  loader's bookkeeping) and time receiving with a pause before each batch.

Loading and handing over need a core only for the CPU part of their time: waiting items
(a disk, a network, a sleep) leave room for more workers than cores, computing ones do
not. The cores deliver at most one batch every ``CPU per batch / cores`` seconds, where
the CPU per batch is the workers' (``load_s * cpu_share + send_s``) and the main
process's (:meth:`Costs.floor_s`).

One setting per cause that a loader setting fixes:

* ``main-process-loading``, ``too-few-workers``, ``serialised``: ``num_workers``, the
  fewest workers that reach the model's best time with the loading stage at most 80% of
  the main process's (so the pipeline does not run balanced on a knife's edge), or else
  the fewest within 2% of the best (:func:`choose_workers`), by the model checked against
  the measured points (:mod:`.fitting`); for ``serialised`` that is the model with the
  resource the workers share, which advises workers only up to its pace, and among
  those the fewest that ask for it a quarter more often than it serves (with holds of
  equal length the model's knee is sharp, and a count at the knee runs on its edge);
* ``hand-over`` of pickled numpy arrays: ``collate_fn``, the user's collate wrapped so
  that arrays cross as tensors in shared memory
  (:class:`~feedgpu.diagnosis.handover_fix.SharedTensorCollate`);
* ``worker-start-up``: ``persistent_workers=True``; the epoch then starts with one
  batch's load time instead of the measured start-up;
* ``thread-oversubscription``: ``worker_init_fn``, the loader's own wrapped so that every
  thread pool of a worker keeps one thread
  (:class:`~feedgpu.diagnosis.sensing.threads.OneThreadPerPool`). The prediction is the measured
  pace over the model's with the items timed on one thread per pool (``thread_costs``):
  the oversubscribed pace is measured, what the items cost without it is timed.

``cpu-saturated``, ``memory-growth`` and a hand-over the collate does not cause are fixed
outside the loader's settings: the diagnosis says what to change, and tries nothing.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields, replace
from typing import Any

from ..models.pipeline import BALANCE_TOLERANCE, explain_bottleneck, steady_state_time_per_batch

__all__ = ["Costs", "MAX_WORKERS", "HEADROOM", "BAND", "choose_workers", "epoch_speedup", "max_workers",
           "shared_resource_s"]

#: The most workers the diagnosis considers (more than cores help only items that wait).
MAX_WORKERS = 16
#: The loading stage's share of the main process's time that the chosen worker count aims for.
HEADROOM = 0.8
#: Measured / predicted seconds per batch within which the model describes a measured point.
BAND = (0.75, 1.33)


def shared_resource_s(workers: int, cycle_s: float, serial_s: float, serial_cv2: float = 1.0) -> float:
    """Seconds per batch ``workers`` workers deliver when each batch takes ``cycle_s`` of
    one worker, ``serial_s`` of it holding a resource they all share.

    A closed queue: ``workers`` customers, each thinking ``cycle_s - serial_s`` and then
    queueing for one server that serves ``serial_s``. How long they queue depends on how
    irregular the holds are, ``serial_cv2`` (their squared coefficient of variation):

    * ``serial_cv2 = 1``, holds as irregular as random (exponential) ones: mean-value
      analysis (Reiser and Lavenberg, 1980), exact for them. With ``n`` customers the
      server's residence time is ``serial_s * (1 + q(n - 1))``, the throughput ``n / (think
      + residence)`` and the queue ``q(n) = throughput * residence`` (Little's law): a
      queue forms well before the resource is always busy.
    * ``serial_cv2 = 0``, every hold the same (a lock around fixed work, a service at a
      fixed rate): the workers fall into step and never queue until together they ask
      more than it serves, so the pace is ``max(cycle_s / workers, serial_s)``, exact for
      holds and thinking of fixed length.
    * between the two, the pace in proportion to ``serial_cv2`` (an interpolation, not a
      theorem: it is exact only at both ends).

    Without a shared part it is ``cycle_s / workers``; with one it never beats ``serial_s``.

    Raises:
        ValueError: ``workers`` below 1.
    """
    if workers < 1:
        raise ValueError(f"workers must be at least 1, got {workers!r}")
    serial = min(max(serial_s, 0.0), cycle_s)
    if serial <= 0:
        return cycle_s / workers
    think, queued = cycle_s - serial, 0.0
    for n in range(1, workers + 1):
        residence = serial * (1 + queued)
        throughput = n / (think + residence)
        queued = throughput * residence
    random_holds, equal_holds = 1 / throughput, max(cycle_s / workers, serial)
    return equal_holds + min(max(serial_cv2, 0.0), 1.0) * (random_holds - equal_holds)


@dataclass
class Costs:
    """Seconds per batch of each stage, and the cores, as the model takes them.

    Attributes:
        load_s: one process builds one batch (items and collate).
        step_s: the training step.
        send_s: the worker's part of the hand-over.
        receive_s: the main process's part of the hand-over.
        cpu_share: the CPU share of ``load_s`` (1 computes, 0 waits).
        cores: the cores the loop can have: the usable ones, or fewer where other programs
            kept some busy while the baseline ran (see :meth:`Evidence.available_cores`).
        step_cpu_share: the share of one core the step keeps busy while it runs (its
            host part: launching kernels, or all of it for a step on this CPU).
        pin_s: pinning one batch on one thread (the loader's pin thread, with workers);
            0 without an accelerator or ``pin_memory``.
        pin_main_s: pinning one batch on torch's threads (the main thread, with 0
            workers); None: the same as ``pin_s``.
        storage_s: seconds the storage needs per batch at the rate the workers reached
            together, where the diagnosis found them ``storage-bound`` (0: no limit known): no
            number of workers reads a batch faster.
        sharing: how much the main process's CPU work slows per busy core, as a share of
            the cores (0 to 1; see the module's docstring).
        load_scale: the workers' load per batch over ``load_s`` (1: as the item probe
            timed it; fitted where the measured points say otherwise, :mod:`.fitting`).
        serial_s: seconds per batch the workers hold one resource they share (0: none
            known; fitted, :mod:`.fitting`).
        serial_cv2: how irregular those holds are, the squared coefficient of variation of
            one (1: as random ones, the queue's own assumption; 0: every hold the same;
            fitted with ``serial_s`` where the points show it, :func:`shared_resource_s`).
        main_floor_s: the main process's seconds per batch when batches are ready, measured
            at a high batch rate (None: not measured, the sum of its probes stands).
        step_threads: the threads the step keeps busy (its process's CPU over its thread's:
            a step on torch's threads keeps more than one), each for its host part.
    """

    load_s: float
    step_s: float
    send_s: float
    receive_s: float
    cpu_share: float
    cores: float
    step_cpu_share: float = 0.0
    pin_s: float = 0.0
    pin_main_s: float | None = None
    sharing: float = 1.0
    storage_s: float = 0.0
    load_scale: float = 1.0
    serial_s: float = 0.0
    serial_cv2: float = 1.0
    main_floor_s: float | None = None
    step_threads: float = 1.0

    # ------------------------------------------------------------------ the stages
    @property
    def worker_load_s(self) -> float:
        """Seconds one worker needs to build a batch: the probe's load times ``load_scale``."""
        return self.load_s * self.load_scale

    @property
    def worker_cycle_s(self) -> float:
        """Seconds one worker spends on a batch: building it and its part of the hand-over."""
        return self.worker_load_s + self.send_s

    def worker_cpu_s(self) -> float:
        """CPU seconds the workers spend per batch: the CPU part of loading, and sending."""
        return self.worker_load_s * self.cpu_share + self.send_s

    def workers_s(self, num_workers: int) -> float:
        """Seconds per batch ``num_workers`` (> 0) workers deliver, the cores aside: their
        load and sending over their count, or the queue for a resource they share
        (:func:`shared_resource_s`)."""
        return shared_resource_s(num_workers, self.worker_cycle_s, self.serial_s, self.serial_cv2)

    def main_alone_s(self) -> float:
        """The main process's seconds per batch with nothing else busy: its floor measured at
        a high batch rate, or, where it was not measured, the sum of its probes (its step,
        receiving and pinning)."""
        return self.step_s + self.receive_s + self.pin_s if self.main_floor_s is None else self.main_floor_s

    def main_cpu_s(self) -> float:
        """CPU seconds the main process spends per batch beside the workers: the step's
        host part (on each of the threads it keeps busy), receiving and pinning."""
        return self.step_s * self.step_cpu_share * self.step_threads + self.receive_s + self.pin_s

    def floor_s(self) -> float | None:
        """The cores' pace: all the CPU a batch needs over the cores; None when it needs none."""
        cpu = self.worker_cpu_s() + self.main_cpu_s()
        return cpu / max(self.cores, 0.5) if cpu > 0 else None

    def main_s(self, num_workers: int) -> float:
        """The main process's seconds per batch with ``num_workers`` workers (> 0): its step,
        receiving and pinning, its CPU part slowed by the cores the workers keep busy.

        The busy cores depend on the pace, and the pace on the main process: with ``a`` the
        main process's time alone, ``m`` its CPU times ``sharing``, ``c`` the cores and ``L``
        the workers' CPU per batch, it solves ``p = a + m/c * min(K, L/p)`` (``K``: the
        workers, at most the cores), whose root is the lesser of ``a + m*K/c`` and
        ``(a + sqrt(a^2 + 4mL/c)) / 2``.
        """
        alone = self.main_alone_s()
        m, cores = self.sharing * self.main_cpu_s(), max(self.cores, 0.5)
        if m <= 0 or num_workers <= 0:
            return alone
        all_busy = alone + m * min(num_workers, cores) / cores
        paced = (alone + math.sqrt(alone ** 2 + 4 * m * self.worker_cpu_s() / cores)) / 2
        return min(all_busy, paced)

    def s_per_batch(self, num_workers: int) -> float:
        """The model's seconds per batch with ``num_workers`` workers."""
        if num_workers == 0:
            pin = self.pin_s if self.pin_main_s is None else self.pin_main_s
            return steady_state_time_per_batch(0, self.load_s, self.step_s + pin)
        # the course's formula, max(main, (load + send) / w), with the workers' stage queueing
        # for a resource they share where one was found (the same where none was)
        pace = max(self.main_s(num_workers), self.workers_s(num_workers))
        floor = self.floor_s()
        return max(pace if floor is None else max(pace, floor), self.storage_s)

    def by_workers(self, top: int) -> dict[str, float]:
        """The model's seconds per batch for 0 to ``top`` workers, keyed by the count as a string."""
        return {str(w): self.s_per_batch(w) for w in range(top + 1)}

    def pace_setter(self, num_workers: int) -> str | None:
        """What beyond the course's two stages sets the model's pace with ``num_workers``
        workers: ``"shared"`` (a resource the workers share), ``"storage"`` or ``"cores"``;
        None where the workers or the main process do (and with 0 workers)."""
        if num_workers <= 0:
            return None
        below = self.s_per_batch(num_workers) * (1 - BALANCE_TOLERANCE)
        floor = self.floor_s()
        if self.serial_s > 0 and self.workers_s(num_workers) >= below:
            return "shared"
        if self.storage_s >= below:
            return "storage"
        if floor is not None and floor >= below:
            return "cores"
        return None

    def fed(self, num_workers: int) -> bool:
        """Whether, in the model, ``num_workers`` (> 0) workers keep the loop fed: what sets its
        pace is the main process (its step, receiving, pinning), not the workers, a resource
        they share, the storage or the cores, so the loop never waits for data."""
        return (num_workers > 0 and self.pace_setter(num_workers) is None
                and self.workers_s(num_workers) < self.s_per_batch(num_workers) * (1 - BALANCE_TOLERANCE))

    def explain(self, num_workers: int) -> str:
        """The model in words: :func:`feedgpu.models.pipeline.explain_bottleneck`, or, where the cores
        set the pace (which that function leaves out), a sentence saying so."""
        pace = self.s_per_batch(num_workers)
        setter = self.pace_setter(num_workers)
        if setter == "shared":
            return (f"A resource the workers share sets the pace: each batch holds it {self.serial_s * 1e3:.3g} ms "
                    f"(fitted to the measured points), so {num_workers} "
                    f"{'worker delivers' if num_workers == 1 else 'workers deliver'} a batch every "
                    f"{pace * 1e3:.3g} ms and more workers would only queue for it.")
        if setter == "storage":
            return (f"The storage sets the pace: at the rate the workers reached together it needs "
                    f"{self.storage_s * 1e3:.3g} ms to deliver a batch's bytes, so the model's best is one batch "
                    f"every {pace * 1e3:.3g} ms whatever the number of workers.")
        if setter == "cores":
            cpu = self.worker_cpu_s() + self.main_cpu_s()
            return (f"The cores set the pace: a batch needs {cpu * 1e3:.3g} ms of CPU to load, hand over and step, "
                    f"and this loop could have {self.cores:.2g} of the cores, so the model's best is one batch "
                    f"every {pace * 1e3:.3g} ms whatever the number of workers.")
        if num_workers == 0:
            pin = self.pin_s if self.pin_main_s is None else self.pin_main_s
            text = explain_bottleneck(0, self.load_s, self.step_s)
            return text + (f" Pinning each batch adds {pin * 1e3:.3g} ms in the main thread." if pin > 0 else "")
        main = self.main_s(num_workers)
        text = explain_bottleneck(num_workers, self.worker_load_s, main - self.receive_s, self.receive_s)
        floor = self.main_alone_s() - self.step_s - self.receive_s - self.pin_s
        shared = main - self.main_alone_s()
        extra = [f"pinning {self.pin_s * 1e3:.3g} ms" if self.pin_s > 0 else "",
                 f"{floor * 1e3:+.3g} ms to its floor measured at a high batch rate" if abs(floor) > 1e-5 else "",
                 f"{shared * 1e3:.3g} ms for sharing the cores with busy workers" if shared > 1e-5 else ""]
        extra = [e for e in extra if e]
        if extra:
            text += (f" (The main process's {(main - self.receive_s) * 1e3:.3g} ms besides receiving are its step, "
                     f"{self.step_s * 1e3:.3g} ms, {', '.join(extra[:-1]) + ' and ' if len(extra) > 1 else ''}"
                     f"{extra[-1]}.)")
        return text

    def with_hand_over(self, load_s: float, load_cpu_s: float, send_s: float, receive_s: float) -> Costs:
        """The same costs with another collate's load (``load_cpu_s`` of it CPU) and hand-over."""
        share = min(load_cpu_s / load_s, 1.0) if load_s > 0 else 0.0
        return replace(self, load_s=load_s, cpu_share=share, send_s=send_s, receive_s=receive_s)

    # ------------------------------------------------------------------ JSON
    def to_dict(self) -> dict[str, Any]:
        """Every input as a plain dict (the diagnosis JSON's ``model.costs``)."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Costs:
        """The costs written by :meth:`to_dict` (unknown keys ignored, missing optional ones defaulted)."""
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in names and v is not None})


def max_workers(cores: float) -> int:
    """The largest worker count considered: 4 per core, at most :data:`MAX_WORKERS`."""
    return max(1, min(MAX_WORKERS, int(4 * cores)))


def choose_workers(costs: Costs, current: int, top: int, avoid: frozenset[int] | set[int] = frozenset()
                   ) -> tuple[int | None, str]:
    """The worker count to try, at most ``top`` (see the module's docstring), and why; None
    when none beats ``current``.

    ``avoid``: counts already measured. Where the count the rule picks is one of them and
    one worker more was not measured and predicts within 2% of its time, that one is tried
    instead, so that the what-if checks the model where it was not fitted; otherwise the
    count the rule picks stands, and the what-if measures it again.
    """
    times = {w: costs.s_per_batch(w) for w in range(1, top + 1)}
    best = min(times.values())
    candidates = [w for w in range(current + 1, top + 1)]
    rules = ((lambda w: times[w] <= best * 1.02 and costs.workers_s(w) <= HEADROOM * costs.main_s(w),
              f"the fewest workers that, by the model, deliver a batch in at most {HEADROOM:.0%} of the "
              "main process's time per batch"),
             (lambda w: times[w] <= best * 1.02 and 0 < costs.serial_s
              and costs.worker_cycle_s / w <= HEADROOM * costs.serial_s,
              f"the fewest workers that reach the model's best time asking for the resource they share "
              f"{1 / HEADROOM - 1:.0%} more often than it serves (so that holds a little longer than the fitted "
              "ones still keep it busy)"),
             (lambda w: times[w] <= best * 1.02,
              "the fewest workers that reach the model's best time per batch on these cores"))
    for rule, why in rules:
        chosen = next((w for w in candidates if rule(w)), None)
        if chosen is None:
            continue
        if chosen in avoid:  # one worker more at most: the advice stays the fewest that do the job
            fresh = next((w for w in candidates if w == chosen + 1 and w not in avoid
                          and times[w] <= times[chosen] * 1.02), None)
            if fresh is not None:
                return fresh, why + f" ({chosen} was measured already: {fresh} predicts the same and was not)"
        return chosen, why
    return None, "the model predicts no gain from more workers"


def epoch_speedup(startup_s: float, new_startup_s: float, batches: int, s_per_batch: float,
                  new_s_per_batch: float | None = None) -> float:
    """How much faster an epoch of ``batches`` runs with another start-up (and pace)."""
    new_pace = s_per_batch if new_s_per_batch is None else new_s_per_batch
    now = startup_s + (batches - 1) * s_per_batch
    new = new_startup_s + (batches - 1) * new_pace
    return now / new if new > 0 else math.nan


def _measured_choice(measured: dict[int, float], current: int) -> tuple[int | None, str, float]:
    """The fewest measured workers within 2% of the fastest measured, and its measured gain
    over the current count (None where the current count was not measured or nothing beats it)."""
    if current not in measured:
        return None, "", 0.0
    best = min(measured.values())
    chosen = min(w for w, s in measured.items() if s <= best * 1.02)
    return (chosen, "measured: the model does not explain the measured points, so only a measured count is "
            "advised, for the gain measured there", measured[current] / measured[chosen])


def predicted_tries(costs: Costs, num_workers: int, cores: float, causes: set[str], *,
                    fixed_costs: Costs | None = None, startup_s: float = math.nan, one_batch_s: float = math.nan,
                    batches_per_epoch: int | None = None, s_per_batch: float = math.nan,
                    thread_costs: Costs | None = None, measured: dict[int, float] | None = None,
                    trusted: bool = True) -> list[dict[str, Any]]:
    """The settings worth trying for ``causes``, each with the model's predicted speed-up, best first.

    One dict per setting: ``{"setting", "value", "why", "predicted_speedup"}`` (the
    collate's ``value`` is None: the caller names the collate it built). A ``num_workers``
    predicted under 1.05x is left out. Shared by the diagnosis and its replay.

    Args:
        costs: the loop's costs; ``num_workers``: its setting; ``cores``: the usable cores.
        causes: the ids found.
        fixed_costs: the costs with the shared-tensor collate, where it was probed.
        startup_s, one_batch_s, batches_per_epoch, s_per_batch: the epoch's figures, for
            ``persistent_workers``; ``s_per_batch``, the measured pace, also for ``worker_init_fn``.
        thread_costs: the costs with the items timed on one thread per pool, where they were.
        measured: seconds per batch measured by worker count (the scaling points). A count
            among them is tried only where no count that was not measured predicts as well.
        trusted: whether the model explains the measured points (:mod:`.fitting`). Where it
            does not, ``num_workers`` is chosen from the measured points alone: the fewest
            within 2% of the fastest measured, for the gain measured there. Either way no
            count is tried where every count measured beyond the current one gained under 5%:
            the points do not support a gain further on.
    """
    now = costs.s_per_batch(num_workers)
    tries: list[dict[str, Any]] = []
    measured = {w: s for w, s in (measured or {}).items() if s is not None and math.isfinite(s) and s > 0}
    if causes & {"main-process-loading", "too-few-workers", "serialised"}:
        if trusted:
            chosen, why = choose_workers(costs, num_workers, max_workers(cores), avoid=set(measured))
            # against the model's own pace at the current count (its errors then cancel), unless the
            # model misses that count's measurement: then against what was measured there
            base = measured.get(num_workers, now)
            base = now if BAND[0] <= base / now <= BAND[1] else base
            gain = base / costs.s_per_batch(chosen) if chosen is not None else 0.0
            pace = costs.s_per_batch(chosen) if chosen is not None else math.nan
            beyond = [s for w, s in measured.items() if w > num_workers]
            if num_workers in measured and beyond and measured[num_workers] / min(beyond) < 1.05:
                chosen = None  # every count measured beyond this one gained nothing: no gain is extrapolated
        else:
            chosen, why, gain = _measured_choice(measured, num_workers)
            pace = measured.get(chosen, math.nan)
        if chosen is not None and gain >= 1.05:
            tries.append({"setting": "num_workers", "value": chosen, "why": why, "predicted_speedup": gain,
                          "predicted_s_per_batch": pace})
    if fixed_costs is not None:
        tries.append({"setting": "collate_fn", "value": None,
                      "why": "the same collate, its numpy arrays carried as tensors in shared memory",
                      "predicted_speedup": now / fixed_costs.s_per_batch(num_workers)})
    if "thread-oversubscription" in causes and thread_costs is not None and math.isfinite(s_per_batch):
        tries.append({"setting": "worker_init_fn", "value": None,
                      "why": "the loader's own, then every thread pool of the worker at one thread (threadpoolctl)",
                      "predicted_speedup": s_per_batch / thread_costs.s_per_batch(num_workers)})
    if "worker-start-up" in causes and batches_per_epoch:
        tries.append({"setting": "persistent_workers", "value": True,
                      "why": "the workers started once, an epoch then starts with one batch's load",
                      "predicted_speedup": epoch_speedup(startup_s, one_batch_s, batches_per_epoch, s_per_batch)})
    return sorted(tries, key=lambda t: -t["predicted_speedup"])
