"""The course's model of the DataLoader pipeline: a formula, a small event simulation, and words.

The picture (``w = num_workers``)::

    worker 0: [load b0 + send][load b2 + send][load b4 + send] ...
    worker 1: [load b1 + send][load b3 + send] ...
    main:                     [recv b0][step b0][recv b1][step b1][recv b2] ...

* ``load_s``: seconds one worker needs to build one batch (read, decode, collate).
* ``transfer_s``: seconds to move one batch from a worker to the main process. We assume
  it is paid on both sides: the worker pickles and writes the batch, the main process
  reads and unpickles it. Numpy batches cost a lot here; tensors in shared memory little.
* ``step_s``: seconds of the training step on one batch.

The stages run at the same time, so in the steady state the pipeline runs at the pace of
its slowest stage (:func:`steady_state_time_per_batch`). :func:`simulate` plays the same
pipeline out batch by batch, with PyTorch's dispatch rules, start-up delay and random load
times, to show what the formula leaves out: the start-up transient and the waits caused by
variance, which a larger ``prefetch_factor`` absorbs, and a rate mismatch, which it cannot.

Its plot against measurement is :func:`feedgpu.plots.plot_model_vs_measured`.
"""

from __future__ import annotations

import heapq
import math
import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..base.checks import check_int, check_number, check_seconds

__all__ = [
    "steady_state_time_per_batch",
    "bottleneck_stage",
    "explain_bottleneck",
    "SimResult",
    "draw_load_times",
    "simulate",
]


#: Relative difference under which two stages count as balanced.
BALANCE_TOLERANCE = 0.05


def _check_costs(num_workers: int, load_s: float, step_s: float, transfer_s: float) -> None:
    check_int("num_workers", num_workers)
    for name, value in (("load_s", load_s), ("step_s", step_s), ("transfer_s", transfer_s)):
        check_seconds(name, value)


def _stage_times(
    num_workers: int, load_s: float, step_s: float, transfer_s: float, receive_s: float
) -> tuple[float, float]:
    """(seconds per batch the workers together need, seconds per batch the main needs)."""
    return (load_s + transfer_s) / num_workers, step_s + receive_s


def steady_state_time_per_batch(
    num_workers: int, load_s: float, step_s: float, transfer_s: float = 0.0, cores: float | None = None,
    receive_s: float | None = None,
) -> float:
    """Predicted seconds per batch of a training loop once the pipeline is full.

    * ``num_workers == 0``: the main process loads a batch, then steps on it, one after
      the other, so the costs add: ``load_s + step_s``. Nothing crosses a process
      boundary, so ``transfer_s`` is not paid.
    * ``num_workers = w > 0``: three stages work at the same time. Each worker needs
      ``load_s + transfer_s`` per batch (load, then pickle and send), so ``w`` workers
      together deliver one batch every ``(load_s + transfer_s) / w`` seconds. The main
      process needs ``transfer_s + step_s`` per batch (receive and unpickle, then step),
      and only one main process does this, however many workers there are. A pipeline
      of stages that overlap runs at the pace of its slowest stage::

          max(step_s + transfer_s, (load_s + transfer_s) / w)

      More workers shrink only the second term: once the main process is the slowest
      stage, extra workers (or a bigger queue) change nothing.
    * ``cores`` given: loading and handing over need a core, and only ``cores`` of them
      are free. Every batch costs ``load_s + 2 * transfer_s`` of CPU time (the worker
      builds and sends it, the main process receives it), so the cores deliver at most
      one batch every ``(load_s + 2 * transfer_s) / cores`` seconds, a third floor. The
      step is taken to run elsewhere (a GPU) or to wait, not on these cores. Leave
      ``cores`` out when loading waits (a disk, a network) instead of computing.
    * ``receive_s`` given: the two sides of a hand-over cost different amounts. A pickled
      batch costs both about the same (one writes every byte, the other reads it), which
      is what ``transfer_s`` alone assumes. A tensor in shared memory does not: the worker
      writes every byte into a fresh shared segment (``transfer_s``: more than writing
      private memory), while the main process only maps the segment it is handed and
      unmaps it afterwards (``receive_s``: about a millisecond, whatever the size). The
      main process then needs ``step_s + receive_s`` per batch, and a batch costs the
      cores ``load_s + transfer_s + receive_s``.

    Assumptions: constant costs (no variance); ``w`` no larger than the free cores
    when loading is CPU work (otherwise ``load_s`` itself grows); ``prefetch_factor`` of 2
    or more, so a worker always has its next batch index waiting (with 1, a worker sits
    idle while the main process receives its batch; see :func:`simulate`).

    Args:
        num_workers: DataLoader ``num_workers`` (0 = load in the main process).
        load_s: seconds one worker needs to produce one batch.
        step_s: seconds of the training step per batch.
        transfer_s: seconds to move one batch between processes, paid once by the
            worker and once by the main process.
        cores: cores free for loading and handing over (may be fractional), or
            ``None`` (default) when loading needs no core of its own.
        receive_s: seconds the main process pays to receive one batch, when that differs
            from the worker's ``transfer_s`` (default ``None``: the same).

    Returns:
        Seconds per batch in the steady state.

    Raises:
        ValueError: if ``num_workers`` is negative or not whole, a cost is negative
            or not finite, or ``cores`` is not above 0.
        TypeError: if an argument is not a number (see :mod:`feedgpu.base.checks`).

    Example: the Stack Overflow experiment (0.4 s to load, 0.05 s step) predicts 0.45,
    0.2, 0.1, 0.067 and 0.05 s per batch for 0, 2, 4, 6 and 8 workers.
    """
    _check_costs(num_workers, load_s, step_s, transfer_s)
    if cores is not None and check_number("cores", cores) <= 0:
        raise ValueError(f"cores must be > 0, got {cores!r}")
    receive_s = transfer_s if receive_s is None else check_seconds("receive_s", receive_s)
    if num_workers == 0:
        return load_s + step_s
    workers, main = _stage_times(num_workers, load_s, step_s, transfer_s, receive_s)
    if cores is None:
        return max(main, workers)
    return max(main, workers, (load_s + transfer_s + receive_s) / cores)


def bottleneck_stage(
    num_workers: int, load_s: float, step_s: float, transfer_s: float = 0.0
) -> str:
    """Name the stage that sets the pace, as one word a test can compare.

    Args:
        num_workers, load_s, step_s, transfer_s: as for
            :func:`steady_state_time_per_batch`.

    Returns:
        ``"serial"`` when ``num_workers == 0`` (nothing overlaps); ``"balanced"`` when
        the workers and the main process need within 5% of the same time per batch;
        ``"loading"`` when the workers are slower; otherwise the larger part of the main
        process's time: ``"step"`` or ``"transfer"``.

    Raises:
        ValueError: as for :func:`steady_state_time_per_batch`.
    """
    _check_costs(num_workers, load_s, step_s, transfer_s)
    if num_workers == 0:
        return "serial"
    workers, main = _stage_times(num_workers, load_s, step_s, transfer_s, transfer_s)
    if math.isclose(workers, main, rel_tol=BALANCE_TOLERANCE):
        return "balanced"
    if workers > main:
        return "loading"
    return "transfer" if transfer_s > step_s else "step"


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.3g} ms"


def _workers_deliver(n: int) -> str:
    return f"{n} worker delivers" if n == 1 else f"{n} workers deliver"


def explain_bottleneck(
    num_workers: int, load_s: float, step_s: float, transfer_s: float = 0.0
) -> str:
    """Say in one or two sentences which stage limits the loop and what would help.

    Args:
        num_workers, load_s, step_s, transfer_s: as for
            :func:`steady_state_time_per_batch`.

    Returns:
        A short explanation naming the bottleneck stage (see :func:`bottleneck_stage`).

    Raises:
        ValueError: as for :func:`steady_state_time_per_batch`.
    """
    stage = bottleneck_stage(num_workers, load_s, step_s, transfer_s)
    total = steady_state_time_per_batch(num_workers, load_s, step_s, transfer_s)
    if stage == "serial":
        return (
            f"No overlap: with 0 workers the main process loads ({_ms(load_s)}) and then "
            f"steps ({_ms(step_s)}), {_ms(total)} per batch; workers would load while "
            "the step runs."
        )
    workers, main = _stage_times(num_workers, load_s, step_s, transfer_s, transfer_s)
    if stage == "balanced":
        return (
            f"Balanced: {_workers_deliver(num_workers)} a batch every {_ms(workers)} and the "
            f"main process needs {_ms(main)}; neither waits long for the other."
        )
    if stage == "loading":
        needed = math.ceil((load_s + transfer_s) / main - 1e-9)
        return (
            f"Loading is the bottleneck: {_workers_deliver(num_workers)} a batch every "
            f"{_ms(workers)}, but the main process needs only {_ms(main)}. About "
            f"{needed} workers (cores permitting) or cheaper loading would help; a larger "
            "prefetch_factor would not, because the queue empties at a steady rate."
        )
    if stage == "transfer":
        return (
            f"Transfer is the bottleneck: the main process spends {_ms(transfer_s)} "
            f"receiving each batch and {_ms(step_s)} stepping, {_ms(main)} in all. More "
            "workers or prefetching cannot help; send less (uint8, smaller batches) or "
            "send tensors through shared memory instead of pickled arrays."
        )
    return (
        f"The training step is the bottleneck ({_ms(step_s)} of {_ms(main)} per batch): "
        f"the workers deliver a batch every {_ms(workers)}, so the loop never waits for "
        "data. This is the goal: the accelerator is kept busy."
    )


@dataclass
class SimResult:
    """What :func:`simulate` computed. Times are seconds from ``iter(loader)``.

    Attributes:
        num_workers, load_s, step_s, transfer_s, prefetch_factor, load_jitter,
            startup_s: the parameters simulated.
        loads_s: per batch, the load time drawn for it.
        ready_s: per batch, when it was ready for the main process (a worker finished
            loading and sending it; with 0 workers, when the main process finished
            loading it).
        got_s: per batch, when ``next()`` returned it to the training loop.
        done_s: per batch, when the training step on it finished.
        wait_s: per batch, time the loop spent inside ``next()`` (starved plus receiving),
            the quantity :func:`feedgpu.measure.timing.time_loader` measures as a wait.
        idle_s: per batch, the part of ``wait_s`` spent with nothing to do (starved).
        queue_t, queue_n: queue occupancy as a step function: from ``queue_t[k]`` on,
            ``queue_n[k]`` batches were ready but not yet returned by ``next()``.
        transient: batches left out of the steady-state figures (the start-up transient).
    """

    num_workers: int
    load_s: float
    step_s: float
    transfer_s: float
    prefetch_factor: int
    load_jitter: float
    startup_s: float
    loads_s: list[float]
    ready_s: list[float]
    got_s: list[float]
    done_s: list[float]
    wait_s: list[float]
    idle_s: list[float]
    queue_t: list[float]
    queue_n: list[int]
    transient: int

    @property
    def n_batches(self) -> int:
        """Number of batches simulated."""
        return len(self.done_s)

    @property
    def total_s(self) -> float:
        """Time from ``iter()`` until the step on the last batch finished."""
        return self.done_s[-1]

    @property
    def first_batch_s(self) -> float:
        """When ``next()`` returned the first batch: the start-up latency."""
        return self.got_s[0]

    def _window(self) -> int:
        """Batches in the steady-state window: after the transient, a whole number of
        worker rounds (so batches that arrive in bursts of ``w`` average out)."""
        period = max(self.num_workers, 1)
        available = self.n_batches - 1 - self.transient
        window = (available // period) * period
        return window if window >= 1 else max(available, 0)

    @property
    def steady_s_per_batch(self) -> float:
        """Seconds per batch after the start-up transient (between step completions)."""
        window = self._window()
        if window == 0:
            return self.total_s / self.n_batches
        last = self.n_batches - 1
        return (self.done_s[last] - self.done_s[last - window]) / window

    @property
    def mean_wait_s(self) -> float:
        """Mean time inside ``next()`` per batch, after the transient."""
        waits = self.wait_s[self.n_batches - self._window() :] if self._window() else self.wait_s
        return sum(waits) / len(waits)

    @property
    def mean_idle_s(self) -> float:
        """Mean time the loop was starved per batch, after the transient."""
        idles = self.idle_s[self.n_batches - self._window() :] if self._window() else self.idle_s
        return sum(idles) / len(idles)

    @property
    def wait_fraction(self) -> float:
        """``wait / (wait + step)`` after the transient, as in ``LoaderTiming``."""
        wait = self.mean_wait_s
        busy = wait + self.step_s
        return wait / busy if busy > 0 else math.nan

    @property
    def max_queue(self) -> int:
        """Most batches ever ready and waiting for the loop at once."""
        return max(self.queue_n)

    def as_dict(self) -> dict[str, Any]:
        """Parameters and summary figures as a flat dict (one DataFrame row)."""
        return {
            "num_workers": self.num_workers,
            "load_s": self.load_s,
            "step_s": self.step_s,
            "transfer_s": self.transfer_s,
            "prefetch_factor": self.prefetch_factor,
            "load_jitter": self.load_jitter,
            "startup_s": self.startup_s,
            "n_batches": self.n_batches,
            "steady_s_per_batch": self.steady_s_per_batch,
            "total_s": self.total_s,
            "first_batch_s": self.first_batch_s,
            "mean_wait_s": self.mean_wait_s,
            "mean_idle_s": self.mean_idle_s,
            "wait_fraction": self.wait_fraction,
            "max_queue": self.max_queue,
        }


def draw_load_times(n: int, load_s: float, jitter: float, seed: int) -> list[float]:
    """Draw ``n`` load times from a gamma distribution with mean ``load_s``.

    The gamma distribution is positive and skewed to the right (now and then a batch
    is much slower than usual), like real load times. Its coefficient of variation
    (standard deviation / mean) is ``jitter``: shape ``1 / jitter**2``, scale
    ``load_s * jitter**2``. Uses :class:`random.Random` with ``seed``, so the draws are
    the same on every machine.

    Args:
        n: how many load times.
        load_s: their mean, seconds.
        jitter: coefficient of variation; 0 gives ``n`` copies of ``load_s``.
        seed: the random seed.

    Returns:
        A list of ``n`` load times, in seconds.
    """
    if jitter == 0 or load_s == 0:
        return [float(load_s)] * n
    rng = random.Random(seed)
    shape, scale = 1.0 / jitter**2, load_s * jitter**2
    return [rng.gammavariate(shape, scale) for _ in range(n)]


def _queue_curve(ready: Sequence[float], got: Sequence[float]) -> tuple[list[float], list[int]]:
    """Occupancy of 'ready but not yet returned' as a step function of time."""
    events = [(t, +1) for t in ready] + [(t, -1) for t in got]
    events.sort(key=lambda e: (e[0], -e[1]))  # at equal times, arrivals first
    times, counts, n = [0.0], [0], 0
    for t, delta in events:
        n += delta
        if t == times[-1]:
            counts[-1] = n
        else:
            times.append(t)
            counts.append(n)
    return times, counts


def _simulate_serial(loads: list[float], step_s: float) -> dict[str, list[float]]:
    """0 workers: the main process loads each batch inside ``next()``, then steps."""
    out: dict[str, list[float]] = {k: [] for k in ("ready", "got", "done", "wait", "idle")}
    t = 0.0
    for load in loads:
        t += load
        out["ready"].append(t)
        out["got"].append(t)
        out["wait"].append(load)
        out["idle"].append(load)  # the training step waits for all of it
        t += step_s
        out["done"].append(t)
    return out


def _simulate_workers(
    loads: list[float],
    num_workers: int,
    step_s: float,
    transfer_s: float,
    prefetch_factor: int,
    startup_s: float,
) -> dict[str, list[float]]:
    """w workers with PyTorch's in-order dispatch (see :func:`simulate`)."""
    n = len(loads)
    worker_free = [startup_s] * num_workers  # when each worker can start its next task
    arrivals: list[tuple[float, int]] = []  # event queue: (ready time, batch)
    ready = [math.nan] * n

    def dispatch(batch: int, now: float) -> None:
        worker = batch % num_workers  # round-robin, as itertools.cycle in PyTorch
        start = max(worker_free[worker], now)  # each worker works through its queue
        ready[batch] = worker_free[worker] = start + loads[batch] + transfer_s
        heapq.heappush(arrivals, (ready[batch], batch))

    sent = min(prefetch_factor * num_workers, n)
    for batch in range(sent):  # iter(): prime the pipeline
        dispatch(batch, 0.0)
    out: dict[str, list[float]] = {k: [] for k in ("got", "done", "wait", "idle")}
    received: set[int] = set()
    t = 0.0
    for batch in range(n):
        entered, idle = t, 0.0
        while batch not in received:  # receive in arrival order, stash early ones
            arrival, other = heapq.heappop(arrivals)
            if arrival > t:
                idle += arrival - t
                t = arrival
            t += transfer_s
            received.add(other)
        received.discard(batch)
        out["got"].append(t)
        out["wait"].append(t - entered)
        out["idle"].append(idle)
        if sent < n:  # returning a batch sends the next index out
            dispatch(sent, t)
            sent += 1
        t += step_s
        out["done"].append(t)
    out["ready"] = ready
    return out


def simulate(
    num_workers: int,
    load_s: float,
    step_s: float,
    *,
    transfer_s: float = 0.0,
    prefetch_factor: int = 2,
    n_batches: int = 100,
    load_jitter: float = 0.0,
    seed: int = 0,
    startup_s: float = 0.0,
) -> SimResult:
    """Simulate a training loop fed by a DataLoader, one event at a time.

    Follows PyTorch's rules for a map-style dataset with ``in_order=True`` (the
    default): ``iter()`` sends the first ``prefetch_factor * num_workers`` batch indices
    to the workers round-robin (batch ``b`` goes to worker ``b % num_workers``); each
    worker loads its batches one after another (``load_s`` + ``transfer_s`` each, after
    a start-up delay of ``startup_s``); ``next()`` returns batches in order, so it waits
    for the one worker that owns the next batch, receiving (``transfer_s`` each) and
    keeping any batch that arrives early; each batch returned sends one more index out;
    then the loop steps for ``step_s``. With ``num_workers=0`` the main process loads
    each batch inside ``next()`` and there is no start-up delay or transfer.

    Args:
        num_workers: DataLoader ``num_workers``.
        load_s: mean seconds for a worker to load one batch.
        step_s: seconds of the training step per batch.
        transfer_s: seconds to move one batch between processes, paid once by the
            worker and once by the main process.
        prefetch_factor: batch indices in flight per worker.
        n_batches: batches in the epoch.
        load_jitter: coefficient of variation of the load time (0 = every batch takes
            exactly ``load_s``); see :func:`draw_load_times`.
        seed: seed for the load times.
        startup_s: seconds before the workers can start loading (process start-up).

    Returns:
        A :class:`SimResult`. Its ``steady_s_per_batch`` leaves out the first
        ``(prefetch_factor + 1) * num_workers`` batches (at least 1, at most half).

    Raises:
        ValueError: for a negative or non-finite cost, ``num_workers < 0``,
            ``prefetch_factor < 1``, ``n_batches < 1`` or ``load_jitter < 0``.
        TypeError: if an argument is not a number.
    """
    _check_costs(num_workers, load_s, step_s, transfer_s)
    num_workers = check_int("num_workers", num_workers)
    prefetch_factor = check_int("prefetch_factor", prefetch_factor, minimum=1)
    n_batches = check_int("n_batches", n_batches, minimum=1)
    load_jitter = check_number("load_jitter", load_jitter)
    startup_s = check_seconds("startup_s", startup_s)

    loads = draw_load_times(n_batches, load_s, load_jitter, seed)
    if num_workers == 0:
        out = _simulate_serial(loads, step_s)
    else:
        out = _simulate_workers(loads, num_workers, step_s, transfer_s, prefetch_factor, startup_s)
    queue_t, queue_n = _queue_curve(out["ready"], out["got"])
    transient = min(max(1, (prefetch_factor + 1) * num_workers), n_batches // 2)
    return SimResult(
        num_workers=num_workers,
        load_s=load_s,
        step_s=step_s,
        transfer_s=transfer_s,
        prefetch_factor=prefetch_factor,
        load_jitter=load_jitter,
        startup_s=startup_s if num_workers else 0.0,
        loads_s=loads,
        ready_s=list(out["ready"]),
        got_s=out["got"],
        done_s=out["done"],
        wait_s=out["wait"],
        idle_s=out["idle"],
        queue_t=queue_t,
        queue_n=queue_n,
        transient=transient,
    )
