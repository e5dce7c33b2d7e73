"""Tests for feedgpu.models.pipeline: the queue model, the event simulation and the explanations.

Everything here is deterministic, so the checks are exact (up to float rounding).
Expected values are worked out by hand in the tests, from the model's stated rules.
"""

from __future__ import annotations

import itertools
import statistics

import matplotlib

matplotlib.use("Agg")

import pytest

from feedgpu.models.pipeline import (bottleneck_stage, draw_load_times, explain_bottleneck, simulate, steady_state_time_per_batch)
from feedgpu.plots import plot_model_vs_measured

pytestmark = pytest.mark.unit

# The Stack Overflow experiment: 128 items of 3.125 ms each, a 50 ms step, small arrays
# (negligible transfer). Measured seconds per batch for 0, 2, 4, 6 and 8 workers.
SO_LOAD_S = 128 * 0.003125  # 0.4 s per batch
SO_STEP_S = 0.05
SO_WORKERS = [0, 2, 4, 6, 8]
SO_MEASURED = [0.4707, 0.2098, 0.1056, 0.0720, 0.0531]


# --------------------------------------------------------------------------- the formula


def test_model_reproduces_stack_overflow_small_arrays():
    # By hand: 0 workers load then step, 0.4 + 0.05; w workers deliver one every 0.4 / w.
    by_hand = [0.4 + 0.05, 0.4 / 2, 0.4 / 4, 0.4 / 6, 0.4 / 8]
    for w, hand, measured in zip(SO_WORKERS, by_hand, SO_MEASURED):
        model = steady_state_time_per_batch(w, SO_LOAD_S, SO_STEP_S)
        assert model == pytest.approx(hand), f"{w} workers: model {model}, by hand {hand}"
        assert abs(model - measured) <= 0.1 * measured, (
            f"{w} workers: model {model:.4f} s is more than 10% from measured {measured} s"
        )


def test_model_serial_adds_load_and_step_without_transfer():
    got = steady_state_time_per_batch(0, 0.3, 0.1, transfer_s=0.2)
    assert got == pytest.approx(0.4), f"0 workers: 0.3 load + 0.1 step, no transfer; got {got}"


@pytest.mark.parametrize(
    ("workers", "load", "step", "transfer", "expected"),
    [
        (4, 0.4, 0.05, 0.02, (0.4 + 0.02) / 4),  # workers slower than 0.05 + 0.02
        (8, 0.4, 0.05, 0.02, 0.05 + 0.02),  # main process slower than 0.42 / 8
        (2, 0.1, 0.05, 0.0, 0.05),  # balanced
        (1, 0.0, 0.0, 0.0, 0.0),
    ],
)
def test_model_with_workers_is_the_slowest_stage(workers, load, step, transfer, expected):
    got = steady_state_time_per_batch(workers, load, step, transfer)
    assert got == pytest.approx(expected), f"{workers} workers: expected {expected}, got {got}"


def test_model_more_workers_never_slower_and_floored_by_main_process():
    times = [steady_state_time_per_batch(w, 0.5, 0.03, 0.01) for w in range(1, 40)]
    assert all(a >= b for a, b in itertools.pairwise(times)), f"not monotone: {times}"
    assert min(times) == pytest.approx(0.03 + 0.01), f"floor is step + transfer, got {min(times)}"


@pytest.mark.parametrize(
    "args",
    [
        (-1, 0.1, 0.1, 0.0),
        (1.5, 0.1, 0.1, 0.0),
        (1, -0.1, 0.1, 0.0),
        (1, 0.1, float("nan"), 0.0),
        (1, 0.1, 0.1, -1.0),
    ],
)
def test_model_rejects_bad_arguments(args):
    with pytest.raises(ValueError):
        steady_state_time_per_batch(*args)


@pytest.mark.parametrize("args", [("2", 0.1, 0.1), (True, 0.1, 0.1), (1, None, 0.1), (1, 0.1, "0.1")])
def test_model_rejects_arguments_that_are_not_numbers(args):
    with pytest.raises(TypeError):
        steady_state_time_per_batch(*args)


def test_model_takes_whole_floats_and_numpy_worker_counts():
    import numpy as np

    # A DataFrame column of worker counts holds numpy integers (or floats, after a NaN).
    for workers in (np.int64(4), 4.0):
        got = steady_state_time_per_batch(workers, 0.4, 0.05)
        assert got == pytest.approx(0.1), f"{workers!r} workers: 0.4 / 4 = 0.1 s per batch, got {got}"


# --------------------------------------------------------------------------- simulation


@pytest.mark.parametrize("prefetch", [2, 3, 4])
def test_simulation_agrees_with_model_without_jitter(prefetch):
    grid = itertools.product(
        [0, 1, 2, 3, 4, 8], [0.0, 0.01, 0.1, 0.4], [0.0, 0.02, 0.05], [0.0, 0.005, 0.03]
    )
    for w, load, step, transfer in grid:
        sim = simulate(w, load, step, transfer_s=transfer, prefetch_factor=prefetch, n_batches=120)
        model = steady_state_time_per_batch(w, load, step, transfer)
        assert sim.steady_s_per_batch == pytest.approx(model, rel=1e-9, abs=1e-12), (
            f"w={w} load={load} step={step} transfer={transfer} prefetch={prefetch}: "
            f"simulated {sim.steady_s_per_batch}, model {model}"
        )


def test_simulation_prefetch_one_agrees_without_transfer():
    for w, load, step in itertools.product([1, 2, 4], [0.01, 0.4], [0.02, 0.05]):
        sim = simulate(w, load, step, prefetch_factor=1, n_batches=80)
        model = steady_state_time_per_batch(w, load, step)
        assert sim.steady_s_per_batch == pytest.approx(model), (
            f"w={w} load={load} step={step}: simulated {sim.steady_s_per_batch}, model {model}"
        )


def test_simulation_prefetch_one_idles_workers_during_receive():
    # With one index per worker, a worker gets its next index only after the main
    # process has received its batch: a worker's round is load + send + receive,
    # 0.1 + 0.02 + 0.02, and 2 workers give one batch per 0.07 s, not the model's 0.06.
    sim = simulate(2, 0.1, 0.01, transfer_s=0.02, prefetch_factor=1, n_batches=100)
    assert sim.steady_s_per_batch >= (0.1 + 0.02 + 0.02) / 2 - 1e-9, (
        f"expected at least 0.07 s per batch, got {sim.steady_s_per_batch}"
    )


def test_simulation_startup_transient():
    # 4 workers start after 1 s and need 0.4 s each: nothing arrives before 1.4 s.
    sim = simulate(4, 0.4, 0.05, startup_s=1.0, n_batches=40)
    assert sim.first_batch_s == pytest.approx(1.0 + 0.4), f"first batch at {sim.first_batch_s}"
    assert sim.wait_s[0] == pytest.approx(1.4), f"the loop waited {sim.wait_s[0]} for batch 0"
    assert sim.total_s > sim.n_batches * sim.steady_s_per_batch, (
        "the start-up transient should make the whole run longer than n x steady state"
    )
    with_transfer = simulate(4, 0.4, 0.05, startup_s=1.0, transfer_s=0.01, n_batches=40)
    assert with_transfer.first_batch_s == pytest.approx(1.0 + 0.4 + 0.01 + 0.01), (
        f"first batch: start-up, load, send, receive; got {with_transfer.first_batch_s}"
    )
    serial = simulate(0, 0.4, 0.05, startup_s=1.0, n_batches=10)
    assert serial.first_batch_s == pytest.approx(0.4), "0 workers have no worker start-up"


def test_simulation_in_order_batches_arrive_in_bursts_of_workers():
    # Workers start together and take equally long, so batches 0..3 arrive together.
    sim = simulate(4, 0.4, 0.01, n_batches=12)
    assert sim.ready_s[:4] == pytest.approx([0.4] * 4), f"first round: {sim.ready_s[:4]}"
    assert sim.ready_s[4:8] == pytest.approx([0.8] * 4), f"second round: {sim.ready_s[4:8]}"
    assert sim.got_s[:4] == pytest.approx([0.4, 0.41, 0.42, 0.43]), "loop takes them one by one"


def test_simulation_larger_prefetch_absorbs_jitter():
    # On average the workers are fast enough (0.16 / 4 = 0.04 s < 0.05 s step), but load
    # times vary (coefficient of variation 1): a deeper queue rides out the slow ones.
    for seed in range(5):
        runs = {
            pf: simulate(
                4, 0.16, 0.05, prefetch_factor=pf, n_batches=600, load_jitter=1.0, seed=seed
            )
            for pf in (1, 8)
        }
        shallow, deep = runs[1], runs[8]
        assert deep.mean_idle_s < 0.5 * shallow.mean_idle_s, (
            f"seed {seed}: prefetch 8 should wait much less than prefetch 1: "
            f"{deep.mean_idle_s} vs {shallow.mean_idle_s} s per batch"
        )
        assert deep.steady_s_per_batch < shallow.steady_s_per_batch, (
            f"seed {seed}: less waiting means faster steps: "
            f"{deep.steady_s_per_batch} vs {shallow.steady_s_per_batch}"
        )
    no_jitter = simulate(4, 0.16, 0.05, prefetch_factor=1, n_batches=200)
    assert no_jitter.mean_idle_s == 0.0, "without jitter the loop never waits here"


def test_simulation_no_prefetch_fixes_a_rate_mismatch():
    # 2 workers x 0.4 s deliver one batch per 0.2 s; the step needs only 0.05 s.
    for pf in (1, 2, 4, 8, 16):
        sim = simulate(2, 0.4, 0.05, prefetch_factor=pf, n_batches=200)
        assert sim.steady_s_per_batch == pytest.approx(0.4 / 2), (
            f"prefetch {pf}: the workers' rate sets the pace, got {sim.steady_s_per_batch}"
        )
        assert sim.max_queue <= 2, (
            f"prefetch {pf}: the queue never fills when it drains faster than it fills, "
            f"max {sim.max_queue}"
        )
        jittery = simulate(2, 0.4, 0.05, prefetch_factor=pf, n_batches=2000, load_jitter=0.5)
        assert jittery.steady_s_per_batch >= 0.95 * 0.2, (
            f"prefetch {pf} with jitter cannot beat the workers' rate: {jittery.steady_s_per_batch}"
        )


def test_simulation_records_are_consistent():
    sim = simulate(
        3, 0.1, 0.02, transfer_s=0.005, prefetch_factor=2, n_batches=50, load_jitter=0.5, seed=3
    )
    n = sim.n_batches
    assert n == 50 and len(sim.ready_s) == len(sim.got_s) == len(sim.wait_s) == n, (
        "one entry per batch"
    )
    assert all(g >= r for g, r in zip(sim.got_s, sim.ready_s)), (
        "a batch is returned after it is ready"
    )
    assert all(b > a for a, b in itertools.pairwise(sim.done_s)), "steps finish in order"
    assert all(0 <= i <= w for i, w in zip(sim.idle_s, sim.wait_s)), "idle is part of the wait"
    assert min(sim.queue_n) >= 0 and sim.queue_n[-1] == 0, f"queue: {sim.queue_n[:10]}..."
    assert sim.max_queue <= 2 * 3, (
        f"at most prefetch x workers batches in flight, got {sim.max_queue}"
    )
    assert sim.queue_t == sorted(sim.queue_t), "queue times in order"


def test_simulation_is_deterministic_per_seed():
    a = simulate(2, 0.1, 0.05, load_jitter=0.4, seed=7, n_batches=30)
    b = simulate(2, 0.1, 0.05, load_jitter=0.4, seed=7, n_batches=30)
    c = simulate(2, 0.1, 0.05, load_jitter=0.4, seed=8, n_batches=30)
    assert a.done_s == b.done_s, "same seed, same run"
    assert a.loads_s != c.loads_s, "another seed, other load times"


def test_draw_load_times_mean_and_spread():
    draws = draw_load_times(20000, 0.2, 0.5, seed=1)
    mean = statistics.fmean(draws)
    cv = statistics.stdev(draws) / mean
    assert mean == pytest.approx(0.2, rel=0.03), f"mean load time {mean}, wanted 0.2"
    assert cv == pytest.approx(0.5, rel=0.05), f"coefficient of variation {cv}, wanted 0.5"
    assert min(draws) > 0, "load times are positive"
    assert draw_load_times(3, 0.2, 0.0, seed=1) == [0.2, 0.2, 0.2], "no jitter, constant"


@pytest.mark.parametrize(
    "kwargs",
    [{"prefetch_factor": 0}, {"n_batches": 0}, {"load_jitter": -0.1}, {"startup_s": -1.0}],
)
def test_simulate_rejects_bad_arguments(kwargs):
    with pytest.raises(ValueError):
        simulate(2, 0.1, 0.05, **kwargs)


# --------------------------------------------------------------------------- words, plot


@pytest.mark.parametrize(
    ("args", "stage", "words"),
    [
        ((0, 0.4, 0.05, 0.0), "serial", "0 workers"),
        ((2, 0.4, 0.05, 0.0), "loading", "Loading"),
        ((8, 0.4, 0.05, 0.0), "balanced", "Balanced"),
        ((16, 0.4, 0.05, 0.0), "step", "step"),
        ((8, 0.56, 0.05, 0.33), "transfer", "Transfer"),
    ],
)
def test_bottleneck_named(args, stage, words):
    assert bottleneck_stage(*args) == stage, (
        f"{args}: expected {stage}, got {bottleneck_stage(*args)}"
    )
    text = explain_bottleneck(*args)
    assert words in text, f"{args}: explanation should mention {words!r}: {text}"
    assert len(text) < 400, f"explanations are short: {len(text)} characters"


def test_plot_model_vs_measured(tmp_path):
    ax = plot_model_vs_measured(
        SO_WORKERS,
        SO_MEASURED,
        load_s=SO_LOAD_S,
        step_s=SO_STEP_S,
        measured_std=[0.01] * 5,
        simulate_jitter=0.3,
    )
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    for wanted in ("model", "measured"):
        assert wanted in labels, f"legend should name {wanted!r}: {labels}"
    model_line = next(ln for ln in ax.lines if ln.get_label() == "model")
    assert list(model_line.get_xdata()) == list(range(9)), "model drawn for 0..8 workers"
    assert model_line.get_ydata()[0] == pytest.approx(450.0), "0 workers: 450 ms"
    ax.figure.savefig(tmp_path / "model.png")
    assert (tmp_path / "model.png").stat().st_size > 0, "the figure should save"
    with pytest.raises(ValueError):
        plot_model_vs_measured([0, 2], [0.4], load_s=0.4, step_s=0.05)


# --------------------------------------------------------------------------- the cores floor


def test_cores_floor_counts_the_main_process_cpu():
    """2 workers on 2 cores: 15 ms to build, 6.5 ms to hand over. The stages alone allow a
    batch every 10.75 ms, but the CPU of a batch, 15 + 2 * 6.5 = 28 ms, on 2 cores takes 14 ms."""
    assert steady_state_time_per_batch(2, 0.015, 0.0, 0.0065) == pytest.approx(0.01075)
    assert steady_state_time_per_batch(2, 0.015, 0.0, 0.0065, cores=2) == pytest.approx(0.014)


def test_cores_floor_leaves_the_other_stages_when_they_are_slower():
    # the main process is slowest: 50 ms step + 10 ms transfer, far above (0.1 + 0.02) / 4
    assert steady_state_time_per_batch(4, 0.1, 0.05, 0.01, cores=4) == pytest.approx(0.06)
    # the workers are slowest: one worker, (0.1 + 0.01) / 1, above (0.1 + 0.02) / 8
    assert steady_state_time_per_batch(1, 0.1, 0.0, 0.01, cores=8) == pytest.approx(0.11)
    # no workers: nothing is handed over and the cores do not matter
    assert steady_state_time_per_batch(0, 0.1, 0.05, 0.01, cores=0.5) == pytest.approx(0.15)


def test_cores_floor_caps_many_workers_at_the_cores():
    assert steady_state_time_per_batch(8, 0.01, 0.0, 0.0, cores=2) == pytest.approx(0.005)
    assert steady_state_time_per_batch(8, 0.01, 0.0, 0.0, cores=1.5) == pytest.approx(0.01 / 1.5)


@pytest.mark.parametrize("cores", [0, -1.0, float("nan")])
def test_cores_must_be_positive(cores):
    with pytest.raises(ValueError):
        steady_state_time_per_batch(2, 0.01, 0.0, 0.0, cores=cores)


# --------------------------------------------------------------------------- an uneven hand-over


def test_a_cheap_receive_lowers_the_main_process_and_the_cores_floor():
    """A tensor in shared memory: the worker pays 20 ms to write it, the main process 1 ms to
    map it. 2 workers, 70 ms to build, 2 cores: the workers allow (70 + 20) / 2 = 45 ms, the
    cores (70 + 20 + 1) / 2 = 45.5 ms; charging the main process the worker's 20 ms would
    give (70 + 40) / 2 = 55 ms instead."""
    assert steady_state_time_per_batch(2, 0.070, 0.0, 0.020, cores=2, receive_s=0.001) == pytest.approx(0.0455)
    assert steady_state_time_per_batch(2, 0.070, 0.0, 0.020, cores=2) == pytest.approx(0.055)
    # the main process: step + receive, not step + the worker's transfer
    assert steady_state_time_per_batch(4, 0.010, 0.030, 0.020, receive_s=0.001) == pytest.approx(0.031)
    assert steady_state_time_per_batch(4, 0.010, 0.030, 0.020) == pytest.approx(0.050)


def test_receive_defaults_to_the_transfer_and_is_checked():
    for args in [(2, 0.1, 0.02, 0.01), (3, 0.05, 0.0, 0.004), (1, 0.2, 0.3, 0.0)]:
        assert steady_state_time_per_batch(*args, cores=2, receive_s=args[3]) == pytest.approx(
            steady_state_time_per_batch(*args, cores=2))
    assert steady_state_time_per_batch(0, 0.1, 0.05, 0.01, receive_s=0.5) == pytest.approx(0.15), \
        "no workers: nothing is handed over"
    with pytest.raises(ValueError):
        steady_state_time_per_batch(2, 0.1, 0.0, 0.01, receive_s=-0.001)


def test_one_worker_is_spoken_of_in_the_singular():
    assert "1 worker delivers a batch" in explain_bottleneck(1, 0.4, 0.05)
    assert "2 workers deliver a batch" in explain_bottleneck(2, 0.4, 0.05)
