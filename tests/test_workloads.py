"""The workloads of known cost (feedgpu.workloads): payloads, costs, thread reports, thread limits.

Expected payloads come from the contract (item ``i`` is filled with ``i % 256``, worked
out here), never from the filler itself. Costs are checked as ratios against the cost we
chose: a sleep never returns early, so wall time / sleep >= 0.95; a spin is counted in
this thread's CPU time, which a busy machine does not shrink. No test has an upper limit
on a raw time: where two items must differ, one is compared with the other.
"""

from __future__ import annotations

import functools
import pickle
import time

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader

from feedgpu.workloads.cost import LockedDataset, RateLimitedDataset
from feedgpu.workloads import (MatmulDataset, MixedDataset, SleepArrayDataset, SleepDataset, SlowStartDataset,
                               SpinDataset, ThreadReportDataset, blas_threads, limit_worker_threads, make_array,
                               spin_cpu)

pytestmark = pytest.mark.unit


def _wall(fn, *args) -> float:
    start = time.perf_counter()
    fn(*args)
    return time.perf_counter() - start


# --------------------------------------------------------------------------- one filler, one family


@pytest.mark.parametrize("dataset_class", [SleepDataset, SpinDataset])
def test_cost_datasets_return_float32_tensors_filled_with_index_mod_256(dataset_class):
    ds = dataset_class(300, 0.0, item_shape=(2, 3))
    for index, fill in [(0, 0), (5, 5), (255, 255), (256, 0), (257, 1), (299, 43), (-1, 43)]:
        item = ds[index]
        assert isinstance(item, torch.Tensor) and item.dtype == torch.float32, (
            f"{dataset_class.__name__}[{index}] should be a float32 tensor, got {type(item).__name__}"
        )
        assert item.shape == (2, 3) and bool((item == fill).all()), (
            f"{dataset_class.__name__}[{index}] should be 2 x 3 filled with {fill}, got {item}"
        )


def test_scalar_items_collate_into_a_batch_of_their_indices():
    batches = list(DataLoader(SleepDataset(10, 0.0), batch_size=4))
    assert [b.tolist() for b in batches] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]], (
        f"scalar items collate to the item indices, in order: {batches}"
    )


def test_sleeping_datasets_share_one_filler():
    # The tensor items and the numpy items of the sleeping family hold the same values.
    tensors = SleepDataset(600, 0.0, item_shape=(4,))
    arrays = SleepArrayDataset(600, 0.0, shape=(4,), dtype="float32")
    for index in (0, 17, 255, 256, 511, 599):
        assert isinstance(arrays[index], np.ndarray), f"SleepArrayDataset[{index}] is a numpy array"
        np.testing.assert_array_equal(
            tensors[index].numpy(), arrays[index],
            err_msg=f"item {index}: SleepDataset and SleepArrayDataset must fill alike",
        )
        np.testing.assert_array_equal(
            arrays[index], make_array(index, (4,), "float32"),
            err_msg=f"item {index}: the payload is make_array's",
        )


def test_sleeping_datasets_are_one_family_with_item_seconds():
    plain = SleepDataset(4, 0.003)
    slow = SlowStartDataset(6, 0.001, slow_items=2, slow_seconds=0.05)
    jittered = SleepArrayDataset(4, 0.01, jitter=0.5, seed=1)
    for ds in (slow, jittered):
        assert isinstance(ds, SleepDataset), f"{type(ds).__name__} should be a SleepDataset"
    assert [plain.item_seconds(i) for i in range(4)] == [0.003] * 4, "every item sleeps seconds_per_item"
    assert [slow.item_seconds(i) for i in range(6)] == [0.05, 0.05, 0.001, 0.001, 0.001, 0.001], (
        "the first 2 items sleep 50 ms, the others 1 ms"
    )
    assert slow.item_seconds(-6) == 0.05, "a negative index counts from the end, as ds[-6] would"
    for ds in (plain, slow, jittered):
        with pytest.raises(IndexError):
            ds.item_seconds(len(ds))


# --------------------------------------------------------------------------- known costs


def test_sleep_dataset_item_sleeps_at_least_its_seconds():
    ds = SleepDataset(3, 0.02)
    elapsed = _wall(lambda: [ds[i] for i in range(3)])
    assert elapsed / (3 * 0.02) >= 0.95, f"3 items of 20 ms took {elapsed * 1e3:.1f} ms"


def test_spin_costs_its_cpu_time_in_this_thread():
    # CPU time of this thread, not wall time: a busy machine stretches the wall clock, not this.
    for seconds in (0.005, 0.03):
        start = time.thread_time()
        spin_cpu(seconds)
        used = time.thread_time() - start
        assert used / seconds >= 0.95, f"spin_cpu({seconds}) used only {used * 1e3:.2f} ms of CPU"
    start = time.thread_time()
    SpinDataset(1, 0.02)[0]
    used = time.thread_time() - start
    assert used / 0.02 >= 0.95, f"a SpinDataset item of 20 ms used only {used * 1e3:.2f} ms of CPU"


def test_mixed_dataset_items_and_cpu_fraction():
    ds = MixedDataset(5, cpu_s=0.002, wait_s=0.006)
    assert len(ds) == 5, f"5 items asked, len {len(ds)}"
    assert ds.cpu_fraction == pytest.approx(0.25), f"2 ms of 8 ms needs a core: 0.25, got {ds.cpu_fraction}"
    assert float(ds[3]) == 3.0 and float(ds[-1]) == 4.0, "item i is filled with i; -1 is the last"
    assert MixedDataset(1, 0.0, 0.0).cpu_fraction == 0.0, "an item that costs nothing has CPU fraction 0"
    wall_start, cpu_start = time.perf_counter(), time.thread_time()
    ds[0]
    wall, cpu = time.perf_counter() - wall_start, time.thread_time() - cpu_start
    assert wall / 0.008 >= 0.95, f"an item waits 6 ms, then spins 2 ms: took {wall * 1e3:.2f} ms"
    assert cpu / 0.002 >= 0.95, f"an item spins 2 ms of CPU, used {cpu * 1e3:.2f} ms"


def test_slow_start_dataset_first_items_are_slow():
    ds = SlowStartDataset(6, 0.001, slow_items=2, slow_seconds=0.05)
    slow = _wall(ds.__getitem__, 1)
    normal = min(_wall(ds.__getitem__, i) for i in (2, 3, 4))  # the least: a busy moment only adds
    assert slow / 0.05 >= 0.95, f"item 1 is slow (50 ms), took {slow * 1e3:.1f} ms"
    assert normal < slow / 5, (
        f"items from 2 on sleep 1 ms, 50x less than a slow one: took {normal * 1e3:.1f} ms "
        f"against {slow * 1e3:.1f} ms"
    )
    assert float(ds[1]) == 1.0 and float(ds[2]) == 2.0, "items are their index"


# --------------------------------------------------------------------------- arguments


@pytest.mark.parametrize(
    ("make", "error"),
    [
        (lambda: SleepDataset(-1, 0.1), ValueError),
        (lambda: SleepDataset(2.5, 0.1), ValueError),
        (lambda: SleepDataset(True, 0.1), TypeError),
        (lambda: SleepDataset(2, -0.1), ValueError),
        (lambda: SleepDataset(2, float("nan")), ValueError),
        (lambda: SleepDataset(2, "0.1"), TypeError),
        (lambda: SpinDataset(2, -0.1), ValueError),
        (lambda: MixedDataset(-1, 0.1, 0.1), ValueError),
        (lambda: MixedDataset(2, -0.1, 0.1), ValueError),
        (lambda: MixedDataset(2, 0.1, -0.1), ValueError),
        (lambda: SlowStartDataset(3, 0.001, slow_items=-1, slow_seconds=0.1), ValueError),
        (lambda: SlowStartDataset(3, 0.001, slow_items=1, slow_seconds=-0.1), ValueError),
        (lambda: MatmulDataset(3, size=0), ValueError),
        (lambda: MatmulDataset(3, rounds=0), ValueError),
        (lambda: ThreadReportDataset(-2), ValueError),
        (lambda: spin_cpu(-0.001), ValueError),
        (lambda: limit_worker_threads(0, threads=0), ValueError),
    ],
)
def test_workloads_reject_bad_arguments(make, error):
    with pytest.raises(error):
        make()


def test_workloads_accept_whole_floats_and_numpy_integers():
    assert len(SleepDataset(np.int64(3), 0)) == 3, "a numpy integer is a count"
    assert len(SpinDataset(4.0, 0)) == 4, "4.0 is a whole number of items"
    for ds in (MixedDataset(2, 0, 0), MatmulDataset(2, size=4, rounds=1), ThreadReportDataset(2)):
        with pytest.raises(IndexError):
            ds[2]


# --------------------------------------------------------------------------- threads


def test_matmul_dataset_is_deterministic_and_picklable():
    ds = MatmulDataset(3, size=32, rounds=2)
    assert ds[1] == ds[1] and isinstance(ds[1], float), "the same item twice gives the same float"
    assert ds[0] != ds[1], "different items start from different seeded matrices"
    assert pickle.loads(pickle.dumps(ds))[2] == ds[2], "a pickled copy (a spawned worker's) computes the same"


def test_thread_report_in_main_and_workers():
    main = ThreadReportDataset(1)[0]
    assert main["worker"] == -1, f"the main process reports worker -1, got {main['worker']}"
    assert main["torch_threads"] == torch.get_num_threads(), "the main process reports its own torch threads"
    reports = list(DataLoader(ThreadReportDataset(4), batch_size=None, num_workers=2))
    assert sorted({r["worker"] for r in reports}) == [0, 1], f"both workers report: {reports}"
    assert all(r["torch_threads"] == 1 for r in reports), f"PyTorch runs one thread per worker: {reports}"


@pytest.mark.skipif(blas_threads() is None, reason="threadpoolctl or a BLAS pool not found")
def test_limit_worker_threads_limits_blas_in_workers():
    reports = list(DataLoader(ThreadReportDataset(4), batch_size=None, num_workers=2,
                              worker_init_fn=limit_worker_threads))
    assert all(r["blas_threads"] == 1 and r["torch_threads"] == 1 for r in reports), (
        f"the default limit is one thread per pool in every worker: {reports}"
    )


@pytest.mark.skipif(blas_threads() is None, reason="threadpoolctl or a BLAS pool not found")
def test_limit_worker_threads_partial_sets_another_limit():
    # The docstring's recipe for another number: partial(limit_worker_threads, threads=2).
    # Only thread counts are read in the workers; no parallel operation runs there.
    reports = list(DataLoader(ThreadReportDataset(4), batch_size=None, num_workers=2,
                              worker_init_fn=functools.partial(limit_worker_threads, threads=2)))
    assert all(r["torch_threads"] == 2 for r in reports), f"torch's pool is set to 2 in every worker: {reports}"
    assert all(r["blas_threads"] <= 2 for r in reports), f"BLAS is limited to at most 2 threads: {reports}"


# --------------------------------------------------------------------------- one resource, shared


@pytest.mark.parametrize("make", [
    lambda: LockedDataset(64, 0.004, locked_share=1.0),
    lambda: RateLimitedDataset(64, requests_per_s=250, latency_s=0.0),
], ids=["lock", "rate-limited"])
@pytest.mark.filterwarnings("ignore:This DataLoader will create")
def test_items_that_share_one_resource_come_no_faster_with_more_workers(make):
    """16 items of 4 ms each on one resource every process shares: 4 workers together still
    take at least 16 x 4 ms (a generous 0.8 of it for the clock), where 4 workers over
    independent sleeps would take a quarter of that."""
    loader = DataLoader(make(), batch_size=None, num_workers=4, prefetch_factor=4)
    start = time.perf_counter()
    got = [int(x) for _, x in zip(range(16), loader)]
    elapsed = time.perf_counter() - start
    assert sorted(got) == list(range(16)), "every item once, its index filling the payload"
    first = time.perf_counter()
    for _ in zip(range(16), DataLoader(make(), batch_size=None)):
        pass
    assert elapsed >= 0.8 * 16 * 0.004, f"{elapsed:.3f} s: the workers did not wait for each other"
    assert time.perf_counter() - first >= 0.8 * 16 * 0.004, "one process alone pays each item too"


def test_shared_resource_datasets_check_their_arguments():
    with pytest.raises(ValueError, match="locked_share"):
        LockedDataset(4, 0.001, locked_share=1.5)
    with pytest.raises(ValueError, match="requests_per_s"):
        RateLimitedDataset(4, requests_per_s=0)
    assert "locked_share=0.25" in repr(LockedDataset(4, 0.001, 0.25))
    assert "requests_per_s=400" in repr(RateLimitedDataset(4, 400))
