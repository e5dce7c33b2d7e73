"""Remote storage (notebook 07): every loading strategy against the course's object store.

The store answers every GET after ``latency_s`` (50 ms, S3 in the same region); the
figures are images per second in steady state and the time to the first batch, per
strategy, and the goodput of boto3's three retry modes under 5% ``SlowDown``. The claim
is a ratio of one run: threads inside 2 workers against plain 2 workers (budget: at least 4x,
as the course design states; Little's law alone would allow 16x).

Then each fault the store injects, with and without it (:func:`bench_faults`): the time
per batch of 16 with a latency tail (and with a hedge), the goodput against a request-rate
limit (``standard`` and ``adaptive``), the goodput and losses with bodies cut part-way
(boto3 alone, and with retries of the read), and shards' images/s at a bandwidth limit.
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
TAIL_SIGMA = 1.0
HEDGE_AFTER_S = 0.100
TAIL_BATCHES = 8
RATE_LIMIT = 40
CUT_RATE = 0.10
FAULT_KEYS = 48
SHARD_BANDWIDTH = 10e6


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
                          "budget >= 4 (Little's law alone: 16)"))
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
        out += bench_faults(store, keys, shards)
    return out


def _batch_s(get: Any, keys: list[str]) -> float:
    """Mean seconds per batch of BATCH_SIZE fetched by BATCH_SIZE threads, over TAIL_BATCHES batches."""
    import statistics

    from feedgpu.workloads.remote import fetch_all

    times = []
    for b in range(TAIL_BATCHES):
        start = time.perf_counter()
        fetch_all(keys[b * BATCH_SIZE:(b + 1) * BATCH_SIZE], get, BATCH_SIZE)
        times.append(time.perf_counter() - start)
    return statistics.fmean(times)


def bench_faults(store: Any, keys: list[str], shards: list[str]) -> list[Figure]:
    """Each fault of the store with and without it: the figures of notebook 07's new lessons.

    ``store`` holds ``keys`` (one face each) and ``shards`` in bucket "faces"; its settings
    are put back to ``latency_s=LATENCY_S`` and no fault afterwards.
    """
    from feedgpu.models.remote_storage import expected_slowest_s
    from feedgpu.workloads.remote import Hedged, S3ShardDataset, fetch_all, fetch_objects, fetch_with_retries

    quiet = dict(latency_s=LATENCY_S, latency_sigma=0.0, bandwidth_bytes_per_s=None, requests_per_s=None,
                 burst=None, cut_rate=0.0, slowdown_rate=0.0, drop_rate=0.0, seed=0)
    out: list[Figure] = []
    s3 = store.client(max_pool_connections=2 * BATCH_SIZE)

    def get(key: str) -> bytes:
        return s3.get_object(Bucket="faces", Key=key)["Body"].read()

    try:
        # a latency with a tail: a batch waits for its slowest request
        tail = {}
        for name, sigma, hedge in [("no tail", 0.0, None), (f"tail sigma {TAIL_SIGMA:g}", TAIL_SIGMA, None),
                                   (f"tail sigma {TAIL_SIGMA:g}, hedged", TAIL_SIGMA, HEDGE_AFTER_S)]:
            store.set(**{**quiet, "latency_sigma": sigma})
            store.reset_stats()
            if hedge is None:
                tail[name] = _batch_s(get, keys)
            else:
                with Hedged(get, hedge) as hedged:
                    tail[name] = _batch_s(hedged, keys)
            model = expected_slowest_s(BATCH_SIZE, LATENCY_S, sigma, hedge_after_s=hedge)
            out.append(figure(f"remote time per batch, {name}", tail[name], "s",
                              f"{BATCH_SIZE} GETs at once, median {LATENCY_S * 1e3:.0f} ms; model {model:.3f} s "
                              f"without CPU; {store.stats()['requests']} requests for {TAIL_BATCHES * BATCH_SIZE}"))
        # a request-rate limit: SlowDown for what comes too fast
        for name, mode, limit in [("no limit, standard", "standard", None),
                                  (f"{RATE_LIMIT}/s, standard", "standard", RATE_LIMIT),
                                  (f"{RATE_LIMIT}/s, adaptive", "adaptive", RATE_LIMIT)]:
            client = store.client(retry_mode=mode, max_pool_connections=THREADS)
            store.set(**{**quiet, "requests_per_s": limit})
            store.reset_stats()
            report = fetch_objects(client, "faces", keys[:FAULT_KEYS], threads=THREADS)
            stats = store.stats()
            client.close()
            out.append(figure(f"remote goodput, rate limit {name}", report.goodput, "images/s",
                              f"{THREADS} threads, {FAULT_KEYS} objects: {stats['requests']} requests, "
                              f"{stats['slowdowns']} SlowDown, {len(report.errors)} lost"))
        # bodies cut part-way: boto3 does not retry the read; a retry around GET and read does
        for name, rate, ours in [("no cut, boto3 alone", 0.0, False), (f"{CUT_RATE:.0%} cut, boto3 alone", CUT_RATE, False),
                                 (f"{CUT_RATE:.0%} cut, retrying the read", CUT_RATE, True)]:
            store.set(**{**quiet, "cut_rate": rate})
            store.reset_stats()
            start = time.perf_counter()
            if ours:
                got = fetch_all(keys[:FAULT_KEYS], lambda key: fetch_with_retries(get, key), THREADS)
                lost = sum(data is None for data in got)
            else:
                report = fetch_objects(s3, "faces", keys[:FAULT_KEYS], threads=THREADS)
                lost = len(report.errors)
            seconds = time.perf_counter() - start
            stats = store.stats()
            out.append(figure(f"remote goodput, {name}", (FAULT_KEYS - lost) / seconds, "images/s",
                              f"{FAULT_KEYS} objects: {stats['cuts']} cut, {lost} lost, {stats['requests']} requests"))
        # shards at a bandwidth: each GET pays its bytes
        shard_bytes = s3.head_object(Bucket="faces", Key=shards[1])["ContentLength"]
        for name, bandwidth in [("no bandwidth limit", None), (f"{SHARD_BANDWIDTH / 1e6:.0f} MB/s", SHARD_BANDWIDTH)]:
            store.set(**{**quiet, "bandwidth_bytes_per_s": bandwidth})
            _, rate = _measure(S3ShardDataset(store.endpoint_url, "faces", shards), 0, 12, 3)
            model = IMAGES_PER_SHARD / (LATENCY_S + (shard_bytes / bandwidth if bandwidth else 0.0))
            out.append(figure(f"remote shards of {IMAGES_PER_SHARD}, {name}: images/s", rate, "images/s",
                              f"model (latency + bytes / bandwidth, no CPU): {model:.0f} images/s"))
    finally:
        s3.close()
        store.set(**quiet)
    return out
