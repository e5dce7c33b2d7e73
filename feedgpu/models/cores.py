"""The cores: what the course sizes by them, on any machine.

Students run the course on 2 to 16 cores, and several lessons only show when an
experiment reaches the cores, or goes past them: computing stops speeding up at the
cores while waiting does not (notebook 02), a fit can only find the cores at work when
the workers can fill them (:class:`CoresFit`). Every grid of worker counts, every fit and every
sentence that compares a run with the cores is therefore a function of ``cores`` here,
called by the notebooks with the machine's usable cores
(:func:`feedgpu.measure.machine.usable_cores`) and by the tests with 2, 4, 8 and 16::

    from feedgpu.models.cores import workers_to_cores, workers_past_cores

    workers_to_cores(16)     # [0, 1, 2, 4, 8, 16]: faces, computing (notebook 02, Part B)
    workers_past_cores(16)   # [0, 1, 2, 4, 8, 16, 32]: known cost, past the cores (Part C)

On 2 cores each function gives what the course used before it was sized by the cores
(``[0, 1, 2]``, ``[0, 1, 2, 4]``, 2 workers, the same fit), so a 2-core run of a notebook
shows the same figures as before.

What is here:

* grids: :func:`workers_to_cores`, :func:`workers_past_cores`, :func:`workers_at_cores`,
  :func:`timed_batches` (warm-up and timed batches that grow with the workers) and
  :func:`items_for_sweep` (a dataset large enough for them);
* how long a sweep will take, from the cost of a batch measured in one process:
  :func:`sweep_seconds` and :func:`worker_starts`;
* the fit of the cores at work and the hand-over to a sweep of items of known CPU cost:
  :func:`fit_cores_at_work`, and the sentence that reads it, :func:`fit_sentence`;
* sentences that compare a run with the cores: :func:`scaling_sentences` (waiting and
  computing past the cores), :func:`beyond_cores_sentence` (workers that wait, against
  the cores), :func:`one_per_core_sentence` (workers a loop needs against one per core).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from ..base.checks import check_int, check_number, check_seconds

__all__ = [
    "workers_to_cores",
    "workers_past_cores",
    "workers_at_cores",
    "timed_batches",
    "items_for_sweep",
    "model_speedup",
    "sweep_seconds",
    "worker_starts",
    "CoresFit",
    "fit_cores_at_work",
    "fit_sentence",
    "scaling_sentences",
    "beyond_cores_sentence",
    "one_per_core_sentence",
]

#: A fitted count of cores at work at least this share of the cores the workers could use
#: reads as "about all of them": the main process needs part of a core too, so a free
#: machine fits a little below its count (1.95 of 2 on the course's 2-core machine).
MOST_CORES = 0.8

#: Relative growth of a speed-up from the cores to twice the cores that counts as growing
#: (below it, the speed-up stopped), and the share of the model's growth that counts as
#: following the model. Generous: the sweeps are short and the machine is rarely quiet.
GREW = 1.2
FOLLOWS_MODEL = 0.5


def _cores(cores: int) -> int:
    return check_int("cores", cores, minimum=1)


def workers_to_cores(cores: int) -> list[int]:
    """num_workers for a sweep of items that compute: 0, 1, 2, then doubling up to the cores.

    The cores themselves close the grid when they are not a power of two. Always holds 0,
    1 and 2 (the comparisons of a single worker and of two workers are in every lesson).

    Examples: ``[0, 1, 2]`` on 2 cores, ``[0, 1, 2, 4]`` on 4, ``[0, 1, 2, 4, 6]`` on 6,
    ``[0, 1, 2, 4, 8, 16]`` on 16.
    """
    cores = _cores(cores)
    grid, n = [0, 1, 2], 4
    while n <= cores:
        grid.append(n)
        n *= 2
    if cores > grid[-1]:
        grid.append(cores)
    return grid


def workers_past_cores(cores: int) -> list[int]:
    """num_workers for a sweep that must go past the cores: :func:`workers_to_cores` and twice the cores.

    Where items wait, workers beyond the cores still help; where they compute, they cannot:
    only a grid that passes the cores shows both. Examples: ``[0, 1, 2, 4]`` on 2 cores,
    ``[0, 1, 2, 4, 8]`` on 4, ``[0, 1, 2, 4, 8, 16, 32]`` on 16.
    """
    cores = _cores(cores)
    return workers_to_cores(cores) + [2 * max(cores, 2)]


def workers_at_cores(cores: int) -> int:
    """Workers that can fill the cores: as many as the cores, and at least 2 (2 on 2 cores)."""
    return max(2, _cores(cores))


def timed_batches(num_workers: int, batches: int, warmup: int) -> tuple[int, int]:
    """(timed batches, warm-up batches) for a setting of ``num_workers`` workers.

    The workers start together and deliver their first batches in a burst, and later ones
    in waves of about ``num_workers``: the warm-up lets at least ``num_workers`` batches go
    by, and the timed window holds at least two waves. With few workers, the figures
    given stand: ``(max(batches, 2 * num_workers), max(warmup, num_workers))``.
    """
    n = check_int("num_workers", num_workers)
    return max(check_int("batches", batches, minimum=1), 2 * n), max(check_int("warmup", warmup), n)


def items_for_sweep(workers: Sequence[int], batches: int, warmup: int, items_per_batch: int,
                    at_least: int = 0) -> int:
    """Items a dataset needs so that one pass of every setting of a sweep fits in it.

    :func:`feedgpu.measure.timing.time_loader` takes, per pass, the first batch (the
    start-up), the warm-up and the timed batches of :func:`timed_batches`: the setting with
    the most workers needs the most. At least ``at_least`` items (what a notebook used
    before it was sized by the cores).
    """
    per_batch = check_int("items_per_batch", items_per_batch, minimum=1)
    most = max(1 + sum(timed_batches(n, batches, warmup)) for n in workers)
    return max(check_int("at_least", at_least), per_batch * most)


def model_speedup(num_workers: int, cores: float, cpu_fraction: float) -> float:
    """The speed-up over 0 workers that notebook 02's model allows: ``min(n, cores / f)``.

    1 for 0 workers; ``n`` when the items only wait (``f = 0``). An upper bound: it counts
    neither the hand-over of each batch nor the main process's own share of a core.
    """
    n = check_int("num_workers", num_workers)
    cores = check_number("cores", cores)
    f = check_number("cpu_fraction", cpu_fraction)
    if cores <= 0 or f > 1:
        raise ValueError(f"need cores > 0 and cpu_fraction within [0, 1], got {cores!r} and {f!r}")
    if n == 0:
        return 1.0
    return float(n) if f == 0 else float(min(n, cores / f))


def sweep_seconds(workers: Sequence[int], costs: Mapping[str, tuple[float, float]], cores: int, *,
                  batches: int, warmup: int, repeats: int) -> tuple[float, float]:
    """How long the batches of a num_workers sweep take: (at the model's speed-ups, at none).

    Every setting of ``n`` workers loads the batches of :func:`timed_batches`, ``repeats``
    times, for every workload of ``costs``. At 0 workers a batch costs what it costs in one
    process; with workers, the model's speed-up (:func:`model_speedup`) is the most they can
    give, and no speed-up at all the least: the sweep's loading time lies between the two.
    Worker start-ups are not counted (see :func:`worker_starts`).

    Args:
        workers: the num_workers of the sweep.
        costs: for each workload, (seconds one process takes to make a batch, the share of
            that time that needs a core).
        cores: usable cores.
        batches, warmup: the timed and warm-up batches given to :func:`timed_batches`.
        repeats: timed passes per setting.

    Returns:
        (fastest, slowest) seconds.
    """
    cores = _cores(cores)
    repeats = check_int("repeats", repeats, minimum=1)
    fastest = slowest = 0.0
    for n in workers:
        timed, warm = timed_batches(n, batches, warmup)
        count = (timed + warm) * repeats
        for batch_s, cpu_fraction in costs.values():
            seconds = count * check_seconds("batch_s", batch_s)
            slowest += seconds
            fastest += seconds / model_speedup(n, cores, cpu_fraction)
    return fastest, slowest


def worker_starts(workers: Sequence[int], loaders_per_setting: int = 1) -> int:
    """Worker processes a sweep starts: every setting's workers, once per loader it builds."""
    return sum(check_int("num_workers", n) for n in workers) * check_int("loaders_per_setting", loaders_per_setting)


@dataclass(frozen=True)
class CoresFit:
    """What a sweep of items of known CPU cost says about the cores and the hand-over.

    The model (the queue model of notebook 03 with the cores put back): with ``w`` workers an item of CPU cost ``p`` arrives
    every ``max(t, (p + t) / w, (p + 2t) / n)`` seconds, where ``t`` is the hand-over per
    item and ``n`` the cores at work.

    Attributes:
        cores_at_work: the fitted ``n``: how many cores' worth of work the workers did.
        overhead_s: the fitted hand-over ``t`` per item, in seconds.
        workers: ``w``, the sweep's workers; ``cores``: the machine's usable cores.
        worst_error: the largest relative difference between the fitted model and a
            measured point (0.1: 10%).
    """

    cores_at_work: float
    overhead_s: float
    workers: int
    cores: int
    worst_error: float

    @property
    def cores_can_limit(self) -> bool:
        """Whether the workers could fill the cores (``workers >= cores``). With fewer workers
        than cores the cores never set the pace of a free machine, so the fit can tell a busy
        machine (cores at work well below the workers) but not how many of the cores were free."""
        return self.workers >= self.cores

    def model_s(self, per_item_s: float | np.ndarray) -> np.ndarray:
        """The fitted model's seconds per item with the sweep's workers."""
        p = np.asarray(per_item_s, dtype=float)
        t = self.overhead_s
        return np.maximum(np.maximum(t, (p + t) / self.workers), (p + 2 * t) / self.cores_at_work)


def fit_cores_at_work(per_item_s: Sequence[float], s_per_item: Sequence[float], workers: int,
                      cores: int) -> CoresFit:
    """Fit the cores at work and the hand-over to a sweep of ``workers`` workers.

    Tries every pair of cores at work (151 values from 0.5 to ``cores``) and hand-over (401
    values from 1 microsecond to 10 ms, evenly on a log scale) and keeps the pair whose
    seconds per item are closest to the measured ones in relative terms (the sum of the
    squared logarithms of their ratios), so that cheap and costly items count alike.

    Args:
        per_item_s: the CPU cost of each item of the sweep, seconds.
        s_per_item: the measured seconds per item with ``workers`` workers, one per cost.
        workers: the sweep's ``num_workers`` (at least 1).
        cores: the machine's usable cores.

    Raises:
        ValueError: no points, a different number of costs and times, or a cost or time
            that is not above 0.
    """
    p = np.asarray(per_item_s, dtype=float)
    measured = np.asarray(s_per_item, dtype=float)
    if p.ndim != 1 or p.shape != measured.shape or p.size == 0:
        raise ValueError(f"need one measured time per cost, got {p.size} costs and {measured.size} times")
    if not (np.all(np.isfinite(p)) and np.all(np.isfinite(measured)) and (p > 0).all() and (measured > 0).all()):
        raise ValueError("every cost and every measured time must be a finite number above 0")
    workers = check_int("workers", workers, minimum=1)
    cores = _cores(cores)
    grid_n = np.linspace(0.5, cores, 151)[:, None, None]     # cores at work
    grid_t = np.geomspace(1e-6, 1e-2, 401)[None, :, None]    # hand-over per item, seconds
    model = np.maximum(np.maximum(grid_t, (p + grid_t) / workers), (p + 2 * grid_t) / grid_n)
    misfit = (np.log(model / measured) ** 2).sum(axis=2)
    best_n, best_t = np.unravel_index(misfit.argmin(), misfit.shape)
    n, t = float(grid_n[best_n, 0, 0]), float(grid_t[0, best_t, 0])
    fit = CoresFit(n, t, workers, cores, 0.0)
    worst = float(np.max(np.abs(fit.model_s(p) / measured - 1)))
    return CoresFit(n, t, workers, cores, worst)


def fit_sentence(fit: CoresFit) -> str:
    """What the fit says about the machine, in words that hold on any number of cores."""
    usable = min(fit.workers, fit.cores)
    head = f"{fit.workers} workers on {fit.cores} cores: "
    if fit.cores_at_work < MOST_CORES * usable:
        cores = (f"{fit.cores_at_work:.2f} cores at work, well below the {usable} that {fit.workers} workers "
                 f"can use: the loader did not get those cores' full work (another program or a virtual "
                 f"machine's neighbours took some, or, with many cores busy at once, each ran slower than the "
                 f"one core that measured the items alone), and the fit tells what it had")
    elif fit.cores_can_limit:
        cores = (f"{fit.cores_at_work:.2f} cores at work, about all of them (the main process needs part of "
                 f"a core too)")
    else:
        cores = (f"the workers did the work of {fit.cores_at_work:.2f} cores, about all that {fit.workers} "
                 f"workers can (the main process needs part of a core too); with fewer workers than cores the "
                 f"cores never set the pace, so the sweep cannot tell how many of the {fit.cores} were free")
    points = ("the model lies within 25% of every point" if fit.worst_error <= 0.25
              else f"but the model misses a point by {fit.worst_error:.0%}: look at the plot for the point "
                   f"off the line, and run the sweep again if the machine was busy")
    return f"{head}{cores}; hand-over {fit.overhead_s * 1e3:.3f} ms per item; {points}."


def scaling_sentences(measured: Mapping[str, Mapping[int, float]], model: Mapping[str, Mapping[int, float]],
                      cores: int) -> list[str]:
    """For each workload, whether its speed-up kept growing past the cores, and whether the model said so.

    Compares the speed-up at the largest worker count within the cores with the one at the
    largest count past them, measured and by the model, one sentence per workload.

    Args:
        measured, model: for each workload, the speed-up by num_workers (as notebook 02's
            tables: ``table[workload][n]``; a DataFrame indexed by num_workers works).
        cores: usable cores.

    Raises:
        ValueError: the workers measured do not reach the cores (a worker count at or below
            the cores) and pass them (one above), or a workload has no model.
    """
    cores = _cores(cores)
    sentences = []
    for workload, speedups in measured.items():
        if workload not in model:
            raise ValueError(f"no model for the workload {workload!r}")
        counts = sorted(int(n) for n in dict(speedups).keys())
        within = [n for n in counts if 0 < n <= cores]
        past = [n for n in counts if n > cores]
        if not within or not past:
            raise ValueError(f"{workload}: the worker counts {counts} must reach the {cores} cores and pass them")
        at, beyond = within[-1], past[-1]
        got_at, got_beyond = float(speedups[at]), float(speedups[beyond])
        model_at, model_beyond = float(model[workload][at]), float(model[workload][beyond])
        grew, model_grew = got_beyond / got_at, model_beyond / model_at
        figures = (f"{got_at:.2f}x at {at} workers, {got_beyond:.2f}x at {beyond} "
                   f"(model: {model_at:.1f}x and {model_beyond:.1f}x)")
        if model_grew >= GREW:  # the model says more workers than cores help
            if grew >= 1 + FOLLOWS_MODEL * (model_grew - 1):
                verdict = "it kept growing past your cores, as the model says: these items leave cores free"
            elif grew >= GREW:
                verdict = ("it grew past your cores, but less than the model says: the main process, which "
                           "receives every batch, or other programs on the cores held it back")
            else:
                verdict = ("it stopped near your cores where the model says it grows: the main process, which "
                           "receives every batch, or other programs on the cores held it back")
        elif grew < GREW:
            verdict = "it stopped at your cores, as the model says: these items need a core each"
        else:
            verdict = ("it grew past your cores where the model says it stops: more processes got more CPU "
                       "time than the cores alone give, taken from other programs, or counted so by a virtual "
                       "machine's clock (SpinDataset counts the CPU time the system reports); real decoding "
                       "would not gain this way")
        sentences.append(f"{workload}: {figures}; {verdict}.")
    return sentences


def beyond_cores_sentence(workers: int, cores: int, speedup: float, in_flight_ratio: float,
                          baseline_workers: int) -> str:
    """Workers whose items wait, against the cores: what a run of ``workers`` against ``baseline_workers`` shows.

    Args:
        workers, baseline_workers: the two worker counts compared.
        cores: usable cores.
        speedup: the measured rate of ``workers`` over that of ``baseline_workers``.
        in_flight_ratio: the ratio of their requests in flight (what Little's law promises).
    """
    workers = check_int("workers", workers, minimum=1)
    baseline = check_int("baseline_workers", baseline_workers, minimum=1)
    cores = _cores(cores)
    speedup = check_number("speedup", speedup)
    promise = check_number("in_flight_ratio", in_flight_ratio)
    head = (f"{workers} workers delivered {speedup:.1f}x the rate of {baseline} "
            f"({promise:.0f}x the requests in flight) on your {cores} cores")
    if workers <= cores:
        return (f"{head}. They are no more than your cores, so this run cannot show what more workers than "
                f"cores do for items that wait; notebook 02's Part C went past your cores and showed it.")
    if speedup >= FOLLOWS_MODEL * promise:
        return (f"{head}: {workers / cores:.1f} workers per core, and still most of what the requests in flight "
                f"promise. A waiting worker needs no core.")
    return (f"{head}: {workers / cores:.1f} workers per core, but well below what the requests in flight "
            f"promise. Look at the CPU per request: the cores ran out of CPU before the waiting did.")


def one_per_core_sentence(needed: int, cores: int) -> str:
    """The workers a loop of waiting items needs, against one worker per core."""
    needed = check_int("needed", needed, minimum=1)
    cores = _cores(cores)
    if needed > cores:
        return (f"This loop needs {needed} workers: more than your {cores} cores, and rightly so, since a "
                f"worker that waits for storage holds no core. One per core ({cores}) would leave it waiting.")
    laptop = "too few" if needed > 2 else "enough"
    if needed == cores:
        here = f"one per core would be exactly that on your {cores} cores, by chance"
    else:
        here = (f"one per core would be {cores} on your machine, which keeps up too, with {cores - needed} more "
                f"processes (and their memory) than the step needs")
    return (f"This loop needs {needed} workers; {here}. On a 2-core laptop one per core is {laptop}: the "
            f"items and the step set the count, not the cores.")
