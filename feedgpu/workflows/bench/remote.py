"""Remote storage (notebook 07): every loading strategy against the course's object store.

The store answers every GET after ``latency_s`` (50 ms, S3 in the same region); the
figures are images per second in steady state and the time to the first batch, per
strategy, and the goodput of boto3's three retry modes under 5% ``SlowDown``. The claim
is a ratio of one run: threads inside 2 workers against plain 2 workers (budget: 8x).
"""

from __future__ import annotations

import tempfile
import time
import warnings
from typing import Any

from . import Figure, figure

LATENCY_S = 0.050
N_IMAGES = 256
BATCH_SIZE = 16
THREADS = 16
IMAGES_PER_SHARD = 64
SLOWDOWN_RATE = 0.05
RETRY_KEYS = 96


def _measure(dataset: Any, num_workers: int, batches: int, warmup: int) -> tuple[float, float]:
    """(seconds to the first batch, steady images/s) of one loader; its workers are stopped after."""
    from torch.utils.data import DataLoader

    from feedgpu.measure.timing import shutdown_workers, time_loader
    from feedgpu.workloads.remote import collate_objects

    loader = DataLoader(dataset, batch_size=BATCH_SIZE, num_workers=num_workers,
                        collate_fn=collate_objects, persistent_workers=num_workers > 0)
    try:
        timing = time_loader(loader, batches=batches, warmup=warmup, repeats=1)
    finally:
        shutdown_workers(loader)
    return timing.startup_s[0], timing.items_per_s


def bench_remote() -> list[Figure]:
    """Images/s and time to first batch per strategy at 50 ms; goodput per retry mode."""
    from torch.utils.data import DataLoader

    import lfw_dataset
    from feedgpu.measure.timing import time_loader
    from feedgpu.objectstore import ObjectStore, fill_from_tree, pack_shards
    from feedgpu.workloads.remote import (
        CachedS3Dataset,
        LocalFileDataset,
        S3Dataset,
        S3ShardDataset,
        ThreadedS3Dataset,
        collate_objects,
        download_objects,
        fetch_objects,
    )

    warnings.filterwarnings("ignore", message="This DataLoader will create")
    warnings.filterwarnings("ignore", message=r".*use of fork\(\) may lead to deadlocks")
    root = lfw_dataset.default_root()
    rows: dict[str, tuple[float, float]] = {}  # strategy -> (first batch s, images/s)
    out: list[Figure] = []
    with ObjectStore(seed=0) as store:
        s3 = store.client(max_pool_connections=32)
        keys = fill_from_tree(s3, "faces", root, limit=N_IMAGES, progress=False)
        shards = pack_shards(s3, "faces", root, limit=N_IMAGES, images_per_shard=IMAGES_PER_SHARD,
                             progress=False)
        store.set(latency_s=LATENCY_S)
        streamed = S3Dataset(store.endpoint_url, "faces", keys)
        for workers, batches, warmup in [(0, 3, 0), (2, 6, 2), (8, 8, 7)]:
            rows[f"stream, {workers} workers"] = _measure(streamed, workers, batches, warmup)
        threaded = ThreadedS3Dataset(store.endpoint_url, "faces", keys, threads=THREADS)
        rows[f"threads, 2 workers x {THREADS}"] = _measure(threaded, 2, 10, 2)
        with tempfile.TemporaryDirectory(prefix="feedgpu-bench-") as tmp:
            start = time.perf_counter()
            download_objects(store.endpoint_url, "faces", keys, f"{tmp}/download", threads=8)
            download_s = time.perf_counter() - start
            first, rate = _measure(LocalFileDataset(f"{tmp}/download", keys), 0, 8, 1)
            rows["download (8 threads), then read"] = (download_s + first, rate)
            cached = CachedS3Dataset(store.endpoint_url, "faces", keys, f"{tmp}/cache", threads=THREADS)
            epochs = time_loader(DataLoader(cached, batch_size=BATCH_SIZE, collate_fn=collate_objects),
                                 batches=None, warmup=2, repeats=2)
            rows[f"cache, epoch 1 (0 workers x {THREADS})"] = (epochs.startup_s[0], BATCH_SIZE / epochs.s_per_batch[0])
            rows[f"cache, epoch 2 (0 workers x {THREADS})"] = (epochs.startup_s[1], BATCH_SIZE / epochs.s_per_batch[1])
        rows[f"shards of {IMAGES_PER_SHARD}, 0 workers"] = _measure(S3ShardDataset(store.endpoint_url, "faces", shards),
                                                                     0, 8, 1)
        for name, (first, rate) in rows.items():
            out += [figure(f"remote {name}: images/s", rate, "images/s", f"{LATENCY_S * 1e3:.0f} ms to first byte"),
                    figure(f"remote {name}: first batch", first, "s", f"batch of {BATCH_SIZE}")]
        ratio = rows[f"threads, 2 workers x {THREADS}"][1] / rows["stream, 2 workers"][1]
        out.append(figure(f"remote threads (2 x {THREADS}) / plain 2 workers", ratio, "x",
                          "budget >= 8 (Little's law: 16)"))
        for mode in ("legacy", "standard", "adaptive"):
            client = store.client(retry_mode=mode, max_pool_connections=THREADS)
            store.set(slowdown_rate=SLOWDOWN_RATE, seed=0)
            store.reset_stats()
            report = fetch_objects(client, "faces", keys[:RETRY_KEYS], threads=THREADS)
            stats = store.stats()
            store.set(slowdown_rate=0.0)
            client.close()
            out.append(figure(f"remote goodput, retry mode {mode}", report.goodput, "images/s",
                              f"{SLOWDOWN_RATE:.0%} SlowDown, {THREADS} threads, {RETRY_KEYS} objects: "
                              f"{stats['slowdowns']} SlowDown, {len(report.errors)} lost"))
    return out
