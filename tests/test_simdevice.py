"""Tests for feedgpu.models.device: the simulated copy and compute engines.

The costs here are powers of two (a 1 MiB batch at 1 GiB/s takes 2**-10 s), so sums
are exact in floating point and the totals worked out by hand can be compared with ``==``.
"""

from __future__ import annotations

import itertools

import pytest

from feedgpu.models.copies import STRATEGIES, CopyCosts, LinearCost, strategy_time_s, training_loop_s
from feedgpu.models.device import (ENGINES, SimDevice, Span, copy_timing_readings, simulate_strategy,
                               simulate_training)

pytestmark = pytest.mark.unit

MIB, GIB = 2**20, 2**30
BATCH = MIB
C = 2.0**-10  # one pinned copy of BATCH at 1 GiB/s, no latency
# pinned at 1 GiB/s, pageable at half that (a copy takes 2 C), pinning at 1 GiB/s; no waits
EXACT = CopyCosts(pageable=LinearCost(0.0, GIB / 2), pinned=LinearCost(0.0, GIB),
                  pinning=LinearCost(0.0, GIB), sync_s=0.0)
S = 2.0**-16  # a wait, for the tests that count them
WITH_WAITS = CopyCosts(pageable=EXACT.pageable, pinned=EXACT.pinned, pinning=EXACT.pinning, sync_s=S)
N = 10


def spans(run, engine):
    return [s for s in run.timeline if s.engine == engine]


def test_strategies_simulated_match_the_formulas():
    """Playing each strategy out gives the formula's time (two routes to one set of rules)."""
    for strategy, n, nbytes in itertools.product(STRATEGIES, (1, 3, 16), (4096, MIB, 64 * MIB)):
        for costs in (CopyCosts(), WITH_WAITS):
            simulated = simulate_strategy(strategy, n, nbytes, costs).total_s
            formula = strategy_time_s(strategy, n, nbytes, costs)
            assert simulated == pytest.approx(formula, rel=1e-12), (
                f"{strategy}, {n} x {nbytes} B: simulated {simulated} s, formula {formula} s")


def test_compute_bound_loop_overlaps_exactly():
    """Compute 3 C per batch: overlapped N * 3C + C, serial N * (C + 3C)."""
    overlapped = simulate_training(N, BATCH, 3 * C, EXACT, pinned=True, non_blocking=True, prefetch=True)
    assert overlapped.total_s == N * 3 * C + C, (
        f"compute-bound: {overlapped.total_s / C} copies, expected {N * 3 + 1}")
    assert overlapped.overlap_s() == (N - 1) * C, "every copy but the first hides behind a compute"
    serial = simulate_training(N, BATCH, 3 * C, EXACT, pinned=True, non_blocking=True)
    assert serial.total_s == N * 4 * C, f"one stream: {serial.total_s / C} copies, expected {N * 4}"
    assert serial.overlap_s() == 0.0, "on one stream a copy waits for the previous compute"
    assert overlapped.total_s == training_loop_s(N, C, 3 * C, overlapped=True), (
        "simulation agrees with the formula")


def test_copy_bound_loop_overlaps_exactly():
    """Compute C / 2 per batch: overlapped N * C + C / 2, serial N * 1.5 C."""
    overlapped = simulate_training(N, BATCH, C / 2, EXACT, pinned=True, non_blocking=True, prefetch=True)
    assert overlapped.total_s == N * C + C / 2, (
        f"copy-bound: {overlapped.total_s / C} copies, expected {N + 0.5}")
    assert overlapped.overlap_s() == (N - 1) * C / 2, "every compute but the last hides behind a copy"
    serial = simulate_training(N, BATCH, C / 2, EXACT, pinned=True, non_blocking=True)
    assert serial.total_s == N * 1.5 * C, f"one stream: {serial.total_s / C} copies, expected {N * 1.5}"


def test_pageable_copies_never_overlap():
    """From pageable memory, even non_blocking and prefetched, the loop is N (2C + k) + one wait."""
    for non_blocking, prefetch in itertools.product((False, True), repeat=2):
        run = simulate_training(N, BATCH, 3 * C, WITH_WAITS, pinned=False,
                                non_blocking=non_blocking, prefetch=prefetch)
        waits = 0 if non_blocking else N  # a blocking copy pays one wait each
        expected = N * (2 * C + 3 * C) + waits * S + S
        assert run.total_s == expected, (
            f"pageable, non_blocking={non_blocking}, prefetch={prefetch}: {run.total_s}, expected {expected}")
        assert run.overlap_s() == 0.0, (
            f"pageable, non_blocking={non_blocking}, prefetch={prefetch}: copies overlapped")
        staging = [s for s in spans(run, "host") if s.op.startswith("stage copy")]
        assert len(staging) == N, "the host stages every pageable copy itself"
        assert all(s.end_s - s.start_s == 2 * C for s in staging), "staging lasts as long as the copy"


def test_blocking_pinned_copy_makes_the_host_wait():
    """One stream, blocking: the host waits for each copy and pays a wait, N (C + S + 3C) + S."""
    run = simulate_training(N, BATCH, 3 * C, WITH_WAITS, pinned=True, non_blocking=False)
    assert run.total_s == N * (C + S + 3 * C) + S, f"blocking pinned loop: {run.total_s}"
    assert len([s for s in spans(run, "host") if s.op.startswith("wait copy")]) == N, "one host wait per copy"


def test_non_blocking_copy_leaves_the_host_free():
    """After a non_blocking pinned copy the host clock has not moved; after a blocking one it has."""
    dev = SimDevice(WITH_WAITS)
    copy = dev.copy(64 * MIB, pinned=True, non_blocking=True)
    assert dev.host_s == 0.0, f"enqueuing costs the host nothing, host at {dev.host_s}"
    assert copy.end_s - copy.start_s == 64 * C, "the copy itself takes 64 C"
    kernel = dev.compute(C, after=[copy])
    assert kernel.start_s == copy.end_s, "a kernel that needs the batch starts when the copy ends"
    assert dev.synchronize() == 64 * C + C + S, "synchronize waits for everything, plus one wait"
    dev = SimDevice(WITH_WAITS)
    dev.copy(64 * MIB, pinned=True, non_blocking=False)
    assert dev.host_s == 64 * C + S, "a blocking copy holds the host until it ends, plus one wait"


def test_unsynchronised_timing_mistake_is_visible():
    """Reading the clock before synchronising times the enqueuing (0 s), not the 64 MiB copy."""
    readings = copy_timing_readings(64 * MIB, WITH_WAITS)
    assert readings.unsynchronised_s == 0.0, (
        f"unsynchronised reading should be 0, got {readings.unsynchronised_s}")
    assert readings.synchronised_s == 64 * C + S, (
        f"synchronised reading should be the copy + one wait, got {readings}")
    readings = copy_timing_readings(64 * MIB, CopyCosts())
    assert readings.unsynchronised_s < readings.synchronised_s / 1000, f"default costs: {readings}"
    pageable = copy_timing_readings(64 * MIB, WITH_WAITS, pinned=False)
    assert pageable.unsynchronised_s == 128 * C, "from pageable memory the host waited: the reading is right"


def test_earlier_kernels_delay_a_copy_on_their_stream():
    """A non_blocking copy queued behind 5 C of kernels on its stream ends at 5 C + C; a clock
    started after synchronize() sees only the copy and one wait (notebook 05's time_copy test)."""
    dev = SimDevice(WITH_WAITS)
    dev.compute(5 * C, op="earlier kernels")
    copy = dev.copy(BATCH, pinned=True, non_blocking=True)
    assert (copy.start_s, copy.end_s) == (5 * C, 6 * C), f"the copy waits for the stream: {copy}"
    assert dev.synchronize() == 6 * C + S, "synchronize waits for the copy, plus one wait"
    dev = SimDevice(WITH_WAITS)
    dev.compute(5 * C, op="earlier kernels")
    start = dev.synchronize()
    dev.copy(BATCH, pinned=True, non_blocking=True)
    assert dev.synchronize() - start == C + S, "synchronised first: the copy and one wait"
    dev = SimDevice(WITH_WAITS)
    dev.compute(5 * C, stream="other", op="kernels elsewhere")
    copy = dev.copy(BATCH, pinned=True, non_blocking=True)
    assert copy.start_s == 0.0, "a pinned copy on another stream overlaps the kernels"


def test_timelines_are_consistent():
    """Every span is on a known engine, has end >= start, and an engine runs one op at a time."""
    for pinned, non_blocking, prefetch in itertools.product((False, True), repeat=3):
        run = simulate_training(6, 8 * MIB, 3e-3, CopyCosts(), pinned=pinned,
                                non_blocking=non_blocking, prefetch=prefetch)
        label = f"pinned={pinned}, non_blocking={non_blocking}, prefetch={prefetch}"
        assert all(isinstance(s, Span) and s.engine in ENGINES for s in run.timeline), (
            f"{label}: unknown engine")
        assert all(s.end_s >= s.start_s for s in run.timeline), f"{label}: a span ends before it starts"
        for engine in ("copy", "compute"):
            ordered = sorted(spans(run, engine), key=lambda s: s.start_s)
            assert len(ordered) == 6, f"{label}: {engine} should run 6 ops"
            assert all(a.end_s <= b.start_s for a, b in zip(ordered, ordered[1:])), (
                f"{label}: {engine} ran two ops at once")
        assert run.total_s >= max(s.end_s for s in run.timeline), (
            f"{label}: the host finished before the device")


def test_simulation_is_deterministic():
    """The same inputs give the same timeline, span for span."""
    args = (12, 16 * MIB, 1e-3, CopyCosts())
    first = simulate_training(*args, pinned=True, non_blocking=True, prefetch=True)
    second = simulate_training(*args, pinned=True, non_blocking=True, prefetch=True)
    assert first.timeline == second.timeline, "two runs with the same inputs differ"
    assert first.total_s == second.total_s, "two runs with the same inputs end at different times"


def test_bad_arguments():
    """A batch count below 1 or a negative time is a ValueError that names it."""
    with pytest.raises(ValueError, match="n_batches"):
        simulate_training(0, MIB, 1e-3)
    with pytest.raises(ValueError, match="compute_s"):
        simulate_training(1, MIB, -1e-3)
    with pytest.raises(ValueError, match="duration_s"):
        SimDevice().compute(-1.0)
    with pytest.raises(KeyError, match="pinned_nb"):
        simulate_strategy("fast", 1, MIB)
