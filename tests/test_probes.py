"""Tests for feedgpu.diagnosis.sensing.probes: repeated readings and their spread, the item probe's
load per batch, the threads a worker runs with, and the warm pinning probe.

The datasets are tiny and in memory, each item a known sleep; timing bounds are generous
(a busy 2-core machine), and no time is asserted equal to another. The pinning probe needs
an accelerator: its tests fake one, and a ``pin_memory`` that sleeps a known time.
"""

from __future__ import annotations

import math
import random
import time

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader, Dataset, get_worker_info

from feedgpu.diagnosis.sensing.probes import (DISAGREE, Reading, disagreement_note, one_thread, probe_items, probe_pinning,
                                      torch_threads, worker_threads)

pytestmark = pytest.mark.unit

SLEEP_S = 0.002  # each item's sleep
BATCH = 4


class Sleepy(Dataset):
    """Items that sleep ``slow_s`` for the first batch's worth of calls, ``fast_s`` for the
    next, and so on (the same sleep throughout when the two are equal)."""

    def __init__(self, n: int = 64, slow_s: float = SLEEP_S, fast_s: float = SLEEP_S, batch: int = BATCH):
        self.n, self.slow_s, self.fast_s, self.batch = n, slow_s, fast_s, batch
        self.calls = 0

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> torch.Tensor:
        slow = (self.calls // self.batch) % 2 == 0
        self.calls += 1
        time.sleep(self.slow_s if slow else self.fast_s)
        return torch.full((3,), float(i))


def far() -> float:
    """A deadline that does not stop the probe."""
    return time.perf_counter() + 60


# --------------------------------------------------------------------------- Reading


def test_reading_median_spread_and_dict():
    """Median and (max - min) / median by hand; one reading has no spread, none a NaN."""
    r = Reading([0.004, 0.002, 0.003], threads=2)
    assert r.median_s == pytest.approx(0.003)
    assert r.spread == pytest.approx((0.004 - 0.002) / 0.003)
    assert r.to_dict() == {"median_s": pytest.approx(0.003), "readings_s": [0.004, 0.002, 0.003],
                           "spread": pytest.approx(2 / 3), "threads": 2}
    even = Reading([1.0, 2.0, 3.0, 6.0], threads=1)
    assert even.median_s == pytest.approx(2.5) and even.spread == pytest.approx(5 / 2.5)
    assert Reading([0.5], threads=1).spread == 0.0
    assert math.isnan(Reading([], threads=1).median_s) and math.isnan(Reading([], threads=1).spread)
    assert math.isnan(Reading([0.0, 0.0], threads=1).spread), "a zero median has no spread"
    assert Reading([], threads=1).to_dict() == {"median_s": None, "readings_s": [], "spread": None, "threads": 1}


def test_disagreement_note_fires_above_the_threshold_only():
    """Above DISAGREE a one-line note naming the probe and the range; at or below it, none."""
    assert DISAGREE == 0.25
    wide = Reading([0.31e-3, 0.40e-3, 0.47e-3], threads=1)  # spread 0.4
    note = disagreement_note("pinning", wide)
    assert note is not None and "pinning" in note and "40%" in note and "0.31 to 0.47 ms" in note, note
    assert "\n" not in note
    assert disagreement_note("items", Reading([0.100, 0.110, 0.120], threads=1)) is None  # spread 0.18
    assert disagreement_note("items", Reading([0.1], threads=1)) is None
    assert disagreement_note("items", Reading([], threads=1)) is None


# --------------------------------------------------------------------------- the item probe


def test_probe_items_reads_each_batch():
    """Three batches' worth of items give three load readings near batch_size x the sleep."""
    loader = DataLoader(Sleepy(), batch_size=BATCH)
    cost = probe_items(loader, far())
    assert cost.items >= 2 * BATCH and len(cost.load_readings_s) >= 2, cost.load_readings_s
    assert len(cost.load_readings_s) == 3, "batches=3 by default"
    assert cost.threads == 1
    reading = cost.load_reading
    assert isinstance(reading, Reading) and reading.threads == 1
    assert BATCH * SLEEP_S * 0.9 < reading.median_s < BATCH * SLEEP_S * 10, reading
    assert cost.load_s == pytest.approx(cost.fetch_s + cost.collate_s)


def test_probe_items_keeps_to_its_deadline():
    """A deadline already past stops after one item: one reading, no error."""
    cost = probe_items(DataLoader(Sleepy(), batch_size=BATCH), time.perf_counter())
    assert cost.items == 1 and len(cost.load_readings_s) == 1
    assert cost.load_reading.spread == 0.0


def test_probe_items_alternating_batches_disagree():
    """Slow and fast batches by turns: the spread passes DISAGREE, so the note fires."""
    loader = DataLoader(Sleepy(slow_s=0.008, fast_s=0.001), batch_size=BATCH)
    cost = probe_items(loader, far())
    assert cost.load_reading.spread > DISAGREE, cost.load_readings_s
    assert disagreement_note("items", cost.load_reading) is not None


def test_probe_items_without_batching():
    """batch_size=None: every item is a batch, one reading each."""
    cost = probe_items(DataLoader(Sleepy(), batch_size=None), far())
    assert cost.batch_size == 1 and 2 <= len(cost.load_readings_s) <= 3


def test_probe_items_runs_on_the_workers_threads():
    """With workers, the items run on the threads worker_init_fn leaves; the caller's count
    is restored."""
    seen = []

    class Counting(Sleepy):
        def __getitem__(self, i):
            seen.append(torch.get_num_threads())
            return super().__getitem__(i)

    before = torch.get_num_threads()
    loader = DataLoader(Counting(), batch_size=BATCH, num_workers=2, worker_init_fn=_three_threads)
    cost = probe_items(loader, far())
    assert cost.threads == 3 and set(seen) == {3} and cost.load_reading.threads == 3
    assert torch.get_num_threads() == before
    seen.clear()
    assert probe_items(DataLoader(Counting(), batch_size=BATCH), far()).threads == 1 and set(seen) == {1}


# --------------------------------------------------------------------------- worker threads


def _three_threads(worker_id: int) -> None:
    torch.set_num_threads(3)
    random.seed(worker_id)
    np.random.seed(worker_id)
    torch.manual_seed(worker_id)


def _needs_a_worker(worker_id: int) -> None:
    torch.set_num_threads(get_worker_info().id + 2)  # get_worker_info() is None outside a worker


def _shards(worker_id: int) -> None:
    """Keep every fourth item in this worker (the "shard by worker" pattern)."""
    dataset = get_worker_info().dataset
    dataset.n = dataset.n // 4
    torch.set_num_threads(2)


def _fails(worker_id: int) -> None:
    raise RuntimeError("no database here")


def test_worker_threads():
    """None: one thread; otherwise the count a worker_init_fn leaves, read in a worker of
    its own, so the caller's threads, random states and dataset stay as they were."""
    dataset = Sleepy()
    assert worker_threads(DataLoader(dataset)) == 1
    before = torch.get_num_threads()
    states = random.getstate(), np.random.get_state()[1].copy(), torch.random.get_rng_state()
    assert worker_threads(DataLoader(dataset, num_workers=1, worker_init_fn=_three_threads)) == 3
    assert torch.get_num_threads() == before
    assert random.getstate() == states[0], "Python's random state untouched"
    assert (np.random.get_state()[1] == states[1]).all(), "numpy's random state untouched"
    assert torch.equal(torch.random.get_rng_state(), states[2]), "torch's random state untouched"
    assert worker_threads(DataLoader(dataset, num_workers=1, worker_init_fn=_needs_a_worker)) == 2, (
        "get_worker_info() works: the function runs in a worker")
    assert worker_threads(DataLoader(dataset, num_workers=2, worker_init_fn=_shards)) == 2
    assert len(dataset) == 64, "a worker_init_fn that shards the dataset leaves the caller's whole"
    assert worker_threads(DataLoader(dataset, num_workers=1, worker_init_fn=_fails)) == 1
    assert torch.get_num_threads() == before


def test_thread_context_managers_restore():
    before = torch.get_num_threads()
    with torch_threads(3):
        assert torch.get_num_threads() == 3
    with one_thread():
        assert torch.get_num_threads() == 1
    assert torch.get_num_threads() == before


# --------------------------------------------------------------------------- the pinning probe


@pytest.fixture
def fake_pinning(monkeypatch):
    """An accelerator, and a pin_memory that sleeps 50 ms on its first call (the cold pin),
    2 ms later; each call records the torch threads it ran on."""
    calls: list[int] = []

    def pin_memory(self, *args, **kwargs):
        time.sleep(0.050 if not calls else 0.002)
        calls.append(torch.get_num_threads())
        return self.clone()

    monkeypatch.setattr(torch.accelerator, "is_available", lambda: True)
    monkeypatch.setattr(torch.Tensor, "pin_memory", pin_memory)
    return calls


def test_probe_pinning_is_warm(fake_pinning):
    """The cold first pin is not among the readings: the median of two is near the warm 2 ms
    (with the cold 50 ms among them it would be over 26 ms)."""
    reading = probe_pinning(torch.zeros(8), repeats=2)
    assert isinstance(reading, Reading) and len(reading.readings_s) == 2
    assert len(fake_pinning) == 3, "one untimed pin, then two timed"
    assert reading.median_s < 0.020 and max(reading.readings_s) < 0.045, reading.readings_s
    assert len(probe_pinning(torch.zeros(8), repeats=5).readings_s) == 5


def test_probe_pinning_pins_every_tensor(fake_pinning):
    """A reading is the whole batch's pin: three tensors, three pins of 2 ms or more."""
    batch = {"x": torch.zeros(4), "y": [torch.ones(2), (torch.ones(1), "label")]}
    reading = probe_pinning(batch, repeats=2)
    assert len(fake_pinning) == 3 * 3
    assert min(reading.readings_s) >= 3 * 0.002


def test_probe_pinning_threads(fake_pinning):
    """Given threads are used and recorded, and the caller's count restored; without, as found."""
    before = torch.get_num_threads()
    reading = probe_pinning(torch.zeros(8), threads=1, repeats=3)
    assert reading.threads == 1 and set(fake_pinning) == {1}
    assert torch.get_num_threads() == before
    fake_pinning.clear()
    assert probe_pinning(torch.zeros(8), repeats=2).threads == before and set(fake_pinning) == {before}


def test_probe_pinning_deadline(fake_pinning):
    """A deadline already past still gives two readings."""
    reading = probe_pinning(torch.zeros(8), repeats=5, deadline=time.perf_counter())
    assert len(reading.readings_s) == 2


def test_probe_pinning_without_an_accelerator(monkeypatch):
    monkeypatch.setattr(torch.accelerator, "is_available", lambda: False)
    assert probe_pinning(torch.zeros(8)) is None


def test_load_readings_by_hand():
    """Each batch's worth of items: mean x batch_size + collate; leftovers join the last
    batch's worth; a one-off first item is left out of its batch's worth."""
    from feedgpu.diagnosis.sensing.probes import _load_readings

    assert _load_readings([1, 1, 1, 1, 3, 3, 3, 3, 3], 0, 4, 0.5) == pytest.approx([4.5, 12.5])
    assert _load_readings([2, 2, 2, 4, 4, 4, 4], 1, 4, 0.0) == pytest.approx([8.0, 16.0])
    assert _load_readings([1, 1, 1], 0, 4, 0.0) == pytest.approx([4.0]), "less than two batches' worth: one"
    assert _load_readings([2.0, 3.0], 1, 1, 0.0) == pytest.approx([2.0, 3.0]), "the one-off's batch has none"
