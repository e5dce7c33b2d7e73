"""The object store itself: moto's S3 server behind a WSGI middleware of ours that injects cost and failure.

One request goes through the middleware (:class:`FaultInjector`) in this order::

    arrive ─► draw its fate (seeded)  ─► a token of the rate limit? (requests_per_s)
          ─► wait for a slot (max_concurrent) ─► time to first byte (latency_s, with a tail: latency_sigma)
          ─► dropped connection?  (drop_rate)                    ─► the client sees a connection error
          ─► 503 SlowDown?        (no token, or slowdown_rate)    ─► S3's XML error body
          ─► moto answers ─► the body leaves in paced chunks (bandwidth_bytes_per_s)
          ─► cut part-way?        (cut_rate)                     ─► the client's read() fails
          ─► slot freed

What each request meets is drawn from ``random.Random(f"{seed}/{n}")`` for the ``n``-th
request since the store started (or since :meth:`ObjectStore.reset_stats`), so one
client issuing the same requests sees the same faults in every run
(:mod:`~feedgpu.objectstore.faults`). Only the rate limit depends on time: it refuses
what comes too fast, as S3 does.
"""

from __future__ import annotations

import dataclasses
import errno
import logging
import socket
import threading
import time
import urllib.request
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from .faults import Fate, TokenBucket, default_burst, draw_fate

logger = logging.getLogger(__name__)

__all__ = ["StoreSettings", "FaultInjector", "ObjectStore", "make_client", "SLOWDOWN_XML", "REGION"]

#: The region every client and bucket of the course uses.
REGION = "us-east-1"

#: Credentials moto accepts (it checks none); real ones must never be needed.
DUMMY_CREDENTIALS = {"aws_access_key_id": "feedgpu", "aws_secret_access_key": "feedgpu"}

#: The body of S3's answer when a client sends requests faster than a prefix allows.
SLOWDOWN_XML = (
    '<?xml version="1.0" encoding="UTF-8"?>\n'
    "<Error><Code>SlowDown</Code><Message>Please reduce your request rate.</Message>"
    "<RequestId>{request_id}</RequestId><HostId>feedgpu-objectstore</HostId></Error>"
)

#: Paths that go straight to moto, never delayed or failed (its reset and dashboard).
_CONTROL_PREFIX = "/moto-api/"

#: A handler thread gives up on a silent client after this long; stop() waits at most this
#: long for the handler threads it ends.
_SOCKET_TIMEOUT_S = 5.0


@dataclasses.dataclass(frozen=True)
class StoreSettings:
    """What the middleware injects; every field can be changed while the store runs.

    Attributes:
        latency_s: time to first byte of a request, in seconds: the median, when
            ``latency_sigma`` > 0.
        latency_sigma: the tail of the time to first byte: each request draws
            ``latency_s * exp(latency_sigma * z)``, ``z`` standard normal (log-normal);
            0 (default) for the same latency every time. At 1, one request in 100 takes
            over 10 times the median.
        bandwidth_bytes_per_s: bytes per second for each response body (each request has
            its own connection, so this is the bandwidth per connection); ``None`` for no limit.
        max_concurrent: requests served at once; more requests *wait* for a slot (in
            arrival order, roughly), as behind a server with a fixed pool of workers.
            ``None`` for no limit. This is the course's model of a busy server; S3
            itself does not queue: it refuses the excess (``requests_per_s``).
        requests_per_s: S3's request-rate limit (per partitioned prefix; here one for the
            whole store): a token bucket that refills at this rate, and a request that
            finds it empty is answered ``503 SlowDown`` at once. ``None`` for no limit.
        burst: the requests that the rate limit lets through at once after a pause
            (the bucket's size); ``None`` for a tenth of a second's worth, at least 1.
        slowdown_rate: probability that a request is answered ``503 SlowDown``, whatever
            the rate (failures that slowing down cannot cure).
        drop_rate: probability that the connection is closed before any answer.
        cut_rate: probability that a successful answer's connection is cut part-way
            through its body (between 10% and 90% of it): the client has its status and
            headers, and its ``read()`` of the body fails.
        seed: seeds what each request meets (see :mod:`~feedgpu.objectstore.faults`).
    """

    latency_s: float = 0.0
    latency_sigma: float = 0.0
    bandwidth_bytes_per_s: float | None = None
    max_concurrent: int | None = None
    requests_per_s: float | None = None
    burst: float | None = None
    slowdown_rate: float = 0.0
    drop_rate: float = 0.0
    cut_rate: float = 0.0
    seed: int = 0

    def __post_init__(self) -> None:
        if not self.latency_s >= 0:
            raise ValueError(f"latency_s must be >= 0 seconds, got {self.latency_s!r}")
        if not self.latency_sigma >= 0:
            raise ValueError(f"latency_sigma must be >= 0 (0: no tail), got {self.latency_sigma!r}")
        if self.bandwidth_bytes_per_s is not None and not self.bandwidth_bytes_per_s > 0:
            raise ValueError(
                f"bandwidth_bytes_per_s must be > 0 (or None for no limit), got {self.bandwidth_bytes_per_s!r}"
            )
        if self.max_concurrent is not None and (int(self.max_concurrent) != self.max_concurrent or self.max_concurrent < 1):
            raise ValueError(f"max_concurrent must be an integer >= 1 (or None for no limit), got {self.max_concurrent!r}")
        if self.requests_per_s is not None and not self.requests_per_s > 0:
            raise ValueError(f"requests_per_s must be > 0 (or None for no limit), got {self.requests_per_s!r}")
        if self.burst is not None and not self.burst >= 1:
            raise ValueError(f"burst must be >= 1 request (or None for the default), got {self.burst!r}")
        for name in ("slowdown_rate", "drop_rate", "cut_rate"):
            rate = getattr(self, name)
            if not 0.0 <= rate <= 1.0:
                raise ValueError(f"{name} is a probability between 0 and 1, got {rate!r}")

    def rate_limit(self) -> TokenBucket | None:
        """A fresh (full) token bucket for ``requests_per_s``, or ``None`` without a limit."""
        if self.requests_per_s is None:
            return None
        burst = self.burst if self.burst is not None else default_burst(self.requests_per_s)
        return TokenBucket(self.requests_per_s, burst)


class _PacedBody:
    """A WSGI response body sent in chunks no faster than a bandwidth, perhaps cut short; frees the slot when sent.

    ``cut_after`` (bytes): send that many bytes of the body, then close the connection,
    as a network that fails mid-transfer does; ``None`` sends it all.
    """

    def __init__(self, body: Iterable[bytes], bytes_per_s: float | None, closing: threading.Event,
                 on_bytes: Callable[[int], None], on_done: Callable[[], None], *,
                 cut_after: int | None = None, on_cut: Callable[[], None] | None = None,
                 environ: dict[str, Any] | None = None, number: int = 0):
        self._body = body
        self._bytes_per_s = bytes_per_s
        self._closing = closing
        self._on_bytes = on_bytes
        self._on_done = on_done
        self._cut_after = cut_after
        self._on_cut = on_cut
        self._environ = environ or {}
        self._number = number
        self._released = False

    def __iter__(self) -> Iterator[bytes]:
        rate = self._bytes_per_s
        # about 10 ms of transfer per chunk: smooth pacing without a sleep per kilobyte
        chunk = 0 if rate is None else int(min(65536, max(1024, rate * 0.01)))
        start = time.perf_counter()
        sent = 0
        for data in self._body:
            for i in range(0, len(data), chunk or max(len(data), 1)):
                piece = data[i:i + chunk] if chunk else data
                if self._cut_after is not None and sent + len(piece) >= self._cut_after:
                    head = piece[:self._cut_after - sent]
                    yield from self._send(head, start, sent + len(head))
                    self._cut()
                sent += len(piece)
                yield from self._send(piece, start, sent)
        # the last byte is out: free the slot now, not at close(), which werkzeug calls
        # only after waiting 10 ms for stray request bytes
        self._release()

    def _send(self, piece: bytes, start: float, sent_after: int) -> Iterator[bytes]:
        if not piece:
            return
        rate = self._bytes_per_s
        if rate is not None and not self._closing.is_set():
            # a chunk leaves once the link could have carried every byte up to its
            # end, so a body of N bytes takes at least N / rate seconds
            wait_s = start + sent_after / rate - time.perf_counter()
            if wait_s > 0:
                self._closing.wait(wait_s)
        self._on_bytes(len(piece))  # counted before it leaves: the client may read it at once
        yield bytes(piece)

    def _cut(self) -> None:
        """Close the connection mid-body; werkzeug takes the error for a client that went away."""
        if self._on_cut is not None:
            self._on_cut()
        _drop_connection(self._environ)
        raise ConnectionResetError(f"feedgpu.objectstore cut the body of request {self._number} on purpose")

    def _release(self) -> None:
        if not self._released:
            self._released = True
            self._on_done()

    def close(self) -> None:
        try:
            close = getattr(self._body, "close", None)
            if close is not None:
                close()
        finally:
            self._release()


class FaultInjector:
    """WSGI middleware that makes a fast local S3 behave like a remote one.

    Args:
        app: the WSGI application behind it (moto's).
        settings: the initial :class:`StoreSettings`.

    The counters (:meth:`stats`) are kept here, where each request is seen, so the peak
    number in flight is what the server really served at once.
    """

    def __init__(self, app: Callable, settings: StoreSettings):
        self.app = app
        self._settings = settings
        self._bucket = settings.rate_limit()
        self._cond = threading.Condition()
        self._closing = threading.Event()
        self._reset_counters()

    # -- settings and counters ---------------------------------------------------------
    @property
    def settings(self) -> StoreSettings:
        return self._settings

    def set(self, **changes: Any) -> StoreSettings:
        with self._cond:
            self._settings = dataclasses.replace(self._settings, **changes)
            if "seed" in changes:
                self._requests = 0  # a new seed starts a new, repeatable sequence
            if "requests_per_s" in changes or "burst" in changes:
                self._bucket = self._settings.rate_limit()  # a new limit starts full
            self._cond.notify_all()  # a larger max_concurrent frees waiting requests
            return self._settings

    def _reset_counters(self) -> None:
        self._requests = 0
        self._in_flight = 0
        self._peak_in_flight = 0
        self._slowdowns = 0
        self._drops = 0
        self._cuts = 0
        self._bytes_sent = 0

    def reset_stats(self) -> None:
        with self._cond:
            in_flight = self._in_flight
            self._reset_counters()
            self._in_flight = self._peak_in_flight = in_flight
            self._bucket = self._settings.rate_limit()  # a fresh start: the rate limit's bucket full

    def stats(self) -> dict[str, int]:
        with self._cond:
            return {
                "requests": self._requests,
                "in_flight": self._in_flight,
                "peak_in_flight": self._peak_in_flight,
                "slowdowns": self._slowdowns,
                "drops": self._drops,
                "cuts": self._cuts,
                "bytes_sent": self._bytes_sent,
            }

    def close(self) -> None:
        """Stop injecting: waiting and sleeping requests go on at once (used by stop())."""
        self._closing.set()
        with self._cond:
            self._cond.notify_all()

    # -- one request -------------------------------------------------------------------
    def _admit(self) -> tuple[StoreSettings, int, Fate, bool]:
        """Number the request, draw its fate, ask the rate limit, then wait for a slot and take it.

        Returns the settings it is served under, its number, its fate, and whether it is
        answered ``SlowDown`` (at random, or for want of a token).
        """
        with self._cond:
            settings = self._settings
            number = self._requests
            self._requests += 1
            fate = draw_fate(settings, number)
            # the rate limit counts every request that arrives, before any queue, as S3 does
            throttled = self._bucket is not None and not self._bucket.take()
            while not self._closing.is_set():
                limit = self._settings.max_concurrent
                if limit is None or self._in_flight < limit:
                    break
                self._cond.wait(0.5)
            self._in_flight += 1
            self._peak_in_flight = max(self._peak_in_flight, self._in_flight)
            slowdown = not fate.drop and (throttled or fate.slowdown)
            if fate.drop:
                self._drops += 1
            elif slowdown:
                self._slowdowns += 1
        return settings, number, fate, slowdown

    def _release(self) -> None:
        with self._cond:
            self._in_flight -= 1
            self._cond.notify()

    def _count_bytes(self, n: int) -> None:
        with self._cond:
            self._bytes_sent += n

    def _count_cut(self) -> None:
        with self._cond:
            self._cuts += 1

    def __call__(self, environ: dict[str, Any], start_response: Callable) -> Iterable[bytes]:
        if environ.get("PATH_INFO", "").startswith(_CONTROL_PREFIX):
            return self.app(environ, start_response)
        settings, number, fate, slowdown = self._admit()
        answer: dict[str, Any] = {}

        def noting_start_response(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> Callable:
            answer["status"] = status
            answer["length"] = next((int(v) for k, v in headers if k.lower() == "content-length"), None)
            return start_response(status, headers, exc_info) if exc_info else start_response(status, headers)

        try:
            if fate.latency_s > 0:
                self._closing.wait(fate.latency_s)
            if fate.drop:
                _drop_connection(environ)
                # werkzeug treats this error as "the client went away" and stays silent
                raise ConnectionResetError(f"feedgpu.objectstore dropped request {number} on purpose")
            if slowdown:
                body = b"" if environ.get("REQUEST_METHOD") == "HEAD" else (
                    SLOWDOWN_XML.format(request_id=f"FEEDGPU{number:012d}").encode())
                start_response("503 Slow Down", [
                    ("Content-Type", "application/xml"),
                    ("Content-Length", str(len(body))),
                    ("x-amz-request-id", f"FEEDGPU{number:012d}"),
                ])
                response: Iterable[bytes] = [body]
            else:
                response = self.app(environ, noting_start_response)
        except BaseException:
            self._release()
            raise
        cut_after = None
        length = answer.get("length")
        if (fate.cut_at is not None and str(answer.get("status", "")).startswith("2")
                and environ.get("REQUEST_METHOD") != "HEAD" and length is not None and length >= 2):
            cut_after = min(length - 1, max(1, int(length * fate.cut_at)))
        return _PacedBody(response, settings.bandwidth_bytes_per_s, self._closing, self._count_bytes, self._release,
                          cut_after=cut_after, on_cut=self._count_cut, environ=environ, number=number)


def _drop_connection(environ: dict[str, Any]) -> None:
    """Close the client's connection without an answer, as a failing load balancer does."""
    sock = environ.get("werkzeug.socket")
    if sock is None:  # pragma: no cover - only under a server other than werkzeug's
        return
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass


# --------------------------------------------------------------------------- the server


def _server_classes() -> tuple[type, type]:
    """Werkzeug's threaded server and moto's request handler, made quiet.

    Imported here, not at the top, because moto and Flask take a second to import and a
    DataLoader worker that only needs :func:`make_client` should not pay for them.
    """
    from moto.server import MotoRequestHandler
    from werkzeug.serving import ThreadedWSGIServer

    class QuietHandler(MotoRequestHandler):
        timeout = _SOCKET_TIMEOUT_S

        def log_request(self, code: Any = "-", size: Any = "-") -> None:
            pass  # one line per request would flood a notebook

        def log(self, type: str, message: str, *args: Any) -> None:
            logger.debug(message, *args)

    class QuietServer(ThreadedWSGIServer):
        # Werkzeug's handler threads are daemons, and socketserver's server_close() joins
        # only the others (Python 3.11's _Threads): so this server lists each handler thread
        # with its connection itself, to end them all in end_handlers().

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self._handlers: dict[threading.Thread, socket.socket] = {}
            self._handlers_lock = threading.Lock()

        def process_request(self, request: socket.socket, client_address: Any) -> None:
            thread = threading.Thread(target=self.process_request_thread, args=(request, client_address),
                                      daemon=True)
            with self._handlers_lock:  # listed before it starts, by the serving thread
                self._handlers[thread] = request
            try:
                thread.start()
            except BaseException:
                with self._handlers_lock:
                    del self._handlers[thread]
                raise

        def process_request_thread(self, request: socket.socket, client_address: Any) -> None:
            try:
                super().process_request_thread(request, client_address)
            finally:
                with self._handlers_lock:
                    self._handlers.pop(threading.current_thread(), None)

        def end_handlers(self, timeout_s: float) -> None:
            """Close every connection still open (a keep-alive one waits for its client's next
            request) and join its thread, all within ``timeout_s``; call it once serve_forever
            has returned. A thread still busy then (in moto's own work) is named in a warning."""
            with self._handlers_lock:
                handlers = dict(self._handlers)
            for connection in handlers.values():
                try:
                    connection.shutdown(socket.SHUT_RDWR)  # its recv() returns, its send() fails
                except OSError:
                    pass  # closed already
            deadline = time.monotonic() + timeout_s
            for thread in handlers:
                thread.join(max(0.0, deadline - time.monotonic()))
            busy = [thread.name for thread in handlers if thread.is_alive()]
            if busy:
                logger.warning("the object store stopped with %d request(s) still being answered: %s",
                               len(busy), ", ".join(busy))

        def log(self, type: str, message: str, *args: Any) -> None:
            logger.warning(message, *args)

    return QuietServer, QuietHandler


class _S3First:
    """Every S3 request straight to moto's S3 application; the control paths to moto's dispatcher.

    Moto's dispatcher finds the service of each request from its host and headers, which
    costs about as much CPU as the S3 answer itself (measured: 3.9 vs 2.1 ms of the
    store's CPU per GET). This store speaks S3 only, so the data path skips it; reset and
    dashboard (``/moto-api/``) still go through it. Both share moto's in-memory buckets.
    """

    def __init__(self, s3_app: Callable, dispatcher: Callable):
        self.s3_app = s3_app
        self.dispatcher = dispatcher

    def __call__(self, environ: dict[str, Any], start_response: Callable) -> Iterable[bytes]:
        if environ.get("PATH_INFO", "").startswith(_CONTROL_PREFIX):
            return self.dispatcher(environ, start_response)
        return self.s3_app(environ, start_response)


def _check_port_free(host: str, port: int) -> None:
    probe = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        probe.bind((host, port))
    except OSError as e:
        if e.errno == errno.EADDRINUSE:
            raise OSError(errno.EADDRINUSE,
                          f"port {port} on {host} is in use; pass port=0 (command line: --port 0) "
                          "to take any free port") from e
        raise
    finally:
        probe.close()


class ObjectStore:
    """A local S3-compatible object store with injected latency, bandwidth and failures.

    Use it as a context manager; the server stops and its threads end on the way out::

        with ObjectStore(latency_s=0.05, max_concurrent=16, seed=0) as store:
            s3 = store.client()
            s3.create_bucket(Bucket="lfw")
            store.set(latency_s=0.2)        # sweep without restarting
            print(store.stats())

    Args:
        port: 0 (default) for any free port, or a fixed port. The store listens on
            127.0.0.1 only.
        **settings: the fields of :class:`StoreSettings`.

    Attributes:
        endpoint_url: ``"http://127.0.0.1:<port>"`` once started.

    Raises:
        RuntimeError: another ObjectStore already runs in this process (moto keeps its
            buckets in module-level state, so two stores would share them).
        OSError: a fixed ``port`` is in use.
        ValueError: a setting is out of range.

    The buckets start empty and are emptied again at stop (moto's reset), so a notebook
    that runs a cell twice starts from the same state.
    """

    _running: ObjectStore | None = None
    _running_lock = threading.Lock()

    def __init__(self, port: int = 0, **settings: Any):
        self.host = "127.0.0.1"
        self.port = port
        self._injector: FaultInjector | None = None
        self._initial = StoreSettings(**settings)
        self._server: Any = None
        self._thread: threading.Thread | None = None
        self.endpoint_url: str | None = None

    # -- life cycle --------------------------------------------------------------------
    def start(self) -> ObjectStore:
        with ObjectStore._running_lock:
            other = ObjectStore._running
            if other is self:
                raise RuntimeError(f"this ObjectStore already runs at {self.endpoint_url}")
            if other is not None:
                raise RuntimeError(
                    f"an ObjectStore already runs in this process at {other.endpoint_url}; "
                    "stop it first (store.stop(), or leave its `with` block), or change its "
                    "settings with store.set(...)")
            ObjectStore._running = self
        try:
            self._start_server()
        except BaseException:
            self._shutdown_server()
            self._release_slot()
            raise
        return self

    def _start_server(self) -> None:
        from moto.server import DomainDispatcherApplication, create_backend_app

        server_cls, handler_cls = _server_classes()
        if self.port:
            _check_port_free(self.host, self.port)
        app = _S3First(create_backend_app("s3"), DomainDispatcherApplication(create_backend_app))
        self._injector = FaultInjector(app, self._initial)
        try:
            self._server = server_cls(self.host, self.port, self._injector, handler=handler_cls)
        except SystemExit as e:  # werkzeug exits on a bind error; a notebook must not
            raise OSError(f"could not listen on {self.host}:{self.port}") from e
        self.port = self._server.server_port
        self.endpoint_url = f"http://{self.host}:{self.port}"
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05},
            name=f"feedgpu-objectstore:{self.port}", daemon=True)
        self._thread.start()
        self._reset_moto()

    def stop(self) -> None:
        """Stop serving, end every thread and free the port; safe to call twice."""
        if self._server is None:
            return
        try:
            self._reset_moto()  # frees the stored objects (moto keeps them in memory)
        except OSError as e:
            logger.warning("could not empty the object store before stopping: %s", e)
        self._initial = self._injector.settings  # a restart keeps what set() changed
        self._shutdown_server()
        self._release_slot()

    def _shutdown_server(self) -> None:
        if self._injector is not None:
            self._injector.close()
        if self._server is None:
            return
        if self._thread is not None:
            self._server.shutdown()  # serve_forever returns: no new connection
            self._thread.join()
        self._server.end_handlers(_SOCKET_TIMEOUT_S)  # ends each open connection and its thread
        self._server.server_close()  # the listening socket (serve_forever closed it, if it ran)
        self._server = None
        self._thread = None

    def _release_slot(self) -> None:
        with ObjectStore._running_lock:
            if ObjectStore._running is self:
                ObjectStore._running = None

    def _reset_moto(self) -> None:
        request = urllib.request.Request(f"{self.endpoint_url}/moto-api/reset", method="POST")
        with urllib.request.urlopen(request, timeout=10) as response:
            response.read()

    def __enter__(self) -> ObjectStore:
        return self if self.running else self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    @property
    def running(self) -> bool:
        return self._server is not None

    def __repr__(self) -> str:
        where = self.endpoint_url if self.running else "stopped"
        return f"ObjectStore({where}, {self.settings})"

    # -- settings, counters, clients ---------------------------------------------------
    @property
    def settings(self) -> StoreSettings:
        """The settings in force (a frozen :class:`StoreSettings`)."""
        return self._injector.settings if self._injector is not None else self._initial

    def set(self, **changes: Any) -> StoreSettings:
        """Change settings while running; requests that arrive afterwards see them.

        Passing ``seed`` also restarts the request numbering, so the sequence of
        failures that follows is the same as after a fresh start with that seed.
        """
        if self._injector is None:
            self._initial = dataclasses.replace(self._initial, **changes)
            return self._initial
        return self._injector.set(**changes)

    def stats(self) -> dict[str, int]:
        """Counters since start (or :meth:`reset_stats`): requests, in_flight, peak_in_flight,
        slowdowns (every ``503 SlowDown``: random or for the rate), drops (before an answer),
        cuts (part-way through a body), bytes_sent."""
        if self._injector is None:
            return {}
        return self._injector.stats()

    def reset_stats(self) -> None:
        """Zero the counters, restart the request numbering (and so the sequence of faults), and
        refill the rate limit's bucket: what follows is what follows a fresh start."""
        if self._injector is not None:
            self._injector.reset_stats()

    def client(self, retry_mode: str | None = "standard", max_attempts: int | None = None, **config: Any):
        """A boto3 S3 client for this store (see :func:`make_client`)."""
        if self.endpoint_url is None or not self.running:
            raise RuntimeError("the ObjectStore is not running: use `with ObjectStore(...) as store:` or store.start()")
        return make_client(self.endpoint_url, retry_mode=retry_mode, max_attempts=max_attempts, **config)


def make_client(endpoint_url: str, retry_mode: str | None = "standard", max_attempts: int | None = None,
                **config: Any):
    """A boto3 S3 client for a local endpoint, with dummy credentials and region us-east-1.

    A module-level function so that a DataLoader worker can build its own client from the
    endpoint (a boto3 client cannot be pickled to a worker).

    Args:
        endpoint_url: e.g. ``store.endpoint_url``.
        retry_mode: botocore's ``"standard"`` (the default of the botocore we pin, 1.44:
            ``botocore/args.py``, ``_compute_retry_mode``), ``"legacy"`` (the default of
            older releases) or ``"adaptive"``; ``None`` turns retries off (one attempt).
        max_attempts: attempts in all, the first included; ``None`` for the mode's default
            (legacy 5, standard and adaptive 3).
        **config: more ``botocore.config.Config`` options, e.g. ``max_pool_connections`` or
            ``read_timeout`` (seconds a read of the answer may wait before it fails and,
            in every retry mode, is retried).
    """
    import boto3
    from botocore.config import Config

    if retry_mode is None:
        retries: dict[str, Any] = {"mode": "standard", "total_max_attempts": 1}
    elif retry_mode in ("legacy", "standard", "adaptive"):
        retries = {"mode": retry_mode}
        if max_attempts is not None:
            retries["total_max_attempts"] = int(max_attempts)
    else:
        raise ValueError(f"retry_mode must be 'legacy', 'standard', 'adaptive' or None, got {retry_mode!r}")
    config = {"s3": {"addressing_style": "path"}, **config}
    return boto3.session.Session().client(
        "s3", endpoint_url=endpoint_url, region_name=REGION,
        config=Config(retries=retries, **config), **DUMMY_CREDENTIALS)
