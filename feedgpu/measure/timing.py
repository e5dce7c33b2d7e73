"""A timing harness that measures a DataLoader the right way, so students need not.

What it does for every repeat::

    iter(loader) + first batch  ->  start-up time (workers start, first batch loads)
    ``warmup`` more batches      ->  consumed (and stepped) but not timed
    ``batches`` batches          ->  timed: total wall time / batches = steady s per batch;
                                     for each batch, the wait inside ``next()`` and the
                                     time of the (simulated) training step

Clocks are read with :func:`time.perf_counter`, after ``torch.cuda.synchronize()`` when a
GPU is present (otherwise queued GPU work would be charged to the wrong phase), unless
``synchronize=False``: then the loop runs as it would in training, its asynchronous GPU
work overlapping the loading (what :func:`feedgpu.diagnose` measures). Unless the
loader has ``persistent_workers=True``, the workers of each repeat are shut down before the
next repeat starts, so every repeat pays the same start-up and no worker outlives the call.

Example::

    timing = time_loader(loader, batches=20, step=0.01)
    print("s/batch:", timing.mean_s_per_batch, "+-", timing.std_s_per_batch)
    plot_waits(timing)   # from feedgpu.plots
"""

from __future__ import annotations

import logging
import math
import statistics
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Union

import torch

from ..base.checks import check_int, check_seconds
from ..base.processes import shutdown_workers

__all__ = [
    "LoaderTiming",
    "time_loader",
    "shutdown_workers",
    "median_seconds",
    "seconds_per_item",
]


logger = logging.getLogger(__name__)


Step = Union[Callable[[Any], Any], float, None]


def _mean(values: Sequence[float]) -> float:
    return statistics.fmean(values) if values else math.nan


def _std(values: Sequence[float]) -> float:
    """Sample standard deviation; 0.0 for a single value (nothing to spread)."""
    return statistics.stdev(values) if len(values) > 1 else 0.0


@dataclass
class LoaderTiming:
    """What :func:`time_loader` measured: plain numbers, one entry per repeat.

    Attributes:
        startup_s: per repeat, seconds for ``iter(loader)`` plus the first batch.
        s_per_batch: per repeat, steady-state seconds per timed batch (wall time of the
            timed loop, step included, divided by the number of timed batches).
        waits_s: per repeat, per timed batch, seconds spent waiting inside ``next()``.
        steps_s: per repeat, per timed batch, seconds spent in the training step.
        n_batches: per repeat, how many batches were timed.
        warmup: how many batches after the first were consumed untimed in each repeat.
        batch_size: items per batch when known (``loader.batch_size``), else ``None``.
        num_workers: the loader's ``num_workers`` when known.
        persistent_workers: whether the loader kept its workers between repeats.
    """

    startup_s: list[float]
    s_per_batch: list[float]
    waits_s: list[list[float]]
    steps_s: list[list[float]]
    n_batches: list[int]
    warmup: int = 0
    batch_size: int | None = None
    num_workers: int | None = None
    persistent_workers: bool = False

    @property
    def repeats(self) -> int:
        """Number of repeats measured."""
        return len(self.s_per_batch)

    @property
    def mean_s_per_batch(self) -> float:
        """Mean over repeats of the steady-state seconds per batch."""
        return _mean(self.s_per_batch)

    @property
    def std_s_per_batch(self) -> float:
        """Sample standard deviation over repeats of seconds per batch (0 for 1 repeat)."""
        return _std(self.s_per_batch)

    @property
    def mean_startup_s(self) -> float:
        """Mean over repeats of the start-up time (``iter()`` plus the first batch)."""
        return _mean(self.startup_s)

    @property
    def first_startup_s(self) -> float:
        """Start-up time of the first repeat (workers had to be started)."""
        return self.startup_s[0] if self.startup_s else math.nan

    @property
    def later_startup_s(self) -> float:
        """Mean start-up time of repeats 2, 3, ...; NaN with a single repeat.

        With ``persistent_workers=True`` this is much smaller than
        :attr:`first_startup_s`: the workers are reused, not started again.
        """
        return _mean(self.startup_s[1:])

    @property
    def batches_per_s(self) -> float:
        """Steady-state batches per second (1 / :attr:`mean_s_per_batch`)."""
        mean = self.mean_s_per_batch
        return 1.0 / mean if mean > 0 else math.inf

    @property
    def items_per_s(self) -> float:
        """Steady-state items per second; NaN when the batch size is unknown.

        Assumes every timed batch is full, which holds unless the last, short batch of
        an epoch (``drop_last=False``) is among the timed ones.
        """
        if self.batch_size is None:
            return math.nan
        return self.batch_size * self.batches_per_s

    @property
    def wait_fraction(self) -> float:
        """Mean over repeats of ``total wait / (total wait + total step)``.

        0 means the loop never waited for data (loading fully overlapped the step); 1
        means it did nothing but wait (no step, or the step is negligible).
        """
        fractions = []
        for waits, steps in zip(self.waits_s, self.steps_s):
            busy = sum(waits) + sum(steps)
            fractions.append(sum(waits) / busy if busy > 0 else math.nan)
        return _mean(fractions)

    def as_dict(self) -> dict[str, float | int | None]:
        """Summary figures as a flat dict (one DataFrame row): the properties above plus
        ``repeats``, ``warmup``, ``n_batches`` (timed, all repeats), ``batch_size``,
        ``num_workers`` and ``persistent_workers``. ``startup_s`` is the mean start-up."""
        out: dict[str, float | int | None] = {
            "mean_s_per_batch": self.mean_s_per_batch,
            "std_s_per_batch": self.std_s_per_batch,
            "startup_s": self.mean_startup_s,
            "first_startup_s": self.first_startup_s,
            "later_startup_s": self.later_startup_s,
            "batches_per_s": self.batches_per_s,
            "items_per_s": self.items_per_s,
            "wait_fraction": self.wait_fraction,
            "repeats": self.repeats,
            "warmup": self.warmup,
            "n_batches": sum(self.n_batches),
            "batch_size": self.batch_size,
            "num_workers": self.num_workers,
            "persistent_workers": self.persistent_workers,
        }
        return out


def _make_clock(synchronize: bool = True) -> Callable[[], float]:
    """The harness's clock: ``time.perf_counter``, after waiting for queued GPU work when
    ``synchronize`` is true and there is a GPU (plain ``time.perf_counter`` otherwise)."""
    if synchronize and torch.cuda.is_available():

        def clock() -> float:
            torch.cuda.synchronize()
            return time.perf_counter()

        return clock
    return time.perf_counter


def _make_step(step: Step) -> Callable[[Any], Any]:
    """Turn ``step`` (None, seconds to sleep, or a callable) into a callable on a batch."""
    if step is None:
        return lambda batch: None
    if callable(step):
        return step
    try:
        seconds = check_seconds("step", step)
    except TypeError:
        raise TypeError(
            f"step must be None, a number of seconds or a callable taking the batch, got {step!r}"
        ) from None
    return lambda batch: time.sleep(seconds)


def median_seconds(run: Callable[[], Any], repeats: int) -> float:
    """The median of ``repeats`` timed calls of ``run()``, in seconds (``perf_counter``)."""
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def seconds_per_item(dataset: Any, items: int = 8) -> float:
    """What one item of ``dataset`` costs in this process: the median of ``dataset[i]`` over its first items.

    One call before the timed ones is left out (the first item may open files or build
    lookup tables). A quick estimate for planning an experiment, not a measurement to
    compare settings with (that is :func:`time_loader`'s job).

    Args:
        dataset: anything indexable with ``len()``; at least one item.
        items: items timed (the first ``items`` indices, fewer if the dataset is shorter).
    """
    items = check_int("items", items, minimum=1)
    n = len(dataset)
    if n < 1:
        raise ValueError("the dataset is empty: nothing to time")
    dataset[0]  # warm-up, not timed
    indices = iter(range(min(items, n)))
    return median_seconds(lambda: dataset[next(indices)], min(items, n))



def _run_repeat(
    loader: Any,
    batches: int | None,
    warmup: int,
    step: Callable[[Any], Any],
    clock: Callable[[], float],
    persistent: bool,
) -> tuple[float, float, list[float], list[float]]:
    """One repeat: returns (startup_s, s_per_batch, waits, steps)."""
    t0 = clock()
    iterator: Iterator[Any] | None = iter(loader)
    try:
        try:
            batch = next(iterator)
        except StopIteration:
            raise ValueError("the loader yielded no batch; it needs at least one") from None
        startup = clock() - t0
        step(batch)
        for done in range(warmup):
            try:
                batch = next(iterator)
            except StopIteration:
                raise ValueError(
                    f"the loader ran out after {done + 1} batches, during warm-up "
                    f"(1 start-up + {warmup} warm-up batches needed before timing); "
                    "use a larger dataset or a smaller warmup"
                ) from None
            step(batch)
        waits, steps, elapsed = _timed_loop(iterator, batches, step, clock)
    finally:
        if not persistent and iterator is not None:
            shutdown_workers(iterator)
        del iterator  # the only reference: the workers (if any) go with it
    return startup, elapsed / len(waits), waits, steps


def _timed_loop(
    iterator: Iterator[Any],
    batches: int | None,
    step: Callable[[Any], Any],
    clock: Callable[[], float],
) -> tuple[list[float], list[float], float]:
    """Time ``batches`` batches (all remaining if None).

    Returns per-batch waits, per-batch step times, and the loop's total wall time.
    """
    waits: list[float] = []
    steps: list[float] = []
    start = clock()
    while batches is None or len(waits) < batches:
        t0 = clock()
        try:
            batch = next(iterator)
        except StopIteration:
            break
        t1 = clock()
        step(batch)
        t2 = clock()
        waits.append(t1 - t0)
        steps.append(t2 - t1)
    elapsed = (t2 - start) if waits else 0.0
    if not waits or (batches is not None and len(waits) < batches):
        wanted = "at least 1" if batches is None else str(batches)
        raise ValueError(
            f"the loader ran out after warm-up with {len(waits)} batches timed, "
            f"{wanted} wanted; use a larger dataset, or fewer batches or warmup"
        )
    return waits, steps, elapsed


def time_loader(
    loader: Any,
    *,
    batches: int | None = None,
    warmup: int = 2,
    repeats: int = 3,
    step: Step = None,
    synchronize: bool = True,
) -> LoaderTiming:
    """Measure a DataLoader: start-up, steady-state time per batch, and waits.

    Each repeat creates a fresh iterator with ``iter(loader)`` and times it plus the
    first batch (start-up), consumes ``warmup`` more batches untimed, then times
    ``batches`` batches (all remaining when None). Every batch consumed, including the
    first and the warm-up ones, goes through ``step``, so the workers fill their
    prefetch queues as they would in training. Unless ``loader.persistent_workers`` is
    true, the repeat's workers are shut down before the next repeat; with persistent
    workers they are reused, and :attr:`LoaderTiming.later_startup_s` shows how little
    start-up then costs (only after a full epoch: if a repeat stops early, the next
    ``iter()`` waits for the workers to finish the batches they had already been sent).

    Args:
        loader: a ``torch.utils.data.DataLoader`` (any re-iterable of batches works).
        batches: batches to time per repeat; None times all that remain after warm-up.
            With workers, time at least ``2 * num_workers`` batches (more is better): the
            workers keep up to ``prefetch_factor * num_workers`` batches ready, and a
            short count mostly measures how fast that queue empties.
        warmup: batches after the first one consumed but not timed, per repeat. With
            workers, use at least ``num_workers``: the workers start together and
            deliver their first batches in a burst, which would flatter the timing.
        repeats: how many times to start a fresh iteration and measure.
        step: the simulated training step run on every batch: None (no step), a number
            of seconds to sleep, or a callable taking the batch.
        synchronize: on a CUDA GPU, wait for the queued GPU work (``torch.cuda.synchronize()``)
            before every clock reading, so each phase is charged its own GPU work (what the
            notebooks and the bench compare). With False the clock is plain
            ``time.perf_counter`` and nothing in a repeat synchronises, start-up and warm-up
            included: the loop runs as the user's does, and a step that queues its GPU work
            asynchronously overlaps it with the loading of the next batches. That is what
            :func:`feedgpu.diagnose` measures; each step's time is then the host's part (the
            launching, plus any wait the step itself asks for), and the device's time has to
            come from CUDA events read after the run (``TimedStep.gpu_busy_s``). Without a
            GPU both give the same clock.

    Returns:
        A :class:`LoaderTiming` with one entry per repeat.

    Raises:
        ValueError: if an argument is out of range, or the loader has fewer than
            ``1 + warmup + batches`` batches (``1 + warmup + 1`` when batches is None).
        TypeError: if ``step`` is neither None, a number nor a callable.
    """
    batches = None if batches is None else check_int("batches", batches, minimum=1)
    warmup = check_int("warmup", warmup)
    repeats = check_int("repeats", repeats, minimum=1)
    step_fn = _make_step(step)
    clock = _make_clock(bool(synchronize))
    persistent = bool(getattr(loader, "persistent_workers", False))
    timing = LoaderTiming(
        startup_s=[],
        s_per_batch=[],
        waits_s=[],
        steps_s=[],
        n_batches=[],
        warmup=warmup,
        batch_size=getattr(loader, "batch_size", None),
        num_workers=getattr(loader, "num_workers", None),
        persistent_workers=persistent,
    )
    for r in range(repeats):
        startup, per_batch, waits, steps = _run_repeat(loader, batches, warmup, step_fn, clock, persistent)
        timing.startup_s.append(startup)
        timing.s_per_batch.append(per_batch)
        timing.waits_s.append(waits)
        timing.steps_s.append(steps)
        timing.n_batches.append(len(waits))
        logger.debug(
            "repeat %d: start-up %.4f s, %.5f s/batch over %d batches",
            r + 1,
            startup,
            per_batch,
            len(waits),
        )
    if persistent and repeats > 1:
        logger.info(
            "persistent workers: start-up %.4f s on the first repeat, %.4f s later",
            timing.first_startup_s,
            timing.later_startup_s,
        )
    return timing
