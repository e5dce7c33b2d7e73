"""The course's object store (feedgpu.objectstore): S3 through boto3, injected cost and failure, clean stops."""

from __future__ import annotations

import dataclasses
import math
import os
import queue
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

botocore = pytest.importorskip("botocore")
pytest.importorskip("moto")
from botocore.exceptions import ClientError, HTTPClientError, ResponseStreamingError  # noqa: E402

from feedgpu.objectstore import (FaultInjector, ObjectStore, StoreSettings, fill_from_tree, list_images,  # noqa: E402
                                 list_keys, make_client, pack_shards, read_shard)
from feedgpu.objectstore.faults import TokenBucket, draw_fate  # noqa: E402

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def store():
    with ObjectStore(seed=0) as running:
        yield running


@pytest.fixture
def s3(store):
    client = store.client()
    yield client
    client.close()


def put_objects(client, bucket: str, n: int, size: int = 100) -> dict[str, bytes]:
    """``n`` small objects with distinct contents, under keys k00, k01, ..."""
    client.create_bucket(Bucket=bucket)
    objects = {f"k{i:02d}": bytes([i % 251]) * size for i in range(n)}
    for key, body in objects.items():
        client.put_object(Bucket=bucket, Key=key, Body=body)
    return objects


def median_get_s(client, bucket: str, keys) -> float:
    """The median time of one GET (a median, so one hiccup of a busy laptop does not count)."""
    times = []
    for key in keys:
        start = time.perf_counter()
        client.get_object(Bucket=bucket, Key=key)["Body"].read()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


# --------------------------------------------------------------------------- S3 semantics


def test_put_get_list_and_ranged_get(s3):
    s3.create_bucket(Bucket="faces")
    s3.put_object(Bucket="faces", Key="Bob_B/Bob_B_0001.jpg", Body=b"0123456789")
    s3.put_object(Bucket="faces", Key="Ann_A/Ann_A_0001.jpg", Body=b"abc")
    got = s3.get_object(Bucket="faces", Key="Bob_B/Bob_B_0001.jpg")
    assert got["Body"].read() == b"0123456789", "a GET returns the bytes that were PUT"
    assert got["ContentLength"] == 10, "the size is reported"
    listed = s3.list_objects_v2(Bucket="faces")
    assert [o["Key"] for o in listed["Contents"]] == ["Ann_A/Ann_A_0001.jpg", "Bob_B/Bob_B_0001.jpg"], \
        "a listing is sorted by key"
    part = s3.get_object(Bucket="faces", Key="Bob_B/Bob_B_0001.jpg", Range="bytes=2-5")
    assert part["Body"].read() == b"2345", "a Range header returns those bytes only (both ends included)"
    assert part["ResponseMetadata"]["HTTPStatusCode"] == 206, "a ranged GET answers 206 Partial Content"
    assert part["ContentRange"] == "bytes 2-5/10", "the Content-Range names the part and the whole size"


def test_missing_bucket_and_key_are_named(s3):
    with pytest.raises(ClientError) as missing_bucket:
        s3.get_object(Bucket="no-such-bucket", Key="x")
    assert missing_bucket.value.response["Error"]["Code"] == "NoSuchBucket", "S3's code for a missing bucket"
    s3.create_bucket(Bucket="faces")
    with pytest.raises(ClientError) as missing_key:
        s3.get_object(Bucket="faces", Key="Nobody/Nobody_0001.jpg")
    assert missing_key.value.response["Error"]["Code"] == "NoSuchKey", "S3's code for a missing key"


def test_buckets_start_empty_in_every_store():
    with ObjectStore() as first:
        client = first.client()
        client.create_bucket(Bucket="left-over")
        client.close()
    with ObjectStore() as second:
        client = second.client()
        names = [b["Name"] for b in client.list_buckets()["Buckets"]]
        client.close()
    assert names == [], "a new store does not see the buckets of the previous one"


# --------------------------------------------------------------------------- injected cost


def test_latency_is_added_to_every_request(store, s3):
    keys = list(put_objects(s3, "lat", 5))
    latency_s = 0.1
    baseline_s = median_get_s(s3, "lat", keys)
    store.set(latency_s=latency_s)
    start = time.perf_counter()
    slow_s = median_get_s(s3, "lat", keys)
    total_s = time.perf_counter() - start
    store.set(latency_s=2 * latency_s)
    slower_s = median_get_s(s3, "lat", keys)
    assert total_s >= len(keys) * latency_s, f"{len(keys)} GETs at {latency_s} s each took only {total_s:.3f} s"
    ratio = (slower_s - baseline_s) / (slow_s - baseline_s)
    assert 1.3 < ratio < 3, f"doubling the latency should about double the time it adds to a GET; ratio {ratio:.2f}"


def test_bandwidth_paces_the_body(store, s3):
    size = 2**20
    s3.create_bucket(Bucket="big")
    s3.put_object(Bucket="big", Key="blob", Body=os.urandom(size))
    store.set(bandwidth_bytes_per_s=4 * 2**20)
    start = time.perf_counter()
    body = s3.get_object(Bucket="big", Key="blob")["Body"].read()
    elapsed_s = time.perf_counter() - start
    assert len(body) == size, "the whole body arrives, in many chunks"
    assert elapsed_s >= 0.25, f"1 MiB at 4 MiB/s takes at least 0.25 s, took {elapsed_s:.3f} s"
    assert store.stats()["bytes_sent"] >= size, "the store counts the bytes it sent"


def test_concurrency_limit_holds_through_the_server(store):
    client = store.client(max_pool_connections=8)
    keys = list(put_objects(client, "conc", 8))
    store.set(latency_s=0.1, max_concurrent=2)
    store.reset_stats()
    start = time.perf_counter()
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda key: client.get_object(Bucket="conc", Key=key)["Body"].read(), keys))
    elapsed_s = time.perf_counter() - start
    client.close()
    stats = store.stats()
    assert stats["peak_in_flight"] == 2, f"8 threads against a limit of 2 should keep 2 in flight: {stats}"
    assert elapsed_s >= 4 * 0.1, f"8 requests, 2 at a time, 0.1 s each take at least 0.4 s, took {elapsed_s:.3f} s"


def test_concurrency_limit_counted_by_the_app_behind():
    """The middleware alone, with a fake app that counts the calls it serves at once."""
    lock = threading.Lock()
    now = {"in": 0, "peak": 0}

    def app(environ, start_response):
        with lock:
            now["in"] += 1
            now["peak"] = max(now["peak"], now["in"])
        time.sleep(0.05)
        with lock:
            now["in"] -= 1
        start_response("200 OK", [("Content-Length", "2")])
        return [b"ok"]

    injector = FaultInjector(app, StoreSettings(max_concurrent=2))

    def call(_):
        body = injector({"PATH_INFO": "/b/k", "REQUEST_METHOD": "GET"}, lambda status, headers: None)
        data = b"".join(body)
        body.close()
        return data

    with ThreadPoolExecutor(8) as pool:
        bodies = list(pool.map(call, range(16)))
    assert bodies == [b"ok"] * 16, "every request is answered"
    assert now["peak"] == 2, f"the app behind saw {now['peak']} requests at once, the limit is 2"
    assert injector.stats()["in_flight"] == 0, "every slot is given back"


# --------------------------------------------------------------------------- injected failure


def test_slowdown_is_s3s_503_with_its_xml_body(store, s3):
    put_objects(s3, "slow", 1)
    store.set(slowdown_rate=1.0)
    no_retries = store.client(retry_mode=None)
    with pytest.raises(ClientError) as error:
        no_retries.get_object(Bucket="slow", Key="k00")
    no_retries.close()
    assert error.value.response["Error"]["Code"] == "SlowDown", "botocore reads S3's error code"
    assert error.value.response["ResponseMetadata"]["HTTPStatusCode"] == 503, "SlowDown is an HTTP 503"
    with pytest.raises(urllib.error.HTTPError) as raw:
        urllib.request.urlopen(f"{store.endpoint_url}/slow/k00", timeout=10)
    xml = raw.value.read().decode()
    assert raw.value.code == 503, "the raw answer is a 503"
    assert "<Code>SlowDown</Code>" in xml and "<Message>Please reduce your request rate.</Message>" in xml, \
        f"the body is S3's XML error: {xml}"


def test_dropped_connection_is_a_connection_error(store, s3):
    put_objects(s3, "drop", 1)
    store.set(drop_rate=1.0)
    no_retries = store.client(retry_mode=None)
    with pytest.raises(HTTPClientError) as error:
        no_retries.get_object(Bucket="drop", Key="k00")
    no_retries.close()
    assert type(error.value).__name__ == "ConnectionClosedError", f"botocore reports {error.value!r}"
    assert store.stats()["drops"] == 1, "the store counts the connection it dropped"


@pytest.mark.parametrize("fault", ["slowdown_rate", "drop_rate"])
def test_standard_retries_lose_and_duplicate_nothing(store, s3, fault):
    objects = put_objects(s3, "retry", 12)
    store.set(**{fault: 0.25, "seed": 3})
    retrying = store.client(retry_mode="standard", max_attempts=10)
    keys = list_keys(retrying, "retry", page_size=3)
    bodies = {key: retrying.get_object(Bucket="retry", Key=key)["Body"].read() for key in keys}
    retrying.close()
    stats = store.stats()
    assert keys == sorted(objects), "every key listed once, in order, across pages that were retried"
    assert bodies == objects, "every object arrives with its own bytes"
    assert stats["slowdowns"] + stats["drops"] > 0, f"the run met failures, and retried them: {stats}"


def test_same_seed_same_failures(store, s3):
    keys = list(put_objects(s3, "seeded", 20))
    no_retries = store.client(retry_mode=None)

    def outcomes(seed: int) -> list[str]:
        store.set(slowdown_rate=0.3, drop_rate=0.2, cut_rate=0.3, seed=seed)  # a seed restarts the numbering
        seen = []
        for key in keys:
            try:
                no_retries.get_object(Bucket="seeded", Key=key)["Body"].read()
                seen.append("ok")
            except ClientError:
                seen.append("slowdown")
            except ResponseStreamingError:
                seen.append("cut")
            except HTTPClientError:
                seen.append("drop")
        return seen

    first, again, other = outcomes(7), outcomes(7), outcomes(8)
    no_retries.close()
    assert first == again, "the same seed gives the same failures, request by request"
    assert first != other, "another seed gives other failures"
    assert {"ok", "slowdown", "drop", "cut"} <= set(first + other), "all four outcomes occur"


def test_fates_are_seeded_and_each_rate_keeps_the_others_sequence():
    base = StoreSettings(latency_s=0.05, latency_sigma=1.0, slowdown_rate=0.2, drop_rate=0.1, cut_rate=0.2, seed=3)
    fates = [draw_fate(base, n) for n in range(400)]
    assert fates == [draw_fate(base, n) for n in range(400)], "the same seed and number, the same fate"
    more_cuts = [draw_fate(dataclasses.replace(base, cut_rate=0.6), n) for n in range(400)]
    assert [f.drop for f in fates] == [f.drop for f in more_cuts], "more cuts leave the drops where they were"
    assert [f.latency_s for f in fates] == [f.latency_s for f in more_cuts], "and the latencies"
    assert sum(f.cut_at is not None for f in more_cuts) > sum(f.cut_at is not None for f in fates)
    assert all(0.1 <= f.cut_at <= 0.9 for f in fates if f.cut_at is not None), "a cut falls inside the body"
    flat = [draw_fate(dataclasses.replace(base, latency_sigma=0.0), n).latency_s for n in range(10)]
    assert flat == [0.05] * 10, "no spread: every request waits the median"


def test_latency_tail_is_lognormal_around_the_median():
    settings = StoreSettings(latency_s=0.05, latency_sigma=1.0, seed=0)
    latencies = sorted(draw_fate(settings, n).latency_s for n in range(20000))
    median, p99 = latencies[10000], latencies[19800]
    assert median == pytest.approx(0.05, rel=0.05), f"latency_s is the median, got {median:.4f}"
    assert p99 / median == pytest.approx(math.exp(2.326), rel=0.1), f"at sigma 1 the 99th percentile is ~10x: {p99 / median:.1f}"


def test_each_request_waits_its_drawn_latency(store, s3):
    keys = list(put_objects(s3, "tail", 8))
    store.set(latency_s=0.02, latency_sigma=1.0, seed=5)
    store.reset_stats()
    drawn = [draw_fate(store.settings, n).latency_s for n in range(len(keys))]
    for key, latency_s in zip(keys, drawn):  # one at a time: request n is the n-th GET
        start = time.perf_counter()
        s3.get_object(Bucket="tail", Key=key)["Body"].read()
        elapsed_s = time.perf_counter() - start
        assert elapsed_s >= latency_s, f"request waited {elapsed_s:.4f} s, less than its drawn {latency_s:.4f} s"
    assert max(drawn) > 2 * min(drawn), f"the draws spread: {drawn}"


def test_token_bucket_lets_a_rate_through_and_refuses_the_rest():
    now = [0.0]
    bucket = TokenBucket(rate_per_s=10, burst=3, clock=lambda: now[0])
    assert [bucket.take() for _ in range(5)] == [True, True, True, False, False], "a full bucket: the burst, then no"
    now[0] = 0.1  # one token's worth of time
    assert [bucket.take(), bucket.take()] == [True, False], "refilled at the rate"
    now[0] = 10.0
    assert sum(bucket.take() for _ in range(10)) == 3, "saved up to the burst, not more"
    now[0] = 12.0
    got = 0
    for _ in range(1000):  # a client that keeps knocking, 1 ms apart: refused requests take no token
        now[0] += 0.001
        got += bucket.take()
    assert 3 + 10 - 1 <= got <= 3 + 10, f"a second at 10 per second, after a full bucket of 3: {got}"
    for bad in [dict(rate_per_s=0, burst=1), dict(rate_per_s=1, burst=0.5)]:
        with pytest.raises(ValueError):
            TokenBucket(**bad)


def test_rate_limit_answers_slowdown_at_once_not_later(store, s3):
    put_objects(s3, "rate", 1)
    store.set(requests_per_s=5, burst=2)
    store.reset_stats()
    no_retries = store.client(retry_mode=None)
    ok = refused = 0
    start = time.perf_counter()
    for _ in range(30):
        try:
            no_retries.head_object(Bucket="rate", Key="k00")
            ok += 1
        except ClientError as error:
            assert error.response["ResponseMetadata"]["HTTPStatusCode"] == 503, "refused with a 503"
            refused += 1
    elapsed_s = time.perf_counter() - start
    with pytest.raises(ClientError) as slow:
        for _ in range(10):
            no_retries.get_object(Bucket="rate", Key="k00")["Body"].read()
    no_retries.close()
    assert slow.value.response["Error"]["Code"] == "SlowDown", "a refused GET carries S3's SlowDown code"
    assert refused > 0 and store.stats()["slowdowns"] >= refused, f"beyond the rate, SlowDown: {ok} ok, {refused} refused"
    assert 2 <= ok <= 2 + 5 * elapsed_s + 1, f"{ok} served in {elapsed_s:.2f} s at 5/s with a burst of 2"
    assert store.stats()["peak_in_flight"] == 1, "refused at once, never queued"


def test_cut_body_fails_the_read_and_is_not_retried_by_boto3(store, s3):
    size = 20000
    s3.create_bucket(Bucket="cut")
    s3.put_object(Bucket="cut", Key="blob", Body=os.urandom(size))
    store.set(cut_rate=1.0)
    store.reset_stats()
    retrying = store.client(retry_mode="standard", max_attempts=5)
    answer = retrying.get_object(Bucket="cut", Key="blob")
    assert answer["ContentLength"] == size, "the headers arrive whole: the status, the announced size"
    with pytest.raises(ResponseStreamingError, match="IncompleteRead"):
        answer["Body"].read()
    stats = store.stats()
    assert stats["cuts"] == 1 and stats["requests"] == 1, f"one request, cut, never retried by boto3: {stats}"
    assert 0.1 * size <= stats["bytes_sent"] <= 0.9 * size, f"cut part-way: {stats['bytes_sent']} of {size} bytes"
    assert retrying.head_object(Bucket="cut", Key="blob")["ContentLength"] == size, "a HEAD has no body to cut"
    with pytest.raises(ClientError, match="NoSuchKey"):
        retrying.get_object(Bucket="cut", Key="missing")
    retrying.close()
    assert store.stats()["cuts"] == 1, "only successful answers with a body are cut"


def test_settings_are_checked():
    for bad in [dict(latency_s=-1), dict(slowdown_rate=1.5), dict(drop_rate=-0.1),
                dict(max_concurrent=0), dict(bandwidth_bytes_per_s=0), dict(latency_sigma=-0.5),
                dict(requests_per_s=0), dict(burst=0.5), dict(cut_rate=2.0)]:
        with pytest.raises(ValueError):
            StoreSettings(**bad)
    with pytest.raises(ValueError, match="retry_mode"):
        make_client("http://127.0.0.1:9", retry_mode="sometimes")


# --------------------------------------------------------------------------- life cycle


def _port_accepts(port: int) -> bool:
    with socket.socket() as probe:
        probe.settimeout(2)
        return probe.connect_ex(("127.0.0.1", port)) == 0


def test_stop_leaves_no_thread_and_frees_the_port():
    before = set(threading.enumerate())
    with ObjectStore(latency_s=0.01) as store:
        client = store.client(max_pool_connections=4)
        put_objects(client, "bye", 4)
        with ThreadPoolExecutor(4) as pool:
            list(pool.map(lambda key: client.get_object(Bucket="bye", Key=key), ["k00", "k01", "k02", "k03"]))
        client.close()
        port = store.port
        assert _port_accepts(port), "the store listens while running"
        assert set(threading.enumerate()) - before, "the store runs in a thread of this process"
    left = {t for t in set(threading.enumerate()) - before if t.is_alive()}  # threads of earlier tests may end meanwhile
    assert not left, f"threads left behind: {left}"
    assert not _port_accepts(port), "nothing listens on the port after stop"
    with socket.socket() as again:
        again.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        again.bind(("127.0.0.1", port))  # raises if the port were still held


def test_stop_ends_a_request_that_is_still_waiting():
    before = set(threading.enumerate())
    outcome = []
    store = ObjectStore(latency_s=60.0).start()
    client = store.client(retry_mode=None)

    def slow_call():
        try:
            client.list_buckets()
            outcome.append("answered")
        except Exception as e:  # noqa: BLE001 - any end will do; hanging is the failure
            outcome.append(type(e).__name__)

    caller = threading.Thread(target=slow_call)
    caller.start()
    for _ in range(200):  # until the request waits inside the store (at most ~10 s)
        if store.stats()["in_flight"]:
            break
        time.sleep(0.05)
    store.stop()
    caller.join(timeout=20)
    client.close()
    assert not caller.is_alive() and outcome, "a request waiting out a 60 s latency ends when the store stops"
    assert not {t for t in set(threading.enumerate()) - before if t.is_alive()}, "no thread left behind"


def test_one_store_per_process():
    with ObjectStore() as first:
        with pytest.raises(RuntimeError, match="already runs"):
            ObjectStore().start()
        assert first.running, "the first store keeps running"
    with ObjectStore() as later:
        assert later.running, "after the first stops, another can start"


# --------------------------------------------------------------------------- filling


def test_fill_from_tree_keys_and_bytes(s3, tiny_lfw):
    keys = fill_from_tree(s3, "lfw", tiny_lfw, progress=False)
    expected = [f"{p.parent.name}/{p.name}" for _, p in list_images(tiny_lfw)]
    assert keys == expected, "one key per image, <Person>/<file>, sorted by person then file"
    assert keys == sorted(keys), "sorted keys: the same order as S3 lists them"
    assert list_keys(s3, "lfw") == keys, "the bucket holds exactly those keys"
    assert len(keys) == 8, "the tiny tree's 8 images (hidden folders and non-images left out)"
    for key in keys:
        assert s3.get_object(Bucket="lfw", Key=key)["Body"].read() == (tiny_lfw / key).read_bytes(), \
            f"{key} holds the file's bytes"
    assert fill_from_tree(s3, "lfw2", tiny_lfw, limit=2, progress=False) == keys[:2], "limit keeps the first images"


def test_shards_hold_every_image_once(s3, tiny_lfw):
    shard_keys = pack_shards(s3, "shards", tiny_lfw, images_per_shard=4, progress=False)
    n_images = len(list_images(tiny_lfw))
    assert len(shard_keys) == math.ceil(n_images / 4), "ceil(images / images_per_shard) shards"
    unpacked = []
    for key in shard_keys:
        unpacked += read_shard(s3.get_object(Bucket="shards", Key=key)["Body"].read())
    assert [name for name, _ in unpacked] == [f"{p.parent.name}/{p.name}" for _, p in list_images(tiny_lfw)], \
        "each image once, in order, under its key"
    assert all(data == (tiny_lfw / name).read_bytes() for name, data in unpacked), "each member holds the file's bytes"
    again = pack_shards(s3, "shards-again", tiny_lfw, images_per_shard=4, progress=False)
    first_etag = s3.head_object(Bucket="shards", Key=shard_keys[0])["ETag"]
    assert s3.head_object(Bucket="shards-again", Key=again[0])["ETag"] == first_etag, \
        "packing twice gives the same bytes"


def test_missing_tree_says_how_to_make_it(s3, tmp_path):
    with pytest.raises(FileNotFoundError, match="make data"):
        fill_from_tree(s3, "lfw", tmp_path / "absent", progress=False)


# --------------------------------------------------------------------------- command line


@pytest.mark.skipif(sys.platform == "win32", reason="sends SIGINT, as Ctrl-C does")
def test_command_line_serves_the_tree_until_ctrl_c(tiny_lfw):
    command = [sys.executable, "-m", "feedgpu.objectstore", "--root", str(tiny_lfw), "--port", "0",
               "--latency-ms", "10", "--images-per-shard", "3"]
    proc = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    lines: queue.Queue[str] = queue.Queue()
    reader = threading.Thread(target=lambda: [lines.put(line) for line in proc.stdout], daemon=True)
    reader.start()
    text = ""
    try:
        deadline = time.monotonic() + 60
        while "Press Ctrl-C" not in text and time.monotonic() < deadline:  # until the store is ready
            try:
                text += lines.get(timeout=1)
            except queue.Empty:
                if proc.poll() is not None:
                    break
        assert "Press Ctrl-C" in text, f"the store starts and says how to stop it:\n{text}"
        endpoint = next(word for word in text.split() if word.startswith("http://127.0.0.1:")).rstrip(":,")
        assert 'Key="Bob_B/Bob_B_0001.jpg"' in text or "boto3.client" in text, f"an example snippet:\n{text}"
        client = make_client(endpoint)
        key = "Bob_B/Bob_B_0001.jpg"
        assert client.get_object(Bucket="lfw", Key=key)["Body"].read() == (tiny_lfw / key).read_bytes(), \
            "the image is served under its key"
        assert len(list_keys(client, "lfw-shards")) == 3, "8 images in shards of 3 make 3 shards"
        client.close()
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    reader.join(timeout=10)
    out = "".join(lines.queue)
    assert proc.returncode == 0, f"Ctrl-C stops the store cleanly; exit status {proc.returncode}"
    assert "Stopping" in out, f"it says it stops: {out}"
