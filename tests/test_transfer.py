"""Tests for feedgpu.measure.transfer and feedgpu.workloads.arrays: the instruments of notebook 03's transfer experiments.

Expectations come from the docstrings and from arithmetic done here (bytes = items x
elements x itemsize, record ``i`` filled with ``i % 256``), never from the module itself.
No test compares a raw time with a fixed number: a sleep never returns early, so a
measured time may be compared with the sleep it contains as a ratio (>= 0.95), and two
kinds of batch are compared with each other, on the fastest of several receptions, with
a margin far wider than a busy 2-core machine ever eats (the notebook's self-check: a list
of pickled float64 arrays takes at least 2x longer to receive than one tensor; here it is
about 20x). CPU times come from psutil, which counts in 10 ms ticks, so those checks are
ratios over at least 100 ms of work.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import functools
import math
import multiprocessing
import statistics
import time

import numpy as np
import psutil
import pytest
import torch
from torch.utils.data import DataLoader, Dataset

from feedgpu.measure.transfer import (CpuShare, cpu_per_batch, payload_bytes, time_per_item, transfer_time_per_batch)
from feedgpu.workloads.arrays import (SleepArrayDataset, collate_list, collate_tensor, make_array, make_records)
from feedgpu.workloads import SpinDataset

pytestmark = pytest.mark.unit

LARGE_ITEM = (1000, 150)  # the Stack Overflow question's large item
LARGE_BATCH_BYTES = 16 * 1000 * 150 * 8  # 16 float64 items: 19.2 MB


def new_children() -> set[int]:
    """Pids of this process's live children (workers are children)."""
    pids = set()
    for child in psutil.Process().children():
        try:
            if child.status() != psutil.STATUS_ZOMBIE:
                pids.add(child.pid)
        except psutil.NoSuchProcess:  # exited meanwhile
            pass
    return pids


class Recorder(Dataset):
    """A dataset of ``n`` ints that records which indices were read."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.seen: list[int] = []

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, index: int) -> int:
        self.seen.append(index)
        return index


# --------------------------------------------------------------------------- make_array


@pytest.mark.parametrize(
    ("dtype", "np_dtype"),
    [("float64", np.float64), ("float32", np.float32), ("uint8", np.uint8), (np.int64, np.int64)],
)
def test_make_array_shape_dtype_and_fill(dtype, np_dtype):
    a = make_array(7, (3, 4), dtype)
    assert isinstance(a, np.ndarray), f"make_array should return a numpy array, got {type(a)}"
    assert a.shape == (3, 4), f"shape (3, 4) asked, got {a.shape}"
    assert a.dtype == np.dtype(np_dtype), f"dtype {np_dtype} asked, got {a.dtype}"
    assert a.flags["C_CONTIGUOUS"], "the docstring promises a C-contiguous array"
    assert (a == 7).all(), f"item 7 should be filled with 7, got values {np.unique(a)}"


def test_make_array_wraps_index_at_256():
    # 300 % 256 = 44 and 256 % 256 = 0: every fill value fits a uint8.
    assert (make_array(300, (5,), "uint8") == 44).all(), "item 300 should be filled with 44"
    assert (make_array(256, (5,), "float64") == 0).all(), "item 256 should be filled with 0"
    assert (make_array(255, (5,), "uint8") == 255).all(), "item 255 should be filled with 255"


def test_make_array_default_dtype_and_loose_shape():
    a = make_array(1, [2, np.int64(3)])  # a list holding a numpy integer
    assert a.shape == (2, 3), f"a list shape with numpy ints should work, got {a.shape}"
    assert a.dtype == np.float64, f"the default dtype is float64, got {a.dtype}"
    assert make_array(0, ()).shape == (), "an empty shape gives a 0-d array"


def test_make_array_fits_int8_for_every_index():
    fills = set()
    for index in range(256):
        a = make_array(index, (2,), "int8")
        assert a.dtype == np.int8, f"item {index}: int8 asked, got {a.dtype}"
        fills.add(int(a[0]))
    assert len(fills) == 256, f"the 256 items should get 256 different int8 fills, got {len(fills)}"


# --------------------------------------------------------------------------- make_records


def test_make_records_are_independent_filled_records():
    records = make_records(5, (2, 3), "float32")
    assert isinstance(records, list) and len(records) == 5, f"5 records asked: {records!r}"
    for i, r in enumerate(records):
        assert r.shape == (2, 3) and r.dtype == np.float32, (
            f"record {i}: expected (2, 3) float32, got {r.shape} {r.dtype}"
        )
        np.testing.assert_array_equal(
            r, np.full((2, 3), i, np.float32), err_msg=f"record {i} should be filled with {i}"
        )
    assert not np.shares_memory(records[0], records[1]), "records must not share memory"


def test_make_records_zero_records():
    assert make_records(0, (3,)) == [], "n=0 gives an empty list"


@pytest.mark.parametrize("n", [-1, 2.5])
def test_make_records_rejects_bad_n(n):
    with pytest.raises(ValueError, match="n must be"):
        make_records(n, (3,))


# --------------------------------------------------------------------------- collates


def test_collate_list_returns_the_records_as_they_are():
    records = make_records(3, (4,), "uint8")
    batch = collate_list(records)
    assert isinstance(batch, list), f"the batch stays a list, got {type(batch)}"
    assert batch is not records, "a new list, so the caller's list is not shared"
    assert len(batch) == 3 and all(a is b for a, b in zip(batch, records)), (
        "collate_list must hand over the same array objects, uncopied"
    )
    assert collate_list(tuple(records)) == batch, "a tuple of records gives the same list"


@pytest.mark.parametrize(
    ("dtype", "torch_dtype"),
    [("float64", torch.float64), ("float32", torch.float32), ("uint8", torch.uint8)],
)
def test_collate_tensor_stacks_records(dtype, torch_dtype):
    records = make_records(4, (3, 5), dtype)
    batch = collate_tensor(records)
    assert isinstance(batch, torch.Tensor), f"one tensor expected, got {type(batch)}"
    assert tuple(batch.shape) == (4, 3, 5), f"(records, *record shape) = (4, 3, 5), got {batch.shape}"
    assert batch.dtype == torch_dtype, f"{dtype} records should give {torch_dtype}, got {batch.dtype}"
    assert batch.is_contiguous(), "the collated batch should be one contiguous tensor"
    np.testing.assert_array_equal(
        batch.numpy(), np.stack(records), err_msg="collate_tensor should equal np.stack of the records"
    )


def test_collate_tensor_accepts_tensors():
    records = [torch.full((2,), float(i)) for i in range(3)]
    batch = collate_tensor(records)
    assert torch.equal(batch, torch.tensor([[0.0, 0.0], [1.0, 1.0], [2.0, 2.0]])), (
        f"three tensors should stack row by row, got {batch}"
    )


def test_collate_tensor_rejects_python_numbers():
    with pytest.raises(TypeError):
        collate_tensor([1.0, 2.0, 3.0])


def test_cpu_per_batch_rejects_persistent_workers():
    loader = DataLoader(Recorder(100), batch_size=None, num_workers=1, persistent_workers=True)
    with pytest.raises(ValueError, match="persistent"):
        cpu_per_batch(loader, batches=2)


def test_collate_tensor_rejects_empty_and_non_arrays():
    with pytest.raises(ValueError, match="empty"):
        collate_tensor([])
    with pytest.raises(TypeError, match="str"):
        collate_tensor(["a", "b"])
    with pytest.raises(TypeError, match="dict"):
        collate_tensor([{"x": np.zeros(2)}])


# --------------------------------------------------------------------------- payload_bytes


def test_payload_bytes_of_arrays_and_tensors():
    assert payload_bytes(np.zeros((3, 4))) == 3 * 4 * 8, "3 x 4 float64 is 96 bytes"
    assert payload_bytes(np.zeros((3, 4), np.uint8)) == 12, "3 x 4 uint8 is 12 bytes"
    assert payload_bytes(torch.zeros(3, 4)) == 3 * 4 * 4, "3 x 4 float32 tensor is 48 bytes"
    assert payload_bytes(torch.zeros(5, dtype=torch.int16)) == 10, "5 int16 are 10 bytes"
    assert isinstance(payload_bytes(np.zeros(3)), int), "payload_bytes should return an int"


def test_payload_bytes_of_a_large_batch_list_and_tensor_agree():
    records = make_records(16, LARGE_ITEM, "float64")
    as_list = payload_bytes(collate_list(records))
    as_tensor = payload_bytes(collate_tensor(records))
    assert as_list == LARGE_BATCH_BYTES, f"16 x 1000 x 150 x 8 = 19.2 MB, list counted {as_list}"
    assert as_tensor == LARGE_BATCH_BYTES, f"the stacked tensor holds the same bytes, got {as_tensor}"
    assert as_list == sum(r.nbytes for r in records), "the list's bytes are the records' nbytes"


def test_payload_bytes_walks_containers_and_ignores_other_objects():
    batch = {
        "image": torch.zeros(2, 3, dtype=torch.uint8),  # 6
        "extra": [np.zeros(4, np.float32), (np.zeros(2, np.int64), "tag")],  # 16 + 16
        "label": 3,
        "name": "x",
    }
    assert payload_bytes(batch) == 6 + 16 + 16, f"6 + 16 + 16 = 38 bytes, got {payload_bytes(batch)}"
    assert payload_bytes(None) == 0 and payload_bytes("abc") == 0, "non-arrays count 0"
    assert payload_bytes([]) == 0 and payload_bytes({}) == 0, "empty containers count 0"


# --------------------------------------------------------------------------- SleepArrayDataset


def test_sleep_array_dataset_items_length_and_negative_index():
    ds = SleepArrayDataset(6, 0.0, shape=(2, 3), dtype="uint8")
    assert len(ds) == 6, f"6 items asked, len {len(ds)}"
    item = ds[4]
    assert item.shape == (2, 3) and item.dtype == np.uint8, f"item 4: got {item.shape} {item.dtype}"
    assert (item == 4).all(), "item 4 should be filled with 4"
    assert (ds[-1] == 5).all(), "ds[-1] is the last item (5)"
    assert (ds[-6] == 0).all(), "ds[-6] is the first item (0)"


@pytest.mark.parametrize("index", [6, 100, -7])
def test_sleep_array_dataset_index_out_of_range(index):
    ds = SleepArrayDataset(6, 0.0)
    with pytest.raises(IndexError, match="out of range"):
        ds[index]


def test_sleep_array_dataset_iterates_by_index_until_index_error():
    # Python's old iteration protocol stops at the IndexError: all items, in order.
    items = list(SleepArrayDataset(4, 0.0, shape=(1,)))
    assert [int(a[0]) for a in items] == [0, 1, 2, 3], f"iteration gave {items}"


def test_sleep_array_dataset_defaults_follow_the_question():
    ds = SleepArrayDataset(3, 0.0)
    assert ds[0].shape == (10, 150) and ds[0].dtype == np.float64, (
        f"the default item is the question's 10 x 150 float64, got {ds[0].shape} {ds[0].dtype}"
    )
    assert "SleepArrayDataset" in repr(ds) and "n=3" in repr(ds), f"repr: {ds!r}"


@pytest.mark.parametrize(
    "kwargs",
    [
        {"n": -1},
        {"n": 2.5},
        {"seconds_per_item": -0.001},
        {"seconds_per_item": math.nan},
        {"seconds_per_item": math.inf},
        {"jitter": -0.1},
        {"jitter": math.nan},
    ],
)
def test_sleep_array_dataset_rejects_bad_arguments(kwargs):
    args = {"n": 4, "seconds_per_item": 0.01, **kwargs}
    with pytest.raises(ValueError):
        SleepArrayDataset(**args)


def test_sleep_array_dataset_without_jitter_sleeps_the_mean():
    ds = SleepArrayDataset(50, 0.003)
    seconds = [ds.item_seconds(i) for i in range(50)]
    assert seconds == [0.003] * 50, f"jitter=0: every item sleeps 3 ms, got {set(seconds)}"
    zero = SleepArrayDataset(5, 0.0, jitter=0.5)
    assert [zero.item_seconds(i) for i in range(5)] == [0.0] * 5, "no sleep stays no sleep"


def test_sleep_array_dataset_jitter_is_seeded_by_index():
    a = SleepArrayDataset(100, 0.01, jitter=0.5, seed=3)
    b = SleepArrayDataset(100, 0.01, jitter=0.5, seed=3)
    first = [a.item_seconds(i) for i in range(100)]
    # Reversed order on the second instance: the draw must not depend on call order.
    second = [b.item_seconds(i) for i in reversed(range(100))][::-1]
    assert first == second, "the same item of two equal datasets must sleep the same"
    assert first == [a.item_seconds(i) for i in range(100)], "asking again gives the same sleep"
    assert len(set(first)) == 100, f"different items should sleep differently: {len(set(first))} distinct"
    other = [SleepArrayDataset(100, 0.01, jitter=0.5, seed=4).item_seconds(i) for i in range(100)]
    assert other != first, "another seed should give other sleeps"


def test_sleep_array_dataset_item_seconds_takes_indices_as_getitem_does():
    ds = SleepArrayDataset(10, 0.01, jitter=0.5, seed=1)
    assert ds.item_seconds(-1) == ds.item_seconds(9), "item -1 is the last item, as in ds[-1]"
    for bad in (10, -11):
        with pytest.raises(IndexError):
            ds.item_seconds(bad)


def test_sleep_array_dataset_seeds_do_not_share_sleeps():
    # Seeds that differ only in sign, or whose item streams could overlap, give other sleeps.
    draws = {seed: [SleepArrayDataset(50, 0.01, jitter=0.5, seed=seed).item_seconds(i) for i in range(50)]
             for seed in (-1, 0, 1)}
    shared = set(draws[-1]) & set(draws[1]) | set(draws[0]) & set(draws[1]) | set(draws[-1]) & set(draws[0])
    assert not shared, f"seeds -1, 0 and 1 should not share any sleep, {len(shared)} shared"


def test_sleep_array_dataset_jitter_has_the_asked_mean_and_spread():
    # Seeded, so deterministic: 4000 gamma draws with mean 10 ms and CV 0.5.
    ds = SleepArrayDataset(4000, 0.01, jitter=0.5, seed=0)
    seconds = [ds.item_seconds(i) for i in range(4000)]
    assert min(seconds) > 0, f"sleeps must be positive, min {min(seconds)}"
    mean = statistics.fmean(seconds)
    cv = statistics.stdev(seconds) / mean
    assert mean == pytest.approx(0.01, rel=0.05), f"mean sleep should be about 10 ms, got {mean}"
    assert cv == pytest.approx(0.5, rel=0.1), f"coefficient of variation should be about 0.5, got {cv}"
    assert max(seconds) > 2 * 0.01, "a gamma distribution is skewed right: some items are slow"


def test_sleep_array_dataset_getitem_sleeps_at_least_item_seconds():
    ds = SleepArrayDataset(4, 0.02, shape=(2,), jitter=0.5, seed=1)
    expected = sum(ds.item_seconds(i) for i in range(4))
    start = time.perf_counter()
    items = [ds[i] for i in range(4)]
    elapsed = time.perf_counter() - start
    assert elapsed / expected >= 0.95, (
        f"4 items should sleep their {expected:.4f} s together (sleep never returns early), "
        f"took {elapsed:.4f} s"
    )
    assert [int(a[0]) for a in items] == [0, 1, 2, 3], "jitter must not change the payload"


# --------------------------------------------------------------------------- time_per_item


def test_time_per_item_reads_the_first_n_items():
    rec = Recorder(10)
    time_per_item(rec, n=4)
    assert rec.seen == [0, 1, 2, 3], f"n=4 should read items 0..3 once, read {rec.seen}"
    rec = Recorder(3)
    time_per_item(rec, n=20)
    assert rec.seen == [0, 1, 2], f"n beyond the length is clamped to it, read {rec.seen}"


def test_time_per_item_rejects_nothing_to_time():
    with pytest.raises(ValueError):
        time_per_item(Recorder(0))
    with pytest.raises(ValueError):
        time_per_item(Recorder(5), n=0)


def test_time_per_item_is_at_least_the_mean_sleep():
    ds = SleepArrayDataset(20, 0.01, shape=(2,), jitter=0.3, seed=2)
    expected = statistics.fmean(ds.item_seconds(i) for i in range(5))
    measured = time_per_item(ds, n=5)
    assert measured / expected >= 0.95, (
        f"mean time per item should be at least the mean sleep {expected:.4f} s, got {measured:.4f} s"
    )


# --------------------------------------------------------------------------- transfer_time_per_batch


@pytest.mark.parametrize(
    "kwargs",
    [
        {"num_workers": 0},
        {"num_workers": 1.5},
        {"batches": 0},
        {"warmup": 0},
        {"gap_s": -0.01},
        {"gap_s": math.nan},
        {"gap_s": math.inf},
        {"statistic": "mean"},
    ],
)
def test_transfer_time_per_batch_rejects_bad_arguments(kwargs):
    before = new_children()
    with pytest.raises(ValueError):
        transfer_time_per_batch(np.zeros(3), **kwargs)
    assert new_children() - before == set(), "a rejected call must not start workers"


@pytest.mark.parametrize("statistic", ["median", "min"])
def test_transfer_time_per_batch_returns_seconds_and_stops_workers(statistic):
    before = new_children()
    seconds = transfer_time_per_batch(np.zeros(10), batches=2, warmup=1, statistic=statistic)
    assert isinstance(seconds, float), f"seconds as a float, got {type(seconds)}"
    assert math.isfinite(seconds) and seconds > 0, f"a positive finite time, got {seconds}"
    assert new_children() - before == set(), "the worker should be shut down on return"


def test_transfer_time_per_batch_waits_for_a_slow_worker_only_without_a_gap():
    # The worker builds every batch by calling make_batch: a 50 ms sleep. With no gap,
    # next() waits for it; with the default gap the batch is ready and next() only pays
    # the (tiny) transfer. Each call's median over 4 batches.
    make = functools.partial(SleepArrayDataset(1, 0.05, shape=(2,)).__getitem__, 0)
    no_gap = transfer_time_per_batch(make, batches=4, gap_s=0.0)
    with_gap = transfer_time_per_batch(make, batches=4)
    assert no_gap >= 5 * with_gap, (
        f"without a gap next() should wait for the 50 ms batch ({no_gap * 1e3:.2f} ms), far "
        f"longer than with one ({with_gap * 1e3:.2f} ms)"
    )


def test_transfer_time_per_batch_list_of_arrays_slower_than_one_tensor():
    # The notebook's self-check: ~20 MB per batch, fastest of 6 receptions each.
    records = make_records(16, LARGE_ITEM, "float64")
    slow = transfer_time_per_batch(collate_list(records), batches=6, statistic="min")
    fast = transfer_time_per_batch(collate_tensor(records), batches=6, statistic="min")
    assert slow >= 2 * fast, (
        f"a pickled list of 19 MB should take at least 2x longer to receive than one tensor "
        f"in shared memory: list {slow * 1e3:.2f} ms, tensor {fast * 1e3:.2f} ms"
    )


# --------------------------------------------------------------------------- cpu_per_batch


def test_cpu_per_batch_returns_a_cpu_share():
    loader = DataLoader(SleepArrayDataset(20, 0.0, shape=(2,)), batch_size=2)
    share = cpu_per_batch(loader, batches=3)
    assert isinstance(share, CpuShare), f"a CpuShare expected, got {type(share)}"
    names = [f.name for f in dataclasses.fields(share)]
    assert names == ["s_per_batch", "main_cpu_s", "workers_cpu_s", "num_workers"], f"fields: {names}"
    for name in ("s_per_batch", "main_cpu_s", "workers_cpu_s"):
        value = getattr(share, name)
        assert isinstance(value, float) and value >= 0, f"{name} should be a float >= 0, got {value!r}"
    assert share.num_workers == 0, f"the loader has 0 workers, got {share.num_workers}"
    assert share.workers_cpu_s == 0.0, f"no workers, no worker CPU: got {share.workers_cpu_s}"


def test_cpu_per_batch_takes_start_up_warmup_and_timed_batches():
    # num_workers=0 prefetches nothing, so every batch read is one dataset item.
    rec = Recorder(100)
    cpu_per_batch(DataLoader(rec, batch_size=None), batches=4)
    assert len(rec.seen) == 1 + 2 + 4, f"1 start-up + default warm-up 2 + 4 timed, read {len(rec.seen)}"
    rec = Recorder(100)
    cpu_per_batch(DataLoader(rec, batch_size=None), batches=3, warmup=5)
    assert rec.seen == list(range(1 + 5 + 3)), f"1 + 5 + 3 batches in order, read {rec.seen}"


@pytest.mark.parametrize(
    "kwargs", [{"batches": 0}, {"batches": 1.5}, {"warmup": -1}, {"step_s": -0.01}, {"step_s": float("nan")}]
)
def test_cpu_per_batch_rejects_bad_arguments(kwargs):
    loader = DataLoader(Recorder(100), batch_size=None)
    with pytest.raises(ValueError):
        cpu_per_batch(loader, **kwargs)


def test_cpu_per_batch_step_sets_a_floor_on_time_per_batch():
    loader = DataLoader(SleepArrayDataset(20, 0.0, shape=(2,)), batch_size=2)
    share = cpu_per_batch(loader, batches=4, step_s=0.02)
    assert share.s_per_batch / 0.02 >= 0.95, (
        f"a 20 ms step per batch: at least 20 ms per batch, got {share.s_per_batch * 1e3:.2f} ms"
    )


def test_cpu_per_batch_serial_work_is_charged_to_the_main_process():
    # 4 items of 5 ms CPU each (thread CPU time, so load does not shrink it): 20 ms per
    # batch, 6 batches = 120 ms of CPU in the main process.
    loader = DataLoader(SpinDataset(40, 0.005), batch_size=4, num_workers=0)
    share = cpu_per_batch(loader, batches=6)
    assert share.main_cpu_s / 0.020 >= 0.7, (
        f"the main process spins 20 ms of CPU per batch, counted {share.main_cpu_s * 1e3:.1f} ms"
    )
    assert share.workers_cpu_s == 0.0, f"no workers, got {share.workers_cpu_s} s of worker CPU"


def test_cpu_per_batch_worker_work_is_charged_to_the_workers():
    before = new_children()
    loader = DataLoader(SpinDataset(80, 0.005), batch_size=4, num_workers=2)
    share = cpu_per_batch(loader, batches=8)
    assert share.num_workers == 2, f"the loader has 2 workers, got {share.num_workers}"
    assert share.workers_cpu_s / 0.020 >= 0.5, (
        f"the workers spin 20 ms of CPU per batch, counted {share.workers_cpu_s * 1e3:.1f} ms"
    )
    assert share.workers_cpu_s >= 3 * share.main_cpu_s, (
        f"the spinning happens in the workers: workers {share.workers_cpu_s * 1e3:.1f} ms, "
        f"main {share.main_cpu_s * 1e3:.1f} ms per batch"
    )
    assert new_children() - before == set(), "cpu_per_batch should shut its workers down"


def test_cpu_per_batch_main_process_pays_for_a_pickled_list():
    # The notebook's Part G: 19 MB per batch; the main process unpickles every byte of
    # the list, but only maps the shared memory of a tensor. 10 batches each.
    data = SleepArrayDataset(400, 0.0, shape=LARGE_ITEM)
    main_cpu = {}
    for name, collate in [("list", collate_list), ("tensor", collate_tensor)]:
        loader = DataLoader(data, batch_size=16, num_workers=2, collate_fn=collate)
        main_cpu[name] = cpu_per_batch(loader, batches=10, step_s=0.01).main_cpu_s
    assert main_cpu["list"] >= 2 * main_cpu["tensor"], (
        f"main-process CPU per batch: list {main_cpu['list'] * 1e3:.1f} ms should be at least "
        f"2x the tensor's {main_cpu['tensor'] * 1e3:.1f} ms"
    )


# --------------------------------------------------------------------------- spawn


@pytest.mark.slow  # a spawned process imports torch afresh: a few seconds
def test_transfer_pieces_work_in_spawned_workers():
    # macOS and Windows spawn workers: the dataset and collate must import cleanly there,
    # and an item's jittered sleep must be the same in a fresh interpreter.
    ds = SleepArrayDataset(8, 0.001, shape=(3,), dtype="float32", jitter=0.5, seed=5)
    ctx = multiprocessing.get_context("spawn")
    with concurrent.futures.ProcessPoolExecutor(1, mp_context=ctx) as pool:
        remote = list(pool.map(ds.item_seconds, range(8)))
    assert remote == [ds.item_seconds(i) for i in range(8)], (
        "item_seconds must be the same in a spawned process (seeded, not hash-based)"
    )
    loader = DataLoader(ds, batch_size=4, num_workers=1, collate_fn=collate_tensor,
                        multiprocessing_context="spawn")
    batches = list(loader)
    assert [b[:, 0].tolist() for b in batches] == [[0, 1, 2, 3], [4, 5, 6, 7]], (
        f"spawned worker returned {batches}"
    )


# --------------------------------------------------------------------------- shared_memory_write_s


def test_shared_memory_write_is_the_shared_fill_minus_the_private_fill(monkeypatch):
    """The hand-over is what filling a shared tensor costs more than filling a private one,
    each the median of its repeats; made with the asked shape and type."""
    from feedgpu.measure import transfer

    made = []
    real_empty = torch.empty

    def empty(shape, dtype):
        made.append((tuple(shape), dtype))
        return real_empty(shape, dtype=dtype)

    clock = iter([0.0, 0.010, 1.0, 1.030, 2.0, 2.020,    # private fills: 10, 30, 20 ms
                  3.0, 3.050, 4.0, 4.090, 5.0, 5.070])   # shared fills: 50, 90, 70 ms
    monkeypatch.setattr(transfer.torch, "empty", empty)
    monkeypatch.setattr(transfer.time, "perf_counter", lambda: next(clock))
    got = transfer.shared_memory_write_s((2, 3), torch.uint8, repeats=3)
    assert got == pytest.approx(0.070 - 0.020), "median shared fill minus median private fill"
    assert made == [((2, 3), torch.uint8)] * 6


def test_shared_memory_write_is_never_negative(monkeypatch):
    from feedgpu.measure import transfer

    clock = iter([0.0, 0.050, 1.0, 1.010])  # the shared fill happened to be quicker
    monkeypatch.setattr(transfer.time, "perf_counter", lambda: next(clock))
    assert transfer.shared_memory_write_s((4,), repeats=1) == 0.0


@pytest.mark.parametrize("kwargs", [{"repeats": 0}, {"shape": (2, -1)}, {"shape": (2.5, 3)}])
def test_shared_memory_write_rejects_bad_arguments(kwargs):
    from feedgpu.measure.transfer import shared_memory_write_s

    args = {"shape": (2, 3), **kwargs}
    with pytest.raises(ValueError):
        shared_memory_write_s(**args)


# --------------------------------------------------------------------------- shared_memory_handover_s


def test_handover_splits_the_cost_between_worker_and_main(monkeypatch):
    """send = shared fill (kept) - private fill and free; receive = least next() + free of a shared tensor."""
    from feedgpu.measure import transfer

    clock = iter([0.0, 0.020, 1.0, 1.024, 2.0, 2.022,    # private fill and free: median 22 ms
                  3.0, 3.030, 4.0, 4.040, 5.0, 5.036,    # shared fill, kept: median 36 ms
                  6.0, 6.007, 7.0, 7.006, 8.0, 8.009])   # freeing each kept tensor: median 7 ms
    monkeypatch.setattr(transfer.time, "perf_counter", lambda: next(clock))
    asked = {}

    def taken(make_batch, **kwargs):
        asked.update(kwargs, batch=make_batch())
        return 0.001

    monkeypatch.setattr(transfer, "transfer_time_per_batch", taken)
    got = transfer.shared_memory_handover_s((2, 3), torch.uint8, repeats=3)
    assert got.send_s == pytest.approx(0.036 - 0.022), "the worker: shared fill minus private fill and free"
    assert got.receive_s == pytest.approx(0.001 + 0.007), "the main process: next() plus freeing the pages"
    assert asked["batch"].shape == (2, 3) and asked["batch"].dtype == torch.uint8, "the batch sent has the shape asked"
    assert asked["statistic"] == "min"


def test_handover_send_is_never_negative(monkeypatch):
    from feedgpu.measure import transfer

    clock = iter([0.0, 0.050, 1.0, 1.010, 2.0, 2.001])  # the shared fill happened to be quicker
    monkeypatch.setattr(transfer.time, "perf_counter", lambda: next(clock))
    monkeypatch.setattr(transfer, "transfer_time_per_batch", lambda *a, **k: 0.0)
    assert transfer.shared_memory_handover_s((4,), repeats=1).send_s == 0.0

