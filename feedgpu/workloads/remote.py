"""Datasets that read objects from an S3 store, for DataLoader workers, and the fetchers behind them.

Five ways to feed a loader from a store whose every request takes a latency::

    S3Dataset            one GET per item, one after another      in flight: 1 per worker
    ThreadedS3Dataset    a batch's GETs from a pool of threads    in flight: threads per worker
    CachedS3Dataset      as above, bytes kept on local disk       epoch 2 on: no GET at all
    S3ShardDataset       one GET per shard of many items          requests: items / shard size
    LocalFileDataset     files downloaded before training         (download_objects fills them)

An item is ``(key, data)``: the object's key and its bytes, undecoded (decoding is CPU
work, notebook 04's subject; here the cost is the waiting). :func:`collate_objects` makes
a batch ``(keys, datas)`` of two lists.

A boto3 client holds sockets and cannot be pickled, so no dataset carries one to its
workers: each process makes its own client, the first time it needs one, from the
store's ``endpoint_url`` (``feedgpu.objectstore.make_client``). Everything here is
importable by name, so workers started with *spawn* (macOS, Windows) find it.

The fetchers work anywhere, in a worker or in the main process:

* :func:`fetch_all`: call a function on every key from a pool of threads; results in the
  keys' order;
* :func:`fetch_with_retries`: call it again after a retryable error (:func:`is_retryable`),
  waiting longer each time;
* :class:`Hedged`: call it a second time when the first call is late, and keep the first
  answer (against the slow tail of a store's latency);
* :func:`fetch_objects`: GET many objects with a pool and report what came back, what
  failed and how long it took (what the notebook measures goodput with);
* :func:`download_objects`: GET them to files ("download, then read").
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from torch.utils.data import Dataset, IterableDataset, get_worker_info

from ..base.checks import check_int, check_seconds
from ..base.files import write_atomically

__all__ = [
    "RETRYABLE_CODES",
    "RETRYABLE_STATUSES",
    "is_retryable",
    "fetch_all",
    "fetch_with_retries",
    "Hedged",
    "FetchReport",
    "fetch_objects",
    "download_objects",
    "collate_objects",
    "S3Dataset",
    "ThreadedS3Dataset",
    "CachedS3Dataset",
    "S3ShardDataset",
    "LocalFileDataset",
]

K = TypeVar("K")
T = TypeVar("T")

#: HTTP statuses worth another attempt: what botocore's ``standard`` mode retries (1.44:
#: ``botocore/retries/standard.py``, ``TransientRetryableChecker._TRANSIENT_STATUS_CODES``
#: 500, 502, 503, 504, and ``ThrottlingStatusCodeChecker`` 429). Not 501 (Not Implemented),
#: nor any 4xx but 429: asking again gets the same answer.
RETRYABLE_STATUSES = frozenset({429, 500, 502, 503, 504})

#: Error codes worth another attempt, as botocore's ``standard`` mode lists them (same
#: file: the transient codes and ``ThrottledRetryableChecker._THROTTLED_ERROR_CODES``).
#: ``SlowDown`` is S3's; ``NoSuchKey`` or ``AccessDenied`` are not here.
RETRYABLE_CODES = frozenset({
    "RequestTimeout", "RequestTimeoutException", "PriorRequestNotComplete",
    "Throttling", "ThrottlingException", "ThrottledException", "RequestThrottledException",
    "TooManyRequestsException", "ProvisionedThroughputExceededException", "TransactionInProgressException",
    "RequestLimitExceeded", "BandwidthLimitExceeded", "LimitExceededException", "RequestThrottled",
    "SlowDown", "EC2ThrottledException",
})


# --------------------------------------------------------------------------- fetchers


def is_retryable(error: BaseException) -> bool:
    """Whether another attempt of the same request (and the read of its body) may succeed.

    True for:

    * an S3 answer with a status in :data:`RETRYABLE_STATUSES` (``503 SlowDown``, 500,
      502, 504, 429) or a code in :data:`RETRYABLE_CODES`;
    * a connection that failed or broke: botocore's ``ConnectionError`` and
      ``HTTPClientError`` (``ConnectionClosedError``, ``ReadTimeoutError``, and
      ``ResponseStreamingError``, what ``Body.read()`` raises when the connection is cut
      part-way through the body);
    * ``IncompleteReadError``: a body shorter than its ``Content-Length``.

    That is botocore's ``standard`` mode for the request, plus the errors of reading the
    body, which botocore's retries never see (the body is read after ``get_object``
    returns) and which boto3's own downloads retry (s3transfer's
    ``S3_RETRYABLE_DOWNLOAD_ERRORS``). False for everything else, such as ``NoSuchKey``:
    asking again gives the same answer.
    """
    from botocore.exceptions import ClientError, ConnectionError, HTTPClientError, IncompleteReadError

    if isinstance(error, ClientError):
        code = error.response.get("Error", {}).get("Code", "")
        status = error.response.get("ResponseMetadata", {}).get("HTTPStatusCode") or 0
        return code in RETRYABLE_CODES or status in RETRYABLE_STATUSES
    return isinstance(error, (ConnectionError, HTTPClientError, IncompleteReadError))


def fetch_all(keys: Iterable[K], fetch_one: Callable[[K], T], threads: int) -> list[T]:
    """``[fetch_one(key) for key in keys]``, with up to ``threads`` calls running at once.

    Args:
        keys: what to fetch.
        fetch_one: fetches one key; called exactly once per key, from the pool's threads.
        threads: calls in flight at once (>= 1); 1 is the plain loop.

    Returns:
        The results in the order of ``keys`` (not in the order they finished).

    Raises:
        ValueError: ``threads`` < 1.
        Whatever ``fetch_one`` raised, for the first key (in order) that failed.
    """
    threads = check_int("threads", threads, minimum=1)
    keys = list(keys)
    if threads == 1 or len(keys) <= 1:
        return [fetch_one(key) for key in keys]
    with ThreadPoolExecutor(max_workers=min(threads, len(keys)), thread_name_prefix="fetch") as pool:
        return list(pool.map(fetch_one, keys))


def fetch_with_retries(fetch_one: Callable[[str], T], key: str, max_attempts: int = 4,
                       base_delay_s: float = 0.05, sleep: Callable[[float], Any] = time.sleep) -> T:
    """``fetch_one(key)``, tried again after a retryable error, with exponential backoff.

    Attempt ``k`` (1, 2, ...) that fails with an error for which :func:`is_retryable` is
    true is followed by a wait of ``base_delay_s * 2 ** (k - 1)`` seconds and attempt
    ``k + 1``, up to ``max_attempts`` attempts in all. No wait after the last attempt.

    Args:
        fetch_one: fetches one key.
        key: the key.
        max_attempts: attempts in all, the first included (>= 1).
        base_delay_s: the wait after the first failed attempt (>= 0).
        sleep: how to wait (``time.sleep``; a test passes a recorder).

    Returns:
        What the first successful attempt returned.

    Raises:
        The error of the last attempt when all ``max_attempts`` failed; a non-retryable
        error at once; ``ValueError`` for ``max_attempts`` < 1 or ``base_delay_s`` < 0.
    """
    max_attempts = check_int("max_attempts", max_attempts, minimum=1)
    base_delay_s = check_seconds("base_delay_s", base_delay_s)
    for attempt in range(1, max_attempts + 1):
        try:
            return fetch_one(key)
        except Exception as error:
            if attempt == max_attempts or not is_retryable(error):
                raise
            sleep(base_delay_s * 2 ** (attempt - 1))
    raise AssertionError("unreachable")  # pragma: no cover - the loop returns or raises


class Hedged:
    """``fetch_one`` with a hedge against the slow tail: a second request when the first is late.

    Calling ``hedged(key)`` sends ``fetch_one(key)``; if it has not returned after
    ``after_s``, a second ``fetch_one(key)`` goes out, and whichever returns first wins
    (the other finishes in the background and is thrown away). A request that is slow by
    bad luck (a busy server, a lost packet) is then no longer the one a whole batch waits
    for, for the price of one more request per late one: at ``after_s`` = the 95th
    percentile of the time per request, 5% more requests. This is Dean and Barroso's
    "hedged request" (The Tail at Scale, 2013). Use it where ``fetch_one`` would go::

        with Hedged(get, after_s=0.1) as hedged:
            batch = fetch_all(keys, hedged, 16)

    Args:
        fetch_one: fetches one key; safe to call twice for the same key at once (a GET is).
        after_s: seconds to wait for the first answer before hedging (> 0).
        max_in_flight: threads of the pool that runs the calls (>= 2): twice the calls
            you make at once is enough.

    Attributes:
        calls: keys asked for; ``hedges``: second requests sent.

    Raises (from a call):
        The error of the first call to fail when every call sent for that key failed.
    """

    def __init__(self, fetch_one: Callable[[K], T], after_s: float, max_in_flight: int = 64) -> None:
        after_s = check_seconds("after_s", after_s)
        if after_s <= 0:
            raise ValueError(f"after_s must be > 0 seconds, got {after_s!r}")
        self.fetch_one = fetch_one
        self.after_s = after_s
        self.calls = 0
        self.hedges = 0
        self._lock = threading.Lock()
        self._pool = ThreadPoolExecutor(max_workers=check_int("max_in_flight", max_in_flight, minimum=2),
                                        thread_name_prefix="hedge")

    def __call__(self, key: K) -> T:
        from concurrent.futures import FIRST_COMPLETED, wait

        with self._lock:
            self.calls += 1
        first = self._pool.submit(self.fetch_one, key)
        done, _ = wait([first], timeout=self.after_s)
        if done:
            return first.result()
        with self._lock:
            self.hedges += 1
        pending = {first, self._pool.submit(self.fetch_one, key)}
        errors = []
        while pending:
            done, pending = wait(pending, return_when=FIRST_COMPLETED)
            for future in done:
                if future.exception() is None:
                    return future.result()
                errors.append(future.exception())
        raise errors[0]

    def close(self) -> None:
        """Wait for the requests still running (the losers of a hedge), then free the threads."""
        self._pool.shutdown(wait=True)

    def __enter__(self) -> Hedged:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def _get_bytes(client: Any, bucket: str, key: str) -> bytes:
    return client.get_object(Bucket=bucket, Key=key)["Body"].read()


@dataclass
class FetchReport:
    """What :func:`fetch_objects` got.

    Attributes:
        keys: the keys asked for, in order.
        data: per key, its bytes, or ``None`` when it failed.
        errors: key -> the error that made it fail (after the client's own retries).
        seconds: wall time of the whole fetch.
    """

    keys: list[str]
    data: list[bytes | None]
    errors: dict[str, str] = field(default_factory=dict)
    seconds: float = 0.0

    @property
    def delivered(self) -> int:
        """Objects that came back."""
        return sum(d is not None for d in self.data)

    @property
    def goodput(self) -> float:
        """Objects delivered per second."""
        return self.delivered / self.seconds if self.seconds > 0 else float("nan")


def fetch_objects(client: Any, bucket: str, keys: Sequence[str], threads: int = 8) -> FetchReport:
    """GET ``keys`` with a pool of ``threads``; a failure is recorded, not raised.

    The client's retry mode decides what is retried and how often; an error that is left
    after the client's retries lands in :attr:`FetchReport.errors`, and that object's data
    is ``None`` (a lost sample, if a training loop skipped it).
    """
    keys = list(keys)
    errors: dict[str, str] = {}

    def one(key: str) -> bytes | None:
        try:
            return _get_bytes(client, bucket, key)
        except Exception as error:  # noqa: BLE001 - reported, not swallowed
            errors[key] = f"{type(error).__name__}: {error}"
            return None

    start = time.perf_counter()
    data = fetch_all(keys, one, threads)
    return FetchReport(keys, data, errors, time.perf_counter() - start)


def _local_path(root: Path, key: str) -> Path:
    """Where ``key`` lives under ``root``; refuses keys that would leave it."""
    path = (root / key).resolve()
    if not path.is_relative_to(root.resolve()):
        raise ValueError(f"key {key!r} points outside {root}")
    return path


def download_objects(endpoint_url: str, bucket: str, keys: Sequence[str], dest: str | os.PathLike,
                     threads: int = 8, retry_mode: str | None = "standard") -> list[Path]:
    """GET every key into a file ``dest/<key>``, ``threads`` at a time ("download, then read").

    Args:
        endpoint_url: the store (``store.endpoint_url``).
        bucket: the bucket.
        keys: the objects.
        dest: the folder (created); a key's slashes become subfolders.
        threads: GETs in flight (>= 1).
        retry_mode: the client's retry mode (see ``feedgpu.objectstore.make_client``).

    Returns:
        The files, in the order of ``keys``.
    """
    from feedgpu.objectstore import make_client

    threads = check_int("threads", threads, minimum=1)
    root = Path(dest)
    client = make_client(endpoint_url, retry_mode=retry_mode, max_pool_connections=max(10, threads))

    def one(key: str) -> Path:
        path = _local_path(root, key)
        write_atomically(path, _get_bytes(client, bucket, key))
        return path

    try:
        return fetch_all(keys, one, threads)
    finally:
        client.close()


def collate_objects(batch: Sequence[tuple[str, bytes]]) -> tuple[list[str], list[bytes]]:
    """``[(key, data), ...]`` -> ``(keys, datas)``: two lists, in the batch's order."""
    return [key for key, _ in batch], [data for _, data in batch]


# --------------------------------------------------------------------------- datasets


#: Held while a process makes its client. A fresh one in every forked child: a copy of a
#: lock that another thread of the parent held at the fork would never open.
_CLIENT_LOCK = threading.Lock()


def _new_client_lock() -> None:
    global _CLIENT_LOCK
    _CLIENT_LOCK = threading.Lock()


if hasattr(os, "register_at_fork"):  # not on Windows, which never forks
    os.register_at_fork(after_in_child=_new_client_lock)


class _ClientPerProcess:
    """Makes one boto3 client per process, the first time one is asked for.

    Pickled (to a *spawn* worker) it travels without its client; copied by *fork* it still
    holds the parent's, which the process id tells apart, and makes a new one. The client
    and the process it belongs to are kept as one pair, so a thread never sees one without
    the other.
    """

    def __init__(self, endpoint_url: str, retry_mode: str | None, max_attempts: int | None,
                 max_pool_connections: int) -> None:
        self.endpoint_url = endpoint_url
        self.retry_mode = retry_mode
        self.max_attempts = max_attempts
        self.max_pool_connections = max_pool_connections
        self._owned: tuple[int, Any] | None = None  # (process id, its client)

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_owned": None}

    @property
    def client(self) -> Any:
        """This process's client, if it has made one (else ``None``)."""
        owned = self._owned
        return owned[1] if owned is not None and owned[0] == os.getpid() else None

    def get(self) -> Any:
        client = self.client
        if client is not None:
            return client
        with _CLIENT_LOCK:  # the threads of a batch ask at once; one client is made
            owned = self._owned
            if owned is None or owned[0] != os.getpid():
                from feedgpu.objectstore import make_client

                owned = (os.getpid(), make_client(self.endpoint_url, retry_mode=self.retry_mode,
                                                  max_attempts=self.max_attempts,
                                                  max_pool_connections=self.max_pool_connections))
                self._owned = owned
            return owned[1]


class S3Dataset(Dataset):
    """One object per item, fetched with one GET when the item is asked for.

    Args:
        endpoint_url: the store (``store.endpoint_url``); each process makes its client.
        bucket: the bucket.
        keys: the objects, one per item, in item order.
        retry_mode, max_attempts: the client's retries (``feedgpu.objectstore.make_client``).

    ``dataset[i]`` returns ``(keys[i], bytes of that object)``.
    """

    #: connections each process's client may keep; the threaded subclass needs one per thread
    _pool_connections = 10

    def __init__(self, endpoint_url: str, bucket: str, keys: Sequence[str], *,
                 retry_mode: str | None = "standard", max_attempts: int | None = None) -> None:
        if not keys:
            raise ValueError("keys is empty: a dataset needs at least one object")
        self.endpoint_url = endpoint_url
        self.bucket = bucket
        self.keys = list(keys)
        self._clients = _ClientPerProcess(endpoint_url, retry_mode, max_attempts, self._pool_connections)

    def __len__(self) -> int:
        return len(self.keys)

    def fetch(self, key: str) -> bytes:
        """The bytes of one object (one GET)."""
        return _get_bytes(self._clients.get(), self.bucket, key)

    def __getitem__(self, index: int) -> tuple[str, bytes]:
        key = self.keys[index]
        return key, self.fetch(key)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({len(self)} objects in s3://{self.bucket} at {self.endpoint_url})"


class ThreadedS3Dataset(S3Dataset):
    """An :class:`S3Dataset` that fetches a whole batch at once, from a pool of threads.

    The DataLoader calls ``__getitems__(indices)`` with a batch's indices when a dataset has
    it (PyTorch 2.x); here ``threads`` GETs run at once, so a worker keeps ``threads``
    requests in flight instead of one. The pool lives for one batch: no thread outlives it.

    Args:
        threads: GETs in flight per process (>= 1).
        Others as :class:`S3Dataset`.
    """

    def __init__(self, endpoint_url: str, bucket: str, keys: Sequence[str], *, threads: int = 8,
                 retry_mode: str | None = "standard", max_attempts: int | None = None) -> None:
        self.threads = check_int("threads", threads, minimum=1)
        self._pool_connections = max(10, self.threads)  # else urllib3 drops (and warns about) connections
        super().__init__(endpoint_url, bucket, keys, retry_mode=retry_mode, max_attempts=max_attempts)

    def __getitems__(self, indices: Sequence[int]) -> list[tuple[str, bytes]]:
        return fetch_all(indices, self.__getitem__, self.threads)

    def __repr__(self) -> str:
        return super().__repr__()[:-1] + f", {self.threads} threads)"


class CachedS3Dataset(ThreadedS3Dataset):
    """A :class:`ThreadedS3Dataset` that keeps every object it fetched in a local folder.

    The first epoch fetches from the store and writes each object to ``cache_dir/<key>``;
    later epochs (in any worker: the folder is shared) read the file instead, with no
    request at all. Files are written whole or not at all, so a worker never reads half
    of one.

    Args:
        cache_dir: the folder (created when needed). Delete it to empty the cache.
        threads: GETs in flight per process (1 for one at a time).
        Others as :class:`S3Dataset`.
    """

    def __init__(self, endpoint_url: str, bucket: str, keys: Sequence[str], cache_dir: str | os.PathLike, *,
                 threads: int = 8, retry_mode: str | None = "standard", max_attempts: int | None = None) -> None:
        super().__init__(endpoint_url, bucket, keys, threads=threads, retry_mode=retry_mode,
                         max_attempts=max_attempts)
        self.cache_dir = Path(cache_dir)

    def fetch(self, key: str) -> bytes:
        path = _local_path(self.cache_dir, key)
        try:
            return path.read_bytes()
        except FileNotFoundError:
            data = super().fetch(key)
            write_atomically(path, data)
            return data

    def cached(self) -> int:
        """How many of the dataset's objects are in the cache now."""
        return sum(_local_path(self.cache_dir, key).is_file() for key in self.keys)


class LocalFileDataset(Dataset):
    """Objects already on local disk, as :func:`download_objects` left them.

    ``dataset[i]`` returns ``(keys[i], bytes of root/keys[i])``, exactly like the remote
    datasets, so the same loop runs on either.
    """

    def __init__(self, root: str | os.PathLike, keys: Sequence[str]) -> None:
        if not keys:
            raise ValueError("keys is empty: a dataset needs at least one object")
        self.root = Path(root)
        self.keys = list(keys)

    def __len__(self) -> int:
        return len(self.keys)

    def __getitem__(self, index: int) -> tuple[str, bytes]:
        key = self.keys[index]
        return key, _local_path(self.root, key).read_bytes()

    def __repr__(self) -> str:
        return f"LocalFileDataset({len(self)} files under {self.root})"


class S3ShardDataset(IterableDataset):
    """Items packed in tar shards (``feedgpu.objectstore.pack_shards``): one GET per shard.

    Each worker takes every ``num_workers``-th shard (worker ``i`` takes shards ``i``,
    ``i + n``, ...), GETs it whole and yields its items in order; so every item comes
    once per epoch, and a shard's items come in a run. Items are ``(key, data)`` as in
    :class:`S3Dataset`. Order across workers is the DataLoader's round robin; shuffle the
    shard list per epoch (and items within a buffer) for training.

    Args:
        endpoint_url, bucket: the store and bucket.
        shard_keys: the shards' keys (what ``pack_shards`` returned).
        retry_mode, max_attempts: the client's retries.
    """

    def __init__(self, endpoint_url: str, bucket: str, shard_keys: Sequence[str], *,
                 retry_mode: str | None = "standard", max_attempts: int | None = None) -> None:
        if not shard_keys:
            raise ValueError("shard_keys is empty: a dataset needs at least one shard")
        self.endpoint_url = endpoint_url
        self.bucket = bucket
        self.shard_keys = list(shard_keys)
        self._clients = _ClientPerProcess(endpoint_url, retry_mode, max_attempts, 10)

    def my_shards(self) -> list[str]:
        """The shards this process reads: all of them, or this worker's share."""
        info = get_worker_info()
        if info is None:
            return list(self.shard_keys)
        return self.shard_keys[info.id::info.num_workers]

    def __iter__(self) -> Iterator[tuple[str, bytes]]:
        from feedgpu.objectstore import read_shard

        client = self._clients.get()
        for shard in self.my_shards():
            yield from read_shard(_get_bytes(client, self.bucket, shard))

    def __repr__(self) -> str:
        return f"S3ShardDataset({len(self.shard_keys)} shards in s3://{self.bucket} at {self.endpoint_url})"
