"""Reading from remote storage: the datasets and fetchers of feedgpu.workloads.remote against a real
ObjectStore, and the model of feedgpu.models.remote_storage (Little's law and the simulated store)."""

from __future__ import annotations

import math
import pickle
import threading
import time
from pathlib import Path

import pytest

pytest.importorskip("botocore")
pytest.importorskip("moto")
from botocore.exceptions import (ClientError, ConnectionClosedError, EndpointConnectionError,  # noqa: E402
                                 IncompleteReadError, ReadTimeoutError, ResponseStreamingError)
from torch.utils.data import DataLoader  # noqa: E402

from feedgpu.objectstore import ObjectStore, pack_shards  # noqa: E402
from feedgpu.models.remote_storage import (expected_slowest_s, latency_quantile_s, predicted_items_per_s,  # noqa: E402
                                  simulate_store)
from feedgpu.workloads.remote import (  # noqa: E402
    CachedS3Dataset,
    Hedged,
    LocalFileDataset,
    S3Dataset,
    S3ShardDataset,
    ThreadedS3Dataset,
    collate_objects,
    download_objects,
    fetch_all,
    fetch_objects,
    fetch_with_retries,
    is_retryable,
)

pytestmark = pytest.mark.unit

BUCKET = "faces"


def client_error(code: str, status: int) -> ClientError:
    return ClientError({"Error": {"Code": code, "Message": code}, "ResponseMetadata": {"HTTPStatusCode": status}},
                       "GetObject")


@pytest.fixture(scope="module")
def tiny_tree(tmp_path_factory) -> Path:
    """An LFW-layout tree of 24 small 'images' (distinct bytes; nothing decodes them)."""
    root = tmp_path_factory.mktemp("lfw")
    for p in range(6):
        person = root / f"Person_{p:02d}"
        person.mkdir()
        for i in range(1, 5):
            (person / f"Person_{p:02d}_{i:04d}.jpg").write_bytes(bytes([p * 16 + i]) * (200 + 7 * i))
    return root


@pytest.fixture(scope="module")
def filled(tiny_tree):
    """A store holding the tree as objects and as shards of 5 images: (store, keys, shards, tree)."""
    from feedgpu.objectstore import fill_from_tree

    with ObjectStore(seed=0) as store:
        client = store.client()
        keys = fill_from_tree(client, BUCKET, tiny_tree, progress=False)
        shards = pack_shards(client, BUCKET, tiny_tree, images_per_shard=5, progress=False)
        client.close()
        yield store, keys, shards, tiny_tree


#: every injected cost and failure off, the seed back at 0
QUIET = dict(latency_s=0.0, latency_sigma=0.0, bandwidth_bytes_per_s=None, max_concurrent=None, requests_per_s=None,
             burst=None, slowdown_rate=0.0, drop_rate=0.0, cut_rate=0.0, seed=0)


@pytest.fixture
def store(filled):
    store = filled[0]
    store.set(**QUIET)
    store.reset_stats()
    yield store
    store.set(**QUIET)


def expected_bytes(tree: Path, keys) -> list[bytes]:
    return [(tree / key).read_bytes() for key in keys]


# --------------------------------------------------------------------------- the model


@pytest.mark.parametrize("workers, threads, latency_s, limit", [
    (0, 1, 0.05, None), (2, 1, 0.05, None), (8, 1, 0.05, None), (2, 16, 0.05, None), (3, 5, 0.07, 7),
    (4, 3, 0.02, 12), (1, 7, 0.03, 3), (2, 16, 0.05, 10), (0, 8, 0.2, 64),
])
def test_littles_law_matches_the_simulated_store(workers, threads, latency_s, limit):
    expected = min(max(workers, 1) * threads, limit or math.inf) / latency_s  # written out, not copied
    assert math.isclose(predicted_items_per_s(workers, threads, latency_s, limit), expected, rel_tol=1e-12), \
        "Little's law: min(streams, limit) / latency"
    for n in (200, 333):  # at least two rounds of every stream
        sim = simulate_store(workers, threads, latency_s, limit, n_requests=n)
        assert math.isclose(sim.items_per_s, expected, rel_tol=1e-9), \
            f"{n} requests: the simulated store served {sim.items_per_s}/s, Little's law says {expected}"


def test_simulated_store_serves_in_rounds_and_queues_past_its_limit():
    sim = simulate_store(2, 3, 0.1, max_concurrent=4, n_requests=12)
    assert sim.requests == 12 and sim.peak_in_flight == 4, "4 slots, 6 streams: 4 served at once"
    assert sim.done_s == pytest.approx([0.1] * 4 + [0.2] * 4 + [0.3] * 4), "three rounds of 4, 0.1 s each"
    assert sim.started_s == pytest.approx([0.0] * 4 + [0.1] * 4 + [0.2] * 4), "each round starts as one ends"
    # round 1 serves 4 of the 6 sent at 0; round 2 serves the 2 left over (sent at 0, 0.1 s of waiting)
    # and 2 of the 4 sent at 0.1; round 3 the other 2 sent at 0.1 (waited 0.1 s) and 2 sent at 0.2
    assert sim.sent_s == pytest.approx([0.0] * 6 + [0.1] * 4 + [0.2] * 2)
    assert sim.mean_wait_s == pytest.approx(4 * 0.1 / 12), "requests past the limit wait for a slot"
    free = simulate_store(2, 1, 0.05, n_requests=10)
    assert free.mean_wait_s == 0.0 and free.peak_in_flight == 2, "with slots to spare nobody waits"
    assert free.total_s == pytest.approx(0.25), "10 requests, 2 at a time, 50 ms each: 5 rounds"


def test_simulated_store_with_one_round_falls_back_to_the_total():
    sim = simulate_store(8, 1, 0.05, n_requests=5)
    assert sim.items_per_s == pytest.approx(5 / 0.05), "5 requests at once, done after one latency"


@pytest.mark.parametrize("args", [(-1, 1, 0.05), (2, 0, 0.05), (2, 1, 0.0), (2, 1, -0.1), (2.5, 1, 0.05)])
def test_model_rejects_bad_input(args):
    with pytest.raises(ValueError):
        predicted_items_per_s(*args)
    with pytest.raises(ValueError):
        simulate_store(*args)
    with pytest.raises(ValueError):
        predicted_items_per_s(2, 1, 0.05, max_concurrent=0)
    with pytest.raises(ValueError):
        simulate_store(2, 1, 0.05, n_requests=0)


# --------------------------------------------------------------------------- fetchers


def test_fetch_all_keeps_order_calls_once_and_overlaps_waits():
    keys = [f"k{i:02d}" for i in range(16)]
    calls, lock = [], threading.Lock()

    def later_keys_sooner(key):
        with lock:
            calls.append(key)
        time.sleep(0.05 - 0.002 * int(key[1:]))
        return key.upper()

    start = time.perf_counter()
    got = fetch_all(keys, later_keys_sooner, 8)
    elapsed = time.perf_counter() - start
    assert got == [k.upper() for k in keys], "results in the keys' order, not in the order they finished"
    assert sorted(calls) == keys, "each key fetched exactly once"
    serial = sum(0.05 - 0.002 * i for i in range(16))
    assert elapsed < serial / 2, f"8 threads took {elapsed:.3f} s, a loop takes {serial:.3f} s: they must overlap"
    assert fetch_all([], str, 4) == [] and fetch_all(iter("ab"), str.upper, 1) == ["A", "B"]
    with pytest.raises(ValueError, match="threads"):
        fetch_all(keys, str, 0)


def test_fetch_all_raises_the_first_failure_in_key_order():
    def fail_on_odd(key):
        if key % 2:
            raise KeyError(key)
        return key

    with pytest.raises(KeyError) as info:
        fetch_all(range(10), fail_on_odd, 4)
    assert info.value.args == (1,), "the error of the first failing key, in order"


def test_is_retryable_tells_transient_errors_from_final_ones():
    assert is_retryable(client_error("SlowDown", 503))
    assert is_retryable(client_error("InternalError", 500))
    assert is_retryable(client_error("Whatever", 502)) and is_retryable(client_error("Whatever", 504))
    assert is_retryable(client_error("TooManyRequests", 429)), "429: throttling, whatever the code"
    assert is_retryable(client_error("RequestTimeout", 400)), "a transient code, whatever the status"
    assert not is_retryable(client_error("NotImplemented", 501)), "botocore's standard mode does not retry 501"
    assert not is_retryable(client_error("Whatever", 505)), "only 500, 502, 503 and 504 among the 5xx"
    assert is_retryable(ConnectionClosedError(endpoint_url="http://x"))
    assert is_retryable(EndpointConnectionError(endpoint_url="http://x"))
    assert is_retryable(ReadTimeoutError(endpoint_url="http://x")), "a read that timed out"
    assert is_retryable(ResponseStreamingError(error="IncompleteRead")), "a body cut part-way"
    assert is_retryable(IncompleteReadError(actual_bytes=3, expected_bytes=10)), "a body shorter than announced"
    assert not is_retryable(client_error("NoSuchKey", 404)), "asking again for a missing key gives the same answer"
    assert not is_retryable(client_error("AccessDenied", 403))
    assert not is_retryable(ValueError("bad"))


def test_is_retryable_agrees_with_botocores_standard_mode():
    """What botocore's standard mode retries (read from the installed botocore, not copied)."""
    from botocore.retries import standard

    context = standard.RetryContext(attempt_number=1)  # nothing went wrong: botocore retries nothing
    assert not standard.TransientRetryableChecker().is_retryable(context)
    for status in range(500, 512):
        error = client_error("Whatever", status)
        context = standard.RetryContext(attempt_number=1, parsed_response=error.response,
                                        http_response=_Response(status))
        botocore_retries = (standard.TransientRetryableChecker().is_retryable(context)
                            or standard.ThrottledRetryableChecker().is_retryable(context))
        assert is_retryable(error) == botocore_retries, f"HTTP {status}: botocore retries it: {botocore_retries}"
    for code in ["SlowDown", "Throttling", "RequestTimeout", "NoSuchKey", "AccessDenied", "BandwidthLimitExceeded"]:
        error = client_error(code, 400)
        context = standard.RetryContext(attempt_number=1, parsed_response=error.response, http_response=_Response(400))
        botocore_retries = (standard.TransientRetryableChecker().is_retryable(context)
                            or standard.ThrottledRetryableChecker().is_retryable(context))
        assert is_retryable(error) == botocore_retries, f"{code}: botocore retries it: {botocore_retries}"


class _Response:
    """The one attribute of an HTTP response that botocore's checkers read."""

    def __init__(self, status_code: int) -> None:
        self.status_code = status_code
        self.headers = {}


def test_fetch_with_retries_backs_off_and_gives_up():
    calls, waits = [], []

    def fails(times, error):
        def fetch(key):
            calls.append(key)
            if len(calls) <= times:
                raise error
            return key * 2
        return fetch

    assert fetch_with_retries(fails(2, client_error("SlowDown", 503)), "ab", 5, 0.01, waits.append) == "abab"
    assert len(calls) == 3 and waits == pytest.approx([0.01, 0.02]), "two failures, two doubling waits, a success"
    calls.clear(), waits.clear()
    with pytest.raises(ClientError):
        fetch_with_retries(fails(99, client_error("SlowDown", 503)), "k", 3, 0.1, waits.append)
    assert len(calls) == 3 and waits == pytest.approx([0.1, 0.2]), "3 attempts, no wait after the last"
    calls.clear(), waits.clear()
    with pytest.raises(ClientError):
        fetch_with_retries(fails(99, client_error("NoSuchKey", 404)), "k", 5, 0.1, waits.append)
    assert len(calls) == 1 and waits == [], "a missing key is not retried"
    with pytest.raises(ValueError):
        fetch_with_retries(str, "k", max_attempts=0)


def test_fetch_with_retries_survives_the_stores_failures(store, filled):
    _, keys, _, tree = filled
    bare = store.client(retry_mode=None)
    try:
        store.set(slowdown_rate=0.25, drop_rate=0.05, seed=0)
        store.reset_stats()
        got = [fetch_with_retries(lambda k: bare.get_object(Bucket=BUCKET, Key=k)["Body"].read(), key, 10, 0.0)
               for key in keys]
        stats = store.stats()
    finally:
        bare.close()
    assert got == expected_bytes(tree, keys), "every object intact, in order"
    failures = stats["slowdowns"] + stats["drops"]
    assert failures > 0 and stats["requests"] == len(keys) + failures, "one more request per failure, no more"


def test_fetch_objects_reports_failures_instead_of_raising(store, filled):
    _, keys, _, tree = filled
    client = store.client(retry_mode=None, max_pool_connections=8)
    try:
        report = fetch_objects(client, BUCKET, keys + ["Nobody/Nobody_0001.jpg"], threads=8)
    finally:
        client.close()
    assert report.data[:-1] == expected_bytes(tree, keys) and report.data[-1] is None
    assert list(report.errors) == ["Nobody/Nobody_0001.jpg"] and "NoSuchKey" in report.errors["Nobody/Nobody_0001.jpg"]
    assert report.delivered == len(keys) and report.goodput == pytest.approx(len(keys) / report.seconds)


def test_download_objects_writes_every_file(store, filled, tmp_path):
    _, keys, _, tree = filled
    paths = download_objects(store.endpoint_url, BUCKET, keys, tmp_path / "down", threads=4)
    assert paths == [(tmp_path / "down" / key).resolve() for key in keys], "one file per key, in order"
    assert [p.read_bytes() for p in paths] == expected_bytes(tree, keys)
    assert not list((tmp_path / "down").rglob("*.part")), "no temporary file left behind"
    local = LocalFileDataset(tmp_path / "down", keys)
    assert [local[i] for i in range(len(local))] == list(zip(keys, expected_bytes(tree, keys)))
    with pytest.raises(ValueError, match="outside"):
        download_objects(store.endpoint_url, BUCKET, ["../escape.jpg"], tmp_path / "down", threads=1)


# --------------------------------------------------------------------------- datasets


def test_datasets_pickle_without_a_client(store, filled, tmp_path):
    _, keys, shards, _ = filled
    for dataset in (S3Dataset(store.endpoint_url, BUCKET, keys), ThreadedS3Dataset(store.endpoint_url, BUCKET, keys),
                    CachedS3Dataset(store.endpoint_url, BUCKET, keys, tmp_path), S3ShardDataset(store.endpoint_url, BUCKET, shards)):
        if isinstance(dataset, S3ShardDataset):
            next(iter(dataset))
        else:
            dataset[0]  # makes this process's client
        copy = pickle.loads(pickle.dumps(dataset))  # what spawn sends to a worker
        assert dataset._clients.client is not None and copy._clients._owned is None, \
            f"{type(dataset).__name__} must not carry its boto3 client"
        assert copy.endpoint_url == store.endpoint_url


@pytest.mark.parametrize("num_workers", [0, 2])
def test_loaders_deliver_every_object_once(store, filled, tmp_path, num_workers):
    _, keys, shards, tree = filled
    want = dict(zip(keys, expected_bytes(tree, keys)))
    datasets = [S3Dataset(store.endpoint_url, BUCKET, keys), ThreadedS3Dataset(store.endpoint_url, BUCKET, keys, threads=4),
                S3ShardDataset(store.endpoint_url, BUCKET, shards)]
    for dataset in datasets:
        loader = DataLoader(dataset, batch_size=4, num_workers=num_workers, collate_fn=collate_objects)
        got = {}
        for batch_keys, datas in loader:
            assert len(batch_keys) == len(datas) <= 4
            for key, data in zip(batch_keys, datas):
                assert key not in got, f"{type(dataset).__name__}: {key} delivered twice"
                got[key] = data
        assert got == want, f"{type(dataset).__name__} with {num_workers} workers: every object, intact, once"


def test_threaded_dataset_keeps_requests_in_flight(store, filled):
    _, keys, _, _ = filled
    store.set(latency_s=0.05)
    plain, threaded = S3Dataset(store.endpoint_url, BUCKET, keys), ThreadedS3Dataset(store.endpoint_url, BUCKET, keys, threads=8)
    plain[0], threaded[0]  # clients made before timing
    store.reset_stats()
    start = time.perf_counter()
    batch = threaded.__getitems__(list(range(16)))
    threaded_s = time.perf_counter() - start
    assert store.stats()["peak_in_flight"] >= 4, "the pool's requests overlap at the store"
    assert [key for key, _ in batch] == keys[:16], "the batch in index order"
    start = time.perf_counter()
    [plain[i] for i in range(16)]
    plain_s = time.perf_counter() - start
    assert plain_s >= 2 * threaded_s, f"16 GETs at 50 ms: one at a time {plain_s:.2f} s, 8 threads {threaded_s:.2f} s"
    assert not [t.name for t in threading.enumerate() if t.name.startswith("fetch")], "the pool lives for one batch"


def test_cache_fills_on_first_epoch_then_needs_no_request(store, filled, tmp_path):
    _, keys, _, tree = filled
    cached = CachedS3Dataset(store.endpoint_url, BUCKET, keys, tmp_path / "cache", threads=4)
    loader = DataLoader(cached, batch_size=6, num_workers=2, collate_fn=collate_objects, persistent_workers=True)
    try:
        first = [item for batch in loader for item in zip(*batch)]
        assert cached.cached() == len(keys), "every object in the cache after one epoch"
        store.reset_stats()
        second = [item for batch in loader for item in zip(*batch)]
    finally:
        from feedgpu.measure.timing import shutdown_workers

        shutdown_workers(loader)
    assert store.stats()["requests"] == 0, "the second epoch reads the cache only"
    assert first == second == list(zip(keys, expected_bytes(tree, keys)))


def test_shards_split_among_workers_and_need_one_request_each(store, filled):
    _, keys, shards, tree = filled
    assert len(shards) == 5, "24 images in shards of 5"
    store.reset_stats()
    loader = DataLoader(S3ShardDataset(store.endpoint_url, BUCKET, shards), batch_size=5, num_workers=2,
                        collate_fn=collate_objects)
    got = [item for batch in loader for item in zip(*batch)]
    assert sorted(got) == sorted(zip(keys, expected_bytes(tree, keys))), "every image once"
    assert store.stats()["requests"] == len(shards), "one GET per shard"
    assert S3ShardDataset(store.endpoint_url, BUCKET, shards).my_shards() == shards, "the main process reads all"


def test_datasets_refuse_empty_key_lists(store):
    for make in (lambda: S3Dataset(store.endpoint_url, BUCKET, []), lambda: S3ShardDataset(store.endpoint_url, BUCKET, []),
                 lambda: LocalFileDataset(".", []), lambda: ThreadedS3Dataset(store.endpoint_url, BUCKET, ["k"], threads=0)):
        with pytest.raises(ValueError):
            make()


def test_threads_of_a_batch_share_one_client(store, filled, monkeypatch):
    import feedgpu.objectstore as objectstore

    _, keys, _, tree = filled
    made, real = [], objectstore.make_client

    def counting_make_client(*args, **kwargs):
        made.append(threading.get_ident())
        time.sleep(0.05)  # a slow start, so that every thread of the batch asks while it runs
        return real(*args, **kwargs)

    monkeypatch.setattr(objectstore, "make_client", counting_make_client)
    dataset = ThreadedS3Dataset(store.endpoint_url, BUCKET, keys, threads=8)
    batch = dataset.__getitems__(list(range(8)))
    assert [data for _, data in batch] == expected_bytes(tree, keys[:8])
    assert len(made) == 1, f"8 threads made {len(made)} clients; one per process is enough"


@pytest.mark.skipif(not hasattr(__import__("os"), "fork"), reason="needs fork")
def test_a_forked_child_makes_its_own_client(store, filled):
    import os

    _, keys, _, tree = filled
    dataset = S3Dataset(store.endpoint_url, BUCKET, keys)
    dataset[0]
    assert dataset._clients.client is not None, "the parent made its client"
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report whether it saw the parent's client, then fetch with its own
        try:
            saw_parent = dataset._clients.client is not None
            _, data = dataset[1]
            os.write(write, b"parent" if saw_parent else (b"ok" if data == (tree / keys[1]).read_bytes() else b"bad"))
        finally:
            os._exit(0)
    os.close(write)
    answer = os.read(read, 16)
    os.close(read)
    os.waitpid(pid, 0)
    assert answer == b"ok", f"the forked child answered {answer!r}: it must make (and use) a client of its own"


# --------------------------------------------------------------------------- the tail of the latency


def test_latency_quantiles_of_the_lognormal():
    assert latency_quantile_s(0.05, 1.0, 0.5) == pytest.approx(0.05), "the median is latency_s"
    assert latency_quantile_s(0.05, 1.0, 0.99) / 0.05 == pytest.approx(math.exp(2.3263), rel=1e-3)
    assert latency_quantile_s(0.05, 0.0, 0.99) == pytest.approx(0.05), "no spread, no tail"
    with pytest.raises(ValueError):
        latency_quantile_s(0.05, 1.0, 1.0)


@pytest.mark.parametrize("n, sigma, remedy", [
    (1, 1.0, {}), (16, 1.0, {}), (16, 0.5, {}), (16, 1.0, {"hedge_after_s": 0.1}),
    (4, 0.8, {"hedge_after_s": 0.05}), (16, 1.0, {"timeout_s": 0.1}), (8, 1.2, {"timeout_s": 0.3}),
])
def test_expected_slowest_matches_a_seeded_simulation(n, sigma, remedy):
    """The integral against 200,000 batches drawn with numpy (seeded): the mean of their slowest request."""
    np = pytest.importorskip("numpy")
    rng = np.random.default_rng(7)
    median = 0.05

    def draw(shape):
        return median * np.exp(sigma * rng.standard_normal(shape))

    first = draw((200_000, n))
    if "hedge_after_s" in remedy:
        h = remedy["hedge_after_s"]
        times = np.minimum(first, h + draw(first.shape))
    elif "timeout_s" in remedy:  # sent again after every timeout, until one answers in time
        tau = remedy["timeout_s"]
        times, late = first.copy(), first > tau
        spent = np.where(late, tau, 0.0)
        while late.any():
            again = draw(first.shape)
            times = np.where(late, spent + again, times)
            late = late & (again > tau)
            spent = spent + np.where(late, tau, 0.0)
    else:
        times = first
    simulated = times.max(axis=1).mean()
    assert expected_slowest_s(n, median, sigma, **remedy) == pytest.approx(simulated, rel=0.01)


def test_expected_slowest_without_spread_and_bad_input():
    assert expected_slowest_s(16, 0.05, 0.0) == pytest.approx(0.05), "no spread: every request takes the median"
    assert expected_slowest_s(16, 0.05, 1.0) / 0.05 == pytest.approx(6.87, rel=0.01), "the docstring's figure"
    assert expected_slowest_s(16, 0.05, 1.0, hedge_after_s=0.1) < expected_slowest_s(16, 0.05, 1.0, timeout_s=0.1) \
        < expected_slowest_s(16, 0.05, 1.0), "a hedge buys more than a timeout at the same delay"
    for bad in [dict(n_requests=0), dict(latency_s=0.0), dict(sigma=-1.0), dict(hedge_after_s=0.0),
                dict(hedge_after_s=0.1, timeout_s=0.1)]:
        args = {"n_requests": 16, "latency_s": 0.05, "sigma": 1.0, **bad}
        with pytest.raises(ValueError):
            expected_slowest_s(**args)


def test_hedged_sends_a_second_request_only_when_the_first_is_late():
    slow_once = {"a": [0.3, 0.0], "b": [0.0]}  # key -> seconds of its successive calls
    calls, lock = [], threading.Lock()

    def fetch(key):
        with lock:
            calls.append(key)
            n = sum(c == key for c in calls) - 1
        time.sleep(slow_once[key][min(n, len(slow_once[key]) - 1)])
        return key.upper()

    with Hedged(fetch, after_s=0.05) as hedged:
        start = time.perf_counter()
        assert hedged("a") == "A", "the second request's answer"
        hedged_s = time.perf_counter() - start
        assert hedged("b") == "B"
    assert hedged_s < 0.25, f"the hedge answered before the slow first call ({hedged_s:.3f} s)"
    assert sorted(calls) == ["a", "a", "b"], "a second request for the late key only"
    assert (hedged.calls, hedged.hedges) == (2, 1)


def test_hedged_raises_when_every_request_fails():
    def broken(key):
        time.sleep(0.05)
        raise KeyError(key)

    with Hedged(broken, after_s=0.01) as hedged:
        with pytest.raises(KeyError):
            hedged("k")
    assert hedged.hedges == 1, "the first call was late, so a second went out before both failed"
    with pytest.raises(ValueError):
        Hedged(str, after_s=0.0)


def test_hedged_fetch_all_against_a_store_with_a_tail(store, filled):
    _, keys, _, tree = filled
    client = store.client(max_pool_connections=32)
    try:
        store.set(latency_s=0.01, latency_sigma=1.0, seed=0)
        with Hedged(lambda k: client.get_object(Bucket=BUCKET, Key=k)["Body"].read(), after_s=0.02) as hedged:
            got = fetch_all(keys, hedged, 8)
    finally:
        client.close()
    assert got == expected_bytes(tree, keys), "every object, once, in order, hedged or not"
    assert hedged.hedges > 0 and store.stats()["requests"] == len(keys) + hedged.hedges, \
        "one more request per hedge, no more"


def test_the_plots_of_remote_storage_draw_every_row():
    """Each plot of notebook 07 draws one mark per row it is given, with the labels the notebook reads."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import pandas as pd

    from feedgpu.plots import (plot_first_batch_and_rate, plot_littles_law, plot_retry_outcomes, plot_slowest_request,
                               plot_store_simulation)

    ax = plot_store_simulation([1, 2, 4], [20.0, 40.0, 80.0], [20.0, 40.0, 80.0], latency_s=0.05, max_concurrent=16)
    assert [len(line.get_xdata()) for line in ax.lines] == [3, 3], "the simulated points and the model's line"
    results = {"stream, 2 workers": {"in flight": 2, "images/s": 35.0}, "threads, 2 workers x 16": {"in flight": 32,
               "images/s": 300.0}, "cache, epoch 2": {"in flight": 0, "images/s": 5000.0}}
    ax = plot_littles_law(results, 0.055, store_cpu_s=0.0015, cpu_s=0.003, cores=2)
    labels = [line.get_label() for line in ax.lines]
    assert "stream, 2 workers" in labels and "threads, 2 workers x 16" in labels and "cache, epoch 2" not in labels
    assert ax.lines[1].get_ydata()[0] == pytest.approx(1 / 0.0015) and ax.lines[2].get_ydata()[0] == pytest.approx(2 / 0.003)
    table = pd.DataFrame({"first batch (s)": [1.0, 0.2], "images/s": [35.0, 900.0]}, index=["stream", "shards"])
    left, right = plot_first_batch_and_rate(table)
    assert [bar.get_width() for bar in left.patches] == [0.2, 1.0] and len(right.patches) == 2
    left, right = plot_slowest_request([0.05, 0.06, 0.4], {"no remedy": [0.5, 0.45]}, {"no remedy": 0.34, "hedged": 0.18},
                                       latency_s=0.05)
    assert len(right.patches) == 4, "measured and model bars for each of the two remedies (one measured is empty)"
    storm = pd.DataFrame({"requests per delivered": [7.0, 1.2], "goodput (images/s)": [40.0, 39.0], "lost": [13, 0]},
                         index=["at once", "Little's law"])
    left, right = plot_retry_outcomes(storm, limit_per_s=40)
    assert sorted(t.get_text() for t in right.texts) == ["0 lost", "13 lost"], "each bar says what it lost"
    plt.close("all")
