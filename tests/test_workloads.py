"""The workloads of notebook 02 (feedgpu.workloads): known costs, thread reports, thread limits."""

from __future__ import annotations

import functools
import pickle
import time

import pytest
import torch
from torch.utils.data import DataLoader

from feedgpu.workloads import (MatmulDataset, MixedDataset, SlowStartDataset, ThreadReportDataset, blas_threads, limit_worker_threads)


def test_mixed_dataset_items_and_cpu_fraction():
    ds = MixedDataset(5, cpu_s=0.002, wait_s=0.006)
    assert len(ds) == 5 and ds.cpu_fraction == pytest.approx(0.25)
    assert float(ds[3]) == 3.0 and float(ds[-1]) == 4.0
    assert MixedDataset(1, 0.0, 0.0).cpu_fraction == 0.0
    start = time.perf_counter()
    ds[0]
    assert time.perf_counter() - start >= 0.008, "an item waits, then spins"


def test_mixed_dataset_rejects_bad_arguments():
    for args in [(-1, 0.1, 0.1), (2, -0.1, 0.1), (2, 0.1, -0.1)]:
        with pytest.raises(ValueError):
            MixedDataset(*args)
    with pytest.raises(IndexError):
        MixedDataset(2, 0, 0)[2]


def test_slow_start_dataset_first_items_are_slow():
    ds = SlowStartDataset(6, 0.001, slow_items=2, slow_seconds=0.05)
    start = time.perf_counter()
    assert float(ds[1]) == 1.0
    assert time.perf_counter() - start >= 0.05
    start = time.perf_counter()
    assert float(ds[2]) == 2.0
    assert time.perf_counter() - start < 0.05
    with pytest.raises(ValueError):
        SlowStartDataset(3, 0.001, slow_items=-1, slow_seconds=0.1)


def test_matmul_dataset_is_deterministic_and_picklable():
    ds = MatmulDataset(3, size=32, rounds=2)
    assert ds[1] == ds[1] and isinstance(ds[1], float)
    assert pickle.loads(pickle.dumps(ds))[2] == ds[2]
    with pytest.raises(ValueError):
        MatmulDataset(3, size=0)


def test_thread_report_in_main_and_workers():
    main = ThreadReportDataset(1)[0]
    assert main["worker"] == -1 and main["torch_threads"] == torch.get_num_threads()
    reports = list(DataLoader(ThreadReportDataset(4), batch_size=None, num_workers=2))
    assert sorted({r["worker"] for r in reports}) == [0, 1]
    assert all(r["torch_threads"] == 1 for r in reports), "PyTorch runs one thread per worker"


@pytest.mark.skipif(blas_threads() is None, reason="threadpoolctl or a BLAS pool not found")
def test_limit_worker_threads_limits_blas_in_workers():
    reports = list(DataLoader(ThreadReportDataset(4), batch_size=None, num_workers=2,
                              worker_init_fn=limit_worker_threads))
    assert all(r["blas_threads"] == 1 and r["torch_threads"] == 1 for r in reports)
    with pytest.raises(ValueError):
        limit_worker_threads(0, threads=0)
    assert callable(functools.partial(limit_worker_threads, threads=1))
