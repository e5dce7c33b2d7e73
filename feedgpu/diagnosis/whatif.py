"""The setting to try first, and what the course's model predicts it buys.

The model is :func:`feedgpu.model.steady_state_time_per_batch`, fed with what the
diagnosis measured (:class:`Costs`): a batch's load time in one process, the step, both
sides of the hand-over, and the cores. Loading and handing over need a core only for the
CPU part of their time: waiting items (a disk, a network, a sleep) leave room for more
workers than cores, computing ones do not. The model's ``cores`` floor charges the whole
of ``load_s + send_s + receive_s`` to the cores, so it is given the cores scaled by the
share of that time that is CPU (:meth:`Costs.model_cores`): the floor then equals the
CPU work per batch over the free cores. A step that itself computes (a user's step on
this CPU) keeps that share of a core.

One setting per cause that a loader setting fixes:

* ``main-process-loading``, ``too-few-workers``: ``num_workers``, the fewest workers that
  reach the model's best time with the loading stage at most 80% of the main process's
  (so the pipeline does not run balanced on a knife's edge), or else the fewest within 2%
  of the best (:func:`choose_workers`);
* ``hand-over`` of pickled numpy arrays: ``collate_fn``, the user's collate wrapped so
  that arrays cross as tensors in shared memory
  (:class:`~feedgpu.diagnosis.collate.SharedTensorCollate`);
* ``worker-start-up``: ``persistent_workers=True``; the epoch then starts with one
  batch's load time instead of the measured start-up.

``cpu-saturated``, ``memory-growth`` and a hand-over the collate does not cause are fixed
outside the loader's settings: the diagnosis says what to change, and tries nothing.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from ..model import BALANCE_TOLERANCE, explain_bottleneck, steady_state_time_per_batch

__all__ = ["Costs", "MAX_WORKERS", "HEADROOM", "choose_workers", "epoch_speedup"]

#: The most workers the diagnosis considers (more than cores help only items that wait).
MAX_WORKERS = 16
#: The loading stage's share of the main process's time that the chosen worker count aims for.
HEADROOM = 0.8


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
        step_cpu_share: the share of one core the step keeps busy while it runs.
    """

    load_s: float
    step_s: float
    send_s: float
    receive_s: float
    cpu_share: float
    cores: float
    step_cpu_share: float = 0.0

    def model_cores(self) -> float | None:
        """Cores for the model's floor, scaled so it charges only CPU time; None: no floor."""
        cpu = self.load_s * self.cpu_share + self.send_s + self.receive_s
        if cpu <= 0:
            return None
        free = max(self.cores - self.step_cpu_share, 0.5)
        return free * (self.load_s + self.send_s + self.receive_s) / cpu

    def s_per_batch(self, num_workers: int) -> float:
        """The model's seconds per batch with ``num_workers`` workers."""
        if num_workers == 0:
            return steady_state_time_per_batch(0, self.load_s, self.step_s)
        return steady_state_time_per_batch(num_workers, self.load_s, self.step_s, self.send_s,
                                           cores=self.model_cores(), receive_s=self.receive_s)

    def explain(self, num_workers: int) -> str:
        """The model in words: :func:`feedgpu.model.explain_bottleneck`, or, where the cores
        set the pace (which that function leaves out), a sentence saying so."""
        pace = self.s_per_batch(num_workers)
        cores = self.model_cores()
        if num_workers and cores is not None:
            floor = (self.load_s + self.send_s + self.receive_s) / cores
            if floor >= pace * (1 - BALANCE_TOLERANCE):
                cpu = self.load_s * self.cpu_share + self.send_s + self.receive_s
                return (f"The cores set the pace: a batch needs {cpu * 1e3:.3g} ms of CPU to load and hand over, "
                        f"and this loop could have {self.cores:.2g} of the cores, so the model's best is one batch "
                        f"every {pace * 1e3:.3g} ms whatever the number of workers.")
        return explain_bottleneck(num_workers, self.load_s, self.step_s, self.receive_s if num_workers else 0.0)

    def with_hand_over(self, load_s: float, load_cpu_s: float, send_s: float, receive_s: float) -> Costs:
        """The same costs with another collate's load (``load_cpu_s`` of it CPU) and hand-over."""
        share = min(load_cpu_s / load_s, 1.0) if load_s > 0 else 0.0
        return replace(self, load_s=load_s, cpu_share=share, send_s=send_s, receive_s=receive_s)


def max_workers(cores: float) -> int:
    """The largest worker count considered: 4 per core, at most :data:`MAX_WORKERS`."""
    return max(1, min(MAX_WORKERS, int(4 * cores)))


def choose_workers(costs: Costs, current: int, top: int) -> tuple[int | None, str]:
    """The worker count to try, at most ``top`` (see the module's docstring), and why; None
    when none beats ``current``."""
    times = {w: costs.s_per_batch(w) for w in range(1, top + 1)}
    best = min(times.values())
    main = costs.step_s + costs.receive_s
    candidates = [w for w in range(current + 1, top + 1)]
    for w in candidates:
        if times[w] <= best * 1.02 and (costs.load_s + costs.send_s) / w <= HEADROOM * main:
            return w, (f"the fewest workers that, by the model, deliver a batch in at most {HEADROOM:.0%} of the "
                       "main process's time per batch")
    for w in candidates:
        if times[w] <= best * 1.02:
            return w, "the fewest workers that reach the model's best time per batch on these cores"
    return None, "the model predicts no gain from more workers"


def epoch_speedup(startup_s: float, new_startup_s: float, batches: int, s_per_batch: float,
                  new_s_per_batch: float | None = None) -> float:
    """How much faster an epoch of ``batches`` runs with another start-up (and pace)."""
    new_pace = s_per_batch if new_s_per_batch is None else new_s_per_batch
    now = startup_s + (batches - 1) * s_per_batch
    new = new_startup_s + (batches - 1) * new_pace
    return now / new if new > 0 else math.nan
