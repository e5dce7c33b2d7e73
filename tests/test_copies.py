"""Tests for feedgpu.models.copies: the host-to-device copy model and its fit.

Expected values are worked out by hand here, from latency + bytes / bandwidth and the
rules in the docstrings, never taken from the module. Everything is arithmetic, so the
checks are exact up to float rounding.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from feedgpu.models.copies import (FROM_PAGEABLE, PINNING_FROM, PINNING_SPREAD, STRATEGIES, CopyCosts, CopyRange, LinearCost,
                            batch_sized, best_strategy, copy_range, fit_linear_cost, pageable_range,
                            pin_then_copy_limit, pin_then_copy_slowdown, predict_strategies, range_note,
                            spread_range, strategy_range_s, strategy_time_s, training_loop_range_s, training_loop_s)

pytestmark = pytest.mark.unit

GB = 1e9
MIB = 2**20

# Round numbers for by-hand checks: 1 MB tensors, pageable copy 10 us + 1 ms, pinned copy
# 10 us + 0.5 ms, pinning 0 + 1 ms, one wait 10 us.
HAND = CopyCosts(pageable=LinearCost(10e-6, 1 * GB), pinned=LinearCost(10e-6, 2 * GB),
                 pinning=LinearCost(0.0, 1 * GB), sync_s=10e-6)
HAND_BYTES = 1e6


def test_linear_cost_one_gigabyte():
    """1 GB at 10 GB/s after a 10 us latency takes 0.1 s + 10 us."""
    cost = LinearCost(latency_s=10e-6, bytes_per_s=10 * GB)
    assert cost.time_s(1 * GB) == pytest.approx(0.10001, rel=1e-12), (
        "1 GB at 10 GB/s + 10 us should be 0.10001 s")
    assert cost.time_s(0) == pytest.approx(10e-6), "an empty copy still pays the latency"


def test_copy_costs_choose_pinned_or_pageable():
    """copy_s uses the pinned or the pageable line; pin_s the pinning line."""
    assert HAND.copy_s(HAND_BYTES, pinned=False) == pytest.approx(1.01e-3), "pageable: 10 us + 1e6 B / 1 GB/s"
    assert HAND.copy_s(HAND_BYTES, pinned=True) == pytest.approx(0.51e-3), "pinned: 10 us + 1e6 B / 2 GB/s"
    assert HAND.pin_s(HAND_BYTES) == pytest.approx(1e-3), "pinning: 1e6 B / 1 GB/s"


@pytest.mark.parametrize("latency_s, bytes_per_s", [(-1e-6, 1e9), (0.0, 0.0), (0.0, -1e9),
                                                    (math.nan, 1e9), (0.0, math.inf)])
def test_linear_cost_rejects_meaningless_values(latency_s, bytes_per_s):
    """A negative or non-finite latency, or a bandwidth not > 0, is a ValueError naming the field."""
    with pytest.raises(ValueError, match="latency_s|bytes_per_s"):
        LinearCost(latency_s, bytes_per_s)


def test_copy_costs_reject_a_bad_part():
    """A part that is not a LinearCost, or a negative sync_s, is refused."""
    with pytest.raises(TypeError, match="pinned"):
        CopyCosts(pinned=(10e-6, 1e9))
    with pytest.raises(ValueError, match="sync_s"):
        CopyCosts(sync_s=-1.0)


def test_six_strategies_by_hand():
    """The six strategies for 4 tensors of 1 MB, worked out from the rules by hand."""
    # c_pageable = 1.01 ms, c_pinned = 0.51 ms, p = 1 ms, s = 0.01 ms, n = 4
    by_hand = {
        "pageable": 4 * (1.01e-3 + 0.01e-3),                # 4.08 ms
        "pageable_nb": 4 * 1.01e-3 + 0.01e-3,               # 4.05 ms
        "pin_then_copy": 4 * (1e-3 + 0.51e-3 + 0.01e-3),    # 6.08 ms
        "pin_then_copy_nb": 1e-3 + 0.51e-3 + 3 * 1e-3 + 0.01e-3,  # 4.52 ms: pinning sets the pace
        "pinned": 4 * (0.51e-3 + 0.01e-3),                  # 2.08 ms
        "pinned_nb": 4 * 0.51e-3 + 0.01e-3,                 # 2.05 ms
    }
    predicted = predict_strategies(4, HAND_BYTES, HAND)
    assert list(predicted) == list(STRATEGIES), "predictions come in the order of STRATEGIES"
    for name, seconds in by_hand.items():
        assert predicted[name] == pytest.approx(seconds, rel=1e-12), (
            f"{name}: {predicted[name]} s, by hand {seconds} s")


def test_pipeline_paced_by_the_copy_when_pinning_is_faster():
    """pin_then_copy_nb: when the copy is the slower stage, p + n c + s."""
    costs = CopyCosts(pageable=LinearCost(0, 1 * GB), pinned=LinearCost(0, 1 * GB),
                      pinning=LinearCost(0, 4 * GB), sync_s=0.0)
    # p = 0.25 ms, c = 1 ms: 0.25 + 1 + 9 * 1 = 10.25 ms
    got = strategy_time_s("pin_then_copy_nb", 10, 1e6, costs)
    assert got == pytest.approx(10.25e-3, rel=1e-12), (
        f"pipeline paced by the copy: got {got} s, expected 10.25 ms")


def test_pin_then_copy_is_twice_as_slow_when_pinning_costs_a_copy():
    """The tutorial's "up to twice as slow": exactly 2 when pinning and both copies cost the same."""
    equal = CopyCosts(pageable=LinearCost(0, 10 * GB), pinned=LinearCost(0, 10 * GB),
                      pinning=LinearCost(0, 10 * GB), sync_s=0.0)
    assert pin_then_copy_slowdown(1e8, equal) == pytest.approx(2.0, rel=1e-12), (
        "equal costs: pin + copy = 2 copies")
    # faster pinned copies shrink it: 1/1 + 1/4 of a pageable copy
    fast_dma = CopyCosts(pageable=LinearCost(0, 10 * GB), pinned=LinearCost(0, 40 * GB),
                         pinning=LinearCost(0, 10 * GB), sync_s=0.0)
    assert pin_then_copy_slowdown(1e8, fast_dma) == pytest.approx(1.25, rel=1e-12), "p + c/4 over c is 1.25"
    # many tensors: the pipeline hides the copies behind the pinning, 1 + 1/n
    many = pin_then_copy_slowdown(1e8, equal, n_tensors=10)
    assert many == pytest.approx((11 * 0.01) / (10 * 0.01), rel=1e-12), (
        f"10 tensors: got {many}, expected 1.1")


def test_slowdown_with_latencies_stays_below_its_large_tensor_limit():
    """With the defaults' latencies, one huge tensor comes close to the bandwidth limit from below."""
    costs = CopyCosts()
    limit = (costs.pageable.bytes_per_s / costs.pinning.bytes_per_s
             + costs.pageable.bytes_per_s / costs.pinned.bytes_per_s)
    huge = pin_then_copy_slowdown(10 * GB, costs)
    assert huge == pytest.approx(limit, rel=1e-4), f"10 GB: slowdown {huge}, bandwidth limit {limit}"


def test_the_model_sets_no_bound_of_two_on_pinning_in_the_loop():
    """(p + c_pinned) / c_pageable: 3 when pinning runs at 4 GB/s against a 10 GB/s pageable copy."""
    slow_host = CopyCosts(pageable=LinearCost(0, 10 * GB), pinned=LinearCost(0, 20 * GB),
                          pinning=LinearCost(0, 4 * GB), sync_s=0.0)
    assert pin_then_copy_limit(slow_host) == pytest.approx(10 / 4 + 10 / 20, rel=1e-12), "2.5 + 0.5 pageable copies"
    assert pin_then_copy_slowdown(1e9, slow_host) == pytest.approx(3.0, rel=1e-12), (
        "one tensor, no latencies: (0.25 s + 0.05 s) / 0.1 s")
    assert pin_then_copy_limit(CopyCosts()) == pytest.approx(12 / 12 + 12 / 24, rel=1e-12), "the defaults: 1.5"


def test_the_winner_depends_on_the_costs():
    """Pre-pinned wins when allowed; from pageable data, the pin pipeline wins only when pinning is cheap."""
    assert best_strategy(4, 64 * MIB) == "pinned_nb", "pinning paid elsewhere is unbeatable"
    assert best_strategy(4, 64 * MIB, candidates=FROM_PAGEABLE) == "pageable_nb", (
        "with the default costs, pinning by hand costs more than it saves")
    cheap_pin = CopyCosts(pageable=LinearCost(0, 6 * GB), pinned=LinearCost(0, 24 * GB),
                          pinning=LinearCost(0, 20 * GB), sync_s=0.0)
    # 8 tensors of b: pipeline 8 b/20 + b/24 = 0.44 b ns, against 8 b/6 = 1.33 b ns from pageable
    assert best_strategy(8, 64 * MIB, cheap_pin, candidates=FROM_PAGEABLE) == "pin_then_copy_nb", (
        "fast pinning and slow pageable copies make pinning by hand worth it")


def test_bad_strategy_arguments():
    """An unknown strategy names the known ones; counts below 1 and empty candidates are refused."""
    with pytest.raises(KeyError, match="pinned_nb"):
        strategy_time_s("pinned_fast", 1, 1e6)
    with pytest.raises(ValueError, match="n_tensors"):
        strategy_time_s("pinned", 0, 1e6)
    with pytest.raises(ValueError, match="candidates"):
        best_strategy(1, 1e6, candidates=[])


def test_training_loop_by_hand():
    """10 batches, copy 3 s, compute 2 s: 50 s serial, 10 * 3 + 2 = 32 s overlapped."""
    assert training_loop_s(10, 3.0, 2.0, overlapped=False) == 50.0, "serial: n (copy + compute)"
    assert training_loop_s(10, 3.0, 2.0, overlapped=True) == 32.0, "copy-bound: n copy + one compute"
    assert training_loop_s(10, 2.0, 3.0, overlapped=True) == 32.0, "compute-bound: n compute + one copy"
    with pytest.raises(ValueError, match="n_batches"):
        training_loop_s(0, 1.0, 1.0, overlapped=True)


# --------------------------------------------------------------------------- the fit

SIZES = [4096 * 4**k for k in range(8)]  # 4 KiB .. 64 MiB
TRUE = LinearCost(latency_s=15e-6, bytes_per_s=12 * GB)


def test_a_copy_in_a_loop_costs_what_the_loop_pays():
    """loop_copy_s uses pageable_in_loop for pageable copies, and nothing changes without it."""
    slow = LinearCost(10e-6, 0.5 * GB)  # 1 MB: 10 us + 2 ms, twice the pageable copy alone
    costs = CopyCosts(pageable=HAND.pageable, pinned=HAND.pinned, pinning=HAND.pinning, sync_s=HAND.sync_s,
                      pageable_in_loop=slow)
    assert costs.loop_copy_s(HAND_BYTES, pinned=False) == pytest.approx(10e-6 + 2e-3)
    assert costs.copy_s(HAND_BYTES, pinned=False) == pytest.approx(10e-6 + 1e-3), "a copy alone is unchanged"
    assert costs.loop_copy_s(HAND_BYTES, pinned=True) == pytest.approx(10e-6 + 0.5e-3), "pinned copies are not staged"
    assert HAND.loop_copy_s(HAND_BYTES, pinned=False) == HAND.copy_s(HAND_BYTES, pinned=False)
    assert HAND.in_loop() is HAND and costs.in_loop().pageable == slow and costs.in_loop().pinned == HAND.pinned
    with pytest.raises(TypeError):
        CopyCosts(pageable_in_loop=(10e-6, 1e9))


def test_the_simulated_loop_pays_the_copy_in_a_loop():
    """simulate_training's pageable loop: n (copy in a loop + compute), plus a wait per blocking copy."""
    from feedgpu.models.device import simulate_training

    costs = CopyCosts(pageable=HAND.pageable, pinned=HAND.pinned, pinning=HAND.pinning, sync_s=HAND.sync_s,
                      pageable_in_loop=LinearCost(10e-6, 0.5 * GB))
    run = simulate_training(4, HAND_BYTES, 1e-3, costs)
    by_hand = 4 * ((10e-6 + 2e-3) + 10e-6 + 1e-3) + 10e-6  # copy, its wait, compute; one final synchronize
    assert run.total_s == pytest.approx(by_hand, rel=1e-9), f"simulated {run.total_s}, by hand {by_hand}"


def test_a_loop_is_fitted_over_batch_sized_copies():
    """batch_sized keeps the copies of 4 MiB and more, or all of them when fewer than two are."""
    points = [(4096 * 4**k, 1e-5 * (k + 1)) for k in range(8)]  # 4 KiB ... 64 MiB
    assert [b for b, _ in batch_sized(points)] == [4 * MIB, 16 * MIB, 64 * MIB]
    few = [(4096, 1e-5), (MIB, 1e-4), (8 * MIB, 1e-3)]
    assert batch_sized(few) == few, "one batch-sized copy cannot make a line: keep them all"


def test_fit_recovers_exact_parameters():
    """Noise-free points give back the latency and bandwidth they were made from, both ways."""
    seconds = [TRUE.time_s(b) for b in SIZES]
    for relative in (True, False):
        fit = fit_linear_cost(SIZES, seconds, relative=relative)
        assert fit.cost.latency_s == pytest.approx(15e-6, rel=1e-6), (
            f"relative={relative}: latency {fit.cost.latency_s}")
        assert fit.cost.bytes_per_s == pytest.approx(12 * GB, rel=1e-6), (
            f"relative={relative}: bandwidth {fit.cost.bytes_per_s}")
        assert max(abs(r) for r in fit.relative_residuals) < 1e-6, "exact points leave no residual"


def test_fit_recovers_parameters_from_noisy_points():
    """With 2% multiplicative noise (seeded), latency and bandwidth come back within 5%."""
    rng = np.random.default_rng(2024)  # fixed seed: the same noise on every run
    sizes = SIZES * 3
    seconds = [TRUE.time_s(b) * (1 + 0.02 * rng.standard_normal()) for b in sizes]
    fit = fit_linear_cost(sizes, seconds)
    assert fit.cost.latency_s == pytest.approx(15e-6, rel=0.05), (
        f"latency {fit.cost.latency_s * 1e6:.2f} us, true 15 us")
    assert fit.cost.bytes_per_s == pytest.approx(12 * GB, rel=0.05), (
        f"bandwidth {fit.cost.bytes_per_s / GB:.2f} GB/s, true 12")
    assert len(fit.residuals_s) == len(sizes), "one residual per point"
    for b, t, r in zip(sizes, seconds, fit.residuals_s):
        assert r == pytest.approx(t - fit.cost.time_s(b), rel=1e-9, abs=1e-15), "residual = measured - fitted"
    spread = float(np.std(fit.relative_residuals))
    assert 0.01 < spread < 0.04, f"relative residuals should spread like the 2% noise, got {spread:.4f}"


def test_fit_clamps_a_negative_latency_to_zero():
    """Points whose straight line crosses below zero give latency 0 and the best line through the origin."""
    sizes, seconds = [1e6, 2e6, 3e6], [0.9e-4, 2.0e-4, 3.1e-4]  # ordinary intercept: -2e-5 s
    fit = fit_linear_cost(sizes, seconds)
    assert fit.cost.latency_s == 0.0, f"latency must be clamped to 0, got {fit.cost.latency_s}"

    def weighted_error(per_byte: float) -> float:
        return sum(((t - b * per_byte) / t) ** 2 for b, t in zip(sizes, seconds))

    best = 1 / fit.cost.bytes_per_s
    for nudge in (0.99, 1.01):
        assert weighted_error(best) < weighted_error(best * nudge), (
            "the slope through the origin is a least-squares optimum")


@pytest.mark.parametrize("sizes, seconds, match", [
    ([1e6], [1e-3], "two different sizes"),
    ([1e6, 1e6], [1e-3, 1.1e-3], "two different sizes"),
    ([1e6, 2e6], [1e-3], "one time per size"),
    ([1e6, 2e6], [1e-3, 0.0], "times must be"),
    ([1e6, 2e6], [2e-3, 1e-3], "do not grow"),
])
def test_fit_rejects_unfittable_points(sizes, seconds, match):
    """Too few sizes, mismatched lengths, zero times or shrinking times are ValueErrors that say why."""
    with pytest.raises(ValueError, match=match):
        fit_linear_cost(sizes, seconds)


# --------------------------------------------------------------------------- ranges (issue 38)


def test_a_range_holds_the_fastest_and_the_slowest_reading():
    """Three readings of 64 MB (4, 6 and 8 ms) and a one-thread host copy of 10 ms that
    counts for the slow end only: 16 to 6.4 GB/s once 10 us of latency are paid."""
    readings = [(64e6, 0.004 + 10e-6), (64e6, 0.006 + 10e-6), (64e6, 0.008 + 10e-6), (1e3, 5.0)]
    found = copy_range(readings, 10e-6, smallest=4e6, slowest=[(64e6, 0.010 + 10e-6)])
    assert found.fast.bytes_per_s == pytest.approx(16e9) and found.slow.bytes_per_s == pytest.approx(6.4e9)
    assert found.time_s(64e6) == pytest.approx((0.004 + 10e-6, 0.010 + 10e-6)) and found.spread == pytest.approx(2.5)
    assert copy_range([(1e3, 5.0)], 0.0, smallest=4e6) is None, "no reading of a batch's size: no range"
    with pytest.raises(ValueError, match="slower than the slow end"):
        CopyRange(LinearCost(0, 1e9), LinearCost(0, 2e9))


def test_pageable_ranges_take_the_fast_end_from_loops_and_pinned_copies_stay_points():
    in_loop = [(64e6, 0.008), (64e6, 0.010)]
    alone = [(64e6, 0.004), (64e6, 0.012)]  # one alone from the caches: faster than any loop
    found = pageable_range(in_loop, alone, one_thread=[(64e6, 0.016)])
    assert found.time_s(64e6) == pytest.approx((0.008, 0.016)), "fast from the loop, slow from every copy"
    assert pageable_range([], alone).time_s(64e6) == pytest.approx((0.004, 0.012)), "no loop: the copies alone"
    costs = CopyCosts(pageable_range=found)
    assert costs.loop_copy_range_s(64e6, pinned=True) == (costs.loop_copy_s(64e6, pinned=True),) * 2
    assert costs.loop_copy_range_s(64e6, pinned=False) == pytest.approx((0.008, 0.016))
    assert costs.copy_range_s(64e6, pinned=False)[0] <= 0.008, "a copy alone may beat a loop's"
    slow = costs.at_end("slow")
    assert slow.pageable_range is None and slow.pageable.time_s(64e6) == pytest.approx(0.016)
    lo, hi = strategy_range_s("pageable", 4, 64e6, costs)
    assert hi > lo and strategy_range_s("pinned_nb", 4, 64e6, costs)[0] == strategy_range_s("pinned_nb", 4, 64e6, costs)[1]
    lo, hi = training_loop_range_s(8, 64e6, 0.004, costs, pinned=False, overlapped=False)
    assert (lo, hi) == pytest.approx((8 * 0.012, 8 * 0.020))


def test_pinning_is_a_range_only_where_its_readings_spread():
    line = LinearCost(0.0, 100e9)
    tight = [(64 * 2**20, [0.00067, 0.00068, 0.00069])]
    assert spread_range(line, tight, smallest=PINNING_FROM, spread=PINNING_SPREAD) is None
    wide = [(64 * 2**20, [0.0005, 0.0007, 0.0014])]
    found = spread_range(line, wide, smallest=PINNING_FROM, spread=PINNING_SPREAD)
    assert found.fast.bytes_per_s == pytest.approx(140e9) and found.slow.bytes_per_s == pytest.approx(50e9)


def test_a_range_note_says_inside_or_by_how_much_outside():
    assert range_note(0.15, 0.1, 0.2) == "inside the predicted range 100-200 ms"
    assert range_note(0.25, 0.1, 0.2) == "outside the predicted range 100-200 ms: 250 ms measured, 25% above it"
    assert range_note(0.05, 0.1, 0.2).endswith("50% below it")
