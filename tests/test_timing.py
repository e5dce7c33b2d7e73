"""Tests for feedgpu.measure.timing: the DataLoader timing harness.

No test compares a raw time with a fixed number. Loaders read SleepDataset items whose
cost we chose (5 ms each), and every check is a ratio against that known cost, wide
enough for a busy 2-core laptop: a batch of 8 such items must take at least 0.95 x 40 ms
(sleep never returns early) and at most 3 x 40 ms (a harness that counted the start-up
or a batch twice would report far more).
"""

from __future__ import annotations

import math
import multiprocessing
import time

import matplotlib

matplotlib.use("Agg")

import pytest
from torch.utils.data import DataLoader

from feedgpu.measure.timing import LoaderTiming, shutdown_workers, time_loader
from feedgpu.plots import plot_timings, plot_waits
from feedgpu.workloads import SleepDataset

pytestmark = pytest.mark.unit

ITEM_S = 0.005  # cost of one SleepDataset item
BATCH = 8
BATCH_S = ITEM_S * BATCH  # 40 ms: what one batch costs to load


def sleep_loader(num_workers: int, n: int = 200, **kwargs) -> DataLoader:
    """A loader over 5 ms items in batches of 8."""
    return DataLoader(SleepDataset(n, ITEM_S), batch_size=BATCH, num_workers=num_workers, **kwargs)


class SlowStart:
    """A re-iterable of ``n`` batches (ints); the first ``slow`` of every pass take
    ``slow_s`` each, the others nothing. Lets a test see which batches were timed."""

    def __init__(self, n: int, slow: int, slow_s: float) -> None:
        self.n, self.slow, self.slow_s = n, slow, slow_s
        self.yielded = 0

    def __iter__(self):
        for i in range(self.n):
            if i < self.slow:
                time.sleep(self.slow_s)
            self.yielded += 1
            yield i


def worker_pids() -> set[int]:
    return {p.pid for p in multiprocessing.active_children()}


# --------------------------------------------------------------------------- harness


def test_time_loader_serial_time_per_batch_matches_known_cost():
    timing = time_loader(sleep_loader(0), batches=5, warmup=1, repeats=2)
    for s in timing.s_per_batch:
        assert 0.95 <= s / BATCH_S <= 3, (
            f"0 workers, 8 items of 5 ms: expected about {BATCH_S} s per batch, got {s} ({s / BATCH_S:.2f}x)"
        )
    assert timing.n_batches == [5, 5], f"5 batches timed per repeat, got {timing.n_batches}"
    assert timing.repeats == 2, f"2 repeats asked, got {timing.repeats}"


def test_time_loader_two_workers_speed_up_sleep_workload():
    serial = time_loader(sleep_loader(0), batches=8, warmup=4, repeats=2)
    parallel = time_loader(sleep_loader(2), batches=8, warmup=4, repeats=2)
    speedup = serial.mean_s_per_batch / parallel.mean_s_per_batch
    assert speedup >= 1.4, (
        f"2 workers should nearly halve the time of a sleep workload, speed-up {speedup:.2f}"
        f" (serial {serial.mean_s_per_batch:.4f} s, 2 workers {parallel.mean_s_per_batch:.4f} s)"
    )


SLOW_S = 0.05  # known cost of a slow batch of SlowStart


def test_time_loader_excludes_warmup_batches():
    # Batches 0, 1, 2 of every pass take 50 ms, later ones nothing. Batch 0 is the
    # start-up batch and warmup=2 skips 1 and 2, so the 2 timed batches are both fast;
    # had a slow one leaked in, the mean would be at least half of 50 ms.
    source = SlowStart(n=10, slow=3, slow_s=SLOW_S)
    timing = time_loader(source, batches=2, warmup=2, repeats=2)
    assert source.yielded == 2 * (1 + 2 + 2), (
        f"each repeat takes 1 start-up + 2 warm-up + 2 timed batches, {source.yielded} taken"
    )
    assert timing.mean_s_per_batch / SLOW_S < 0.25, (
        f"a slow warm-up batch leaked into the timed ones: {timing.mean_s_per_batch} s/batch, "
        f"{timing.mean_s_per_batch / SLOW_S:.2f} of a slow batch (a leak gives >= 0.5)"
    )
    for s in timing.startup_s:
        assert s / SLOW_S >= 0.95, f"start-up includes the first (50 ms) batch, got {s} s"


def test_time_loader_times_batches_after_too_short_warmup():
    # The same source with warmup=1: the slow batch 2 is now timed and must show up.
    timing = time_loader(SlowStart(n=10, slow=3, slow_s=SLOW_S), batches=2, warmup=1, repeats=1)
    assert timing.mean_s_per_batch / SLOW_S >= 0.95 / 2, (
        f"one 50 ms batch among 2 timed ones, got only {timing.mean_s_per_batch} s/batch"
    )


def test_time_loader_batches_none_times_all_remaining():
    source = SlowStart(n=12, slow=0, slow_s=0.0)
    timing = time_loader(source, batches=None, warmup=3, repeats=2)
    assert timing.n_batches == [12 - 1 - 3] * 2, (
        f"12 batches minus 1 start-up and 3 warm-up leaves 8 per repeat, got {timing.n_batches}"
    )


def test_time_loader_reports_startup_separately_from_steady_state():
    timing = time_loader(sleep_loader(2), batches=6, warmup=2, repeats=2)
    for startup in timing.startup_s:
        assert startup / BATCH_S >= 0.95, (
            f"start-up waits for the first whole batch ({BATCH_S} s), got {startup} s"
        )
        assert startup > timing.mean_s_per_batch, (
            f"starting workers and loading the first batch ({startup} s) should cost more "
            f"than a steady-state batch with 2 workers ({timing.mean_s_per_batch} s)"
        )


def test_time_loader_step_seconds_and_wait_fraction_serial():
    timing = time_loader(sleep_loader(0), batches=5, warmup=1, repeats=1, step=0.01)
    steps = timing.steps_s[0]
    assert min(steps) / 0.01 >= 0.95, f"a 10 ms step was recorded as {min(steps)} s"
    # Loading 40 ms then stepping 10 ms: the loop waits about 80% of the time.
    assert 0.6 <= timing.wait_fraction <= 0.95, (
        f"0 workers, 40 ms load, 10 ms step: wait fraction about 0.8, got {timing.wait_fraction}"
    )
    assert timing.mean_s_per_batch / (BATCH_S + 0.01) >= 0.95, (
        f"with 0 workers load and step add up, got {timing.mean_s_per_batch} s/batch"
    )


def test_time_loader_workers_hide_loading_behind_a_long_step():
    # 2 workers deliver a 40 ms batch every 20 ms; a 50 ms step is the bottleneck.
    timing = time_loader(sleep_loader(2), batches=6, warmup=2, repeats=1, step=0.05)
    assert timing.wait_fraction < 0.3, (
        f"loading should overlap the 50 ms step, but the loop waited "
        f"{timing.wait_fraction:.0%} of the time"
    )
    assert 0.95 <= timing.mean_s_per_batch / 0.05 <= 3, (
        f"the step sets the pace (50 ms), got {timing.mean_s_per_batch} s/batch"
    )


def test_time_loader_calls_step_with_every_batch_in_order():
    seen = []
    loader = DataLoader(SleepDataset(40, 0.0), batch_size=4, num_workers=0)
    time_loader(loader, batches=3, warmup=2, repeats=2, step=seen.append)
    assert len(seen) == 2 * (1 + 2 + 3), f"step should see all 12 batches, saw {len(seen)}"
    firsts = [int(batch[0]) for batch in seen[:6]]
    assert firsts == [0, 4, 8, 12, 16, 20], f"batches out of order or skipped: {firsts}"


def test_time_loader_shuts_down_workers_after_each_repeat():
    before = worker_pids()
    pids_per_repeat: list[set[int]] = []

    # Record the live worker pids once per repeat: on its first step call.
    calls = {"n": 0}

    def step(batch):
        if calls["n"] % (1 + 1 + 2) == 0:
            pids_per_repeat.append(worker_pids() - before)
        calls["n"] += 1

    time_loader(sleep_loader(2, n=64), batches=2, warmup=1, repeats=3, step=step)
    assert len(pids_per_repeat) == 3, f"expected one record per repeat: {pids_per_repeat}"
    assert all(len(p) == 2 for p in pids_per_repeat), (
        f"each repeat should run 2 workers: {pids_per_repeat}"
    )
    first, second, third = pids_per_repeat
    assert not (first & second) and not (second & third), (
        f"each repeat should start fresh workers, got {pids_per_repeat}"
    )
    assert worker_pids() - before == set(), (
        f"workers left running after time_loader: {worker_pids() - before}"
    )


def test_time_loader_persistent_workers_reused_and_start_fast():
    before = worker_pids()
    loader = DataLoader(
        SleepDataset(24, 0.001), batch_size=4, num_workers=2, persistent_workers=True
    )
    pids: list[set[int]] = []
    try:
        timing = time_loader(
            loader,
            batches=None,
            warmup=1,
            repeats=3,
            step=lambda batch: pids.append(worker_pids() - before),
        )
        assert set.union(*pids) == pids[0] and len(pids[0]) == 2, (
            f"persistent workers should be the same 2 processes in every repeat: {pids}"
        )
        assert timing.later_startup_s < 0.6 * timing.first_startup_s, (
            f"reused workers should start much faster: first {timing.first_startup_s} s, "
            f"later {timing.later_startup_s} s"
        )
        assert timing.persistent_workers, "the timing should record persistent workers"
    finally:
        shutdown_workers(loader)
    assert worker_pids() - before == set(), "shutdown_workers(loader) left workers running"


def test_time_loader_items_per_second_uses_batch_size():
    timing = time_loader(sleep_loader(0), batches=3, warmup=0, repeats=1)
    assert timing.batch_size == BATCH, f"batch size from the loader, got {timing.batch_size}"
    assert timing.items_per_s == pytest.approx(BATCH / timing.mean_s_per_batch), (
        "items per second should be batch size x batches per second"
    )
    unknown = time_loader(SlowStart(5, 0, 0.0), batches=2, warmup=0, repeats=1)
    assert math.isnan(unknown.items_per_s), "without a batch size, items/s is unknown (NaN)"


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"batches": 0}, ValueError),
        ({"warmup": -1}, ValueError),
        ({"repeats": 0}, ValueError),
        ({"step": "fast"}, TypeError),
        ({"step": -0.1}, ValueError),
        ({"batches": 20}, ValueError),  # the source has only 10 batches
        ({"warmup": 10}, ValueError),  # runs out during warm-up
    ],
)
def test_time_loader_rejects_bad_arguments(kwargs, error):
    with pytest.raises(error):
        time_loader(SlowStart(10, 0, 0.0), **kwargs)


def test_time_loader_rejects_empty_loader():
    with pytest.raises(ValueError, match="no batch"):
        time_loader([], repeats=1)


# --------------------------------------------------------------------------- results


def make_timing() -> LoaderTiming:
    """A hand-made result: 2 repeats of 3 batches, 0.1 and 0.3 s per batch."""
    return LoaderTiming(
        startup_s=[1.0, 0.2],
        s_per_batch=[0.1, 0.3],
        waits_s=[[0.05, 0.05, 0.05], [0.15, 0.15, 0.15]],
        steps_s=[[0.05, 0.05, 0.05], [0.15, 0.15, 0.15]],
        n_batches=[3, 3],
        warmup=2,
        batch_size=10,
    )


def test_loader_timing_summary_statistics():
    t = make_timing()
    assert t.mean_s_per_batch == pytest.approx(0.2), f"mean of 0.1 and 0.3: {t.mean_s_per_batch}"
    assert t.std_s_per_batch == pytest.approx(0.02**0.5), (
        f"sample std of 0.1 and 0.3 is 0.1414, got {t.std_s_per_batch}"
    )
    assert t.batches_per_s == pytest.approx(5.0), f"1 / 0.2 s = 5 batches/s, got {t.batches_per_s}"
    assert t.items_per_s == pytest.approx(50.0), f"10 items x 5 batches/s, got {t.items_per_s}"
    assert t.wait_fraction == pytest.approx(0.5), f"waits equal steps: 0.5, got {t.wait_fraction}"
    assert t.first_startup_s == 1.0 and t.later_startup_s == pytest.approx(0.2), (
        f"first and later start-up: {t.first_startup_s}, {t.later_startup_s}"
    )


def test_loader_timing_as_dict_is_flat_numbers():
    d = make_timing().as_dict()
    for key in ("mean_s_per_batch", "std_s_per_batch", "startup_s", "items_per_s", "wait_fraction"):
        assert isinstance(d[key], float), f"{key} should be a plain float, got {d[key]!r}"
    assert d["n_batches"] == 6 and d["repeats"] == 2, f"counts in as_dict: {d}"
    assert d["startup_s"] == pytest.approx(0.6), f"startup_s is the mean start-up: {d['startup_s']}"


# --------------------------------------------------------------------------- plots


def test_plot_timings_draws_one_point_per_label(tmp_path):
    import pandas as pd

    results = {"0 workers": make_timing(), "2 workers": make_timing()}
    ax = plot_timings(results)
    labels = [t.get_text() for t in ax.get_xticklabels()]
    assert labels == ["0 workers", "2 workers"], f"tick labels: {labels}"
    (line,) = ax.lines[:1]
    assert list(line.get_ydata()) == pytest.approx([200.0, 200.0]), "means in ms"
    ax.figure.savefig(tmp_path / "timings.png")
    assert (tmp_path / "timings.png").stat().st_size > 0, "the figure should save"

    df = pd.DataFrame([make_timing().as_dict()], index=["only"])
    ax = plot_timings(df)
    assert [t.get_text() for t in ax.get_xticklabels()] == ["only"], "DataFrame index as labels"
    with pytest.raises(TypeError):
        plot_timings([1, 2, 3])


def test_plot_waits_draws_one_line_per_repeat(tmp_path):
    ax = plot_waits(make_timing())
    repeat_lines = [ln for ln in ax.lines if ln.get_label().startswith("repeat")]
    assert len(repeat_lines) == 2, f"one line per repeat, got {len(repeat_lines)}"
    assert list(repeat_lines[0].get_xdata()) == [3, 4, 5], (
        "timed batches are numbered after the start-up batch 0 and 2 warm-up batches"
    )
    ax.figure.savefig(tmp_path / "waits.png")
    assert (tmp_path / "waits.png").stat().st_size > 0, "the figure should save"


# --------------------------------------------------------------------------- workloads


def test_spin_dataset_costs_at_least_its_cpu_time():
    from feedgpu.workloads import SpinDataset

    loader = DataLoader(SpinDataset(40, 0.005), batch_size=4, num_workers=0)
    timing = time_loader(loader, batches=3, warmup=1, repeats=1)
    assert timing.mean_s_per_batch / (4 * 0.005) >= 0.95, (
        f"4 items of 5 ms CPU each cannot take less than 20 ms: {timing.mean_s_per_batch} s"
    )


@pytest.mark.slow  # starting a spawned worker imports torch afresh: about 4 s
def test_workloads_run_in_spawned_workers():
    # macOS and Windows start workers with spawn: the dataset must be importable.
    loader = DataLoader(
        SleepDataset(8, 0.0, item_shape=(2,)),
        batch_size=4,
        num_workers=1,
        multiprocessing_context="spawn",
    )
    batches = list(loader)
    assert [b[:, 0].tolist() for b in batches] == [[0, 1, 2, 3], [4, 5, 6, 7]], (
        f"spawned worker returned {batches}"
    )


class _StoppingIterator:
    """Stands for a DataLoader iterator whose shutdown raises ``error``."""

    def __init__(self, error):
        self.error, self.calls = error, 0

    def _shutdown_workers(self):
        self.calls += 1
        raise self.error


def test_shutdown_workers_accepts_a_worker_that_died_on_its_way_out():
    """A spawned worker may abort while it exits; PyTorch reports it during the shutdown."""
    from feedgpu.measure.timing import shutdown_workers

    for message in ("DataLoader worker (pid 123) is killed by signal: Aborted. ",
                    "DataLoader worker (pid(s) 1, 2) exited unexpectedly"):
        it = _StoppingIterator(RuntimeError(message))
        shutdown_workers(it)
        assert it.calls == 1


def test_shutdown_workers_raises_other_errors():
    from feedgpu.measure.timing import shutdown_workers

    with pytest.raises(RuntimeError, match="something else"):
        shutdown_workers(_StoppingIterator(RuntimeError("something else")))
    with pytest.raises(ValueError):
        shutdown_workers(_StoppingIterator(ValueError("killed by signal")))
