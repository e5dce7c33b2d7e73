"""The course's model of reading from remote storage: Little's law, and a store that plays it out.

A remote store answers each request after a **latency** (the time to first byte: tens of
milliseconds to S3, against tens of microseconds to a local SSD), and serves many
requests at once. A client that keeps ``n`` requests in flight, each taking ``latency_s``,
finishes ``n / latency_s`` of them per second: **Little's law**, *throughput = requests in
flight ÷ time per request*. So the only ways to read small objects faster from far away
are more requests in flight (workers, threads) or fewer requests (bigger objects)::

    in flight = streams = max(workers, 1) × threads per worker     (a stream: one request after another)
    in flight = min(streams, max_concurrent)                       (the store serves at most that many at once)
    items/s   = in flight / latency_s

:func:`predicted_items_per_s` is that formula. :func:`simulate_store` plays it out request
by request on a virtual clock, with the store's slots served in arrival order, so a
prediction can be checked without any timing noise.

Little's law speaks of the *mean* time per request. A batch fetched at once is done when
its *slowest* request is, so with a latency that has a tail (log-normal: a median
``latency_s`` and a spread ``sigma``, as the course's store draws it) a batch of ``n``
takes :func:`expected_slowest_s`: far more than the median when ``n`` is large. The same
function says what two remedies buy: a hedge (a second request after ``hedge_after_s``,
the first answer wins) and a timeout (the request is abandoned after ``timeout_s`` and
sent again)::

    P(one request takes longer than t)   S(t)     = 1 - Phi(ln(t / latency_s) / sigma)
      hedged after h                      S(t) * S(t - h)             (t > h)
      sent again after a timeout tau      S(tau)^k * S(t - k tau)     (k tau <= t < (k + 1) tau)
    E[slowest of n]                       integral over t of 1 - (1 - S(t))^n
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from statistics import NormalDist

from ..base.checks import check_int, check_number, check_seconds

__all__ = ["predicted_items_per_s", "StoreSimulation", "simulate_store", "latency_quantile_s",
           "expected_slowest_s"]


def _streams(workers: int, threads_per_worker: int) -> int:
    """Requests a loader keeps in flight: each worker (or the main process) runs its threads."""
    return max(workers, 1) * threads_per_worker


def _check(workers: int, threads_per_worker: int, latency_s: float, max_concurrent: int | None) -> tuple:
    workers = check_int("workers", workers)
    threads_per_worker = check_int("threads_per_worker", threads_per_worker, minimum=1)
    latency_s = check_seconds("latency_s", latency_s)
    if latency_s <= 0:
        raise ValueError(f"latency_s must be > 0 seconds (every request takes some time), got {latency_s!r}")
    if max_concurrent is not None:
        max_concurrent = check_int("max_concurrent", max_concurrent, minimum=1)
    return workers, threads_per_worker, latency_s, max_concurrent


def predicted_items_per_s(workers: int, threads_per_worker: int, latency_s: float,
                          max_concurrent: int | None = None) -> float:
    """Little's law for a loader that fetches one object per item.

    Args:
        workers: DataLoader ``num_workers``; 0 means the main process fetches, as one worker.
        threads_per_worker: requests each worker keeps in flight (1 without a thread pool).
        latency_s: seconds one request takes, from sending it to having its last byte.
        max_concurrent: requests the store serves at once (``None``: no limit).

    Returns:
        ``min(max(workers, 1) * threads_per_worker, max_concurrent) / latency_s``.

    Raises:
        ValueError: ``workers`` < 0, ``threads_per_worker`` or ``max_concurrent`` < 1, or
            ``latency_s`` <= 0.
    """
    workers, threads_per_worker, latency_s, max_concurrent = _check(
        workers, threads_per_worker, latency_s, max_concurrent)
    in_flight = _streams(workers, threads_per_worker)
    if max_concurrent is not None:
        in_flight = min(in_flight, max_concurrent)
    return in_flight / latency_s


@dataclass(frozen=True)
class StoreSimulation:
    """What :func:`simulate_store` computed; times in seconds from the first request.

    Attributes:
        streams: requests the clients keep in flight (``max(workers, 1) * threads``).
        max_concurrent: the store's limit (``None``: none).
        latency_s: seconds a request holds its slot.
        sent_s: per request, in the order served, when its stream sent it.
        started_s: per request, in the order served, when the store began serving it.
        done_s: per request, in the order served, when it finished.
        peak_in_flight: most requests the store served at once.
    """

    streams: int
    max_concurrent: int | None
    latency_s: float
    sent_s: tuple[float, ...]
    started_s: tuple[float, ...]
    done_s: tuple[float, ...]
    peak_in_flight: int

    @property
    def requests(self) -> int:
        return len(self.done_s)

    @property
    def total_s(self) -> float:
        """When the last request finished."""
        return self.done_s[-1]

    @property
    def mean_wait_s(self) -> float:
        """Mean time a request waited for a slot (0 when the store has slots to spare)."""
        return sum(s - i for s, i in zip(self.started_s, self.sent_s)) / self.requests

    @property
    def items_per_s(self) -> float:
        """Steady throughput: whole rounds of ``peak_in_flight`` completions after the first
        round, divided by the time they took (the first round only fills the pipeline).
        With fewer than two rounds, requests / total time."""
        rounds = (self.requests - self.peak_in_flight) // self.peak_in_flight
        if rounds < 1:
            return self.requests / self.total_s
        first = self.peak_in_flight - 1
        last = first + rounds * self.peak_in_flight
        return (last - first) / (self.done_s[last] - self.done_s[first])


def simulate_store(workers: int, threads_per_worker: int, latency_s: float,
                   max_concurrent: int | None = None, n_requests: int = 200) -> StoreSimulation:
    """Play out ``n_requests`` GETs against a store with a concurrency limit, on a virtual clock.

    Every stream (a thread of a worker) sends a request, waits for its answer, and sends
    the next at once. The store serves up to ``max_concurrent`` requests at a time; the
    others wait in a queue, first come first served; each served request holds its slot
    for ``latency_s``. No randomness and no real time: the same arguments give the same
    run on every machine.

    Args:
        workers, threads_per_worker, latency_s, max_concurrent: as in
            :func:`predicted_items_per_s`.
        n_requests: requests in all (>= 1).

    Returns:
        A :class:`StoreSimulation`; its ``items_per_s`` is the steady throughput.

    Raises:
        ValueError: an argument out of range (as :func:`predicted_items_per_s`), or
            ``n_requests`` < 1.
    """
    workers, threads_per_worker, latency_s, max_concurrent = _check(
        workers, threads_per_worker, latency_s, max_concurrent)
    n_requests = check_int("n_requests", n_requests, minimum=1)
    streams = _streams(workers, threads_per_worker)
    slots = math.inf if max_concurrent is None else max_concurrent

    waiting: deque[float] = deque()  # arrival times of requests waiting for a slot
    running: list[float] = []        # heap of finish times of the requests being served
    sent = min(streams, n_requests)  # the first round: every stream sends at 0
    waiting.extend([0.0] * sent)
    sent_at: list[float] = []
    started: list[float] = []
    done: list[float] = []
    peak = 0
    now = 0.0
    while len(done) < n_requests:
        while waiting and len(running) < slots:
            sent_at.append(waiting.popleft())
            started.append(now)
            heapq.heappush(running, now + latency_s)
        peak = max(peak, len(running))
        now = heapq.heappop(running)
        done.append(now)
        if sent < n_requests:  # the stream that got its answer sends its next request
            waiting.append(now)
            sent += 1
    return StoreSimulation(streams, max_concurrent, latency_s, tuple(sent_at), tuple(started), tuple(done), peak)


# --------------------------------------------------------------------------- the tail of the latency


def latency_quantile_s(latency_s: float, sigma: float, q: float) -> float:
    """The ``q``-quantile of a log-normal time per request: ``latency_s * exp(sigma * z_q)``.

    ``latency_s`` is the median (``q = 0.5``); at ``sigma = 1`` the 95th percentile is 5.2
    times it and the 99th 10.2 times.
    """
    latency_s = check_seconds("latency_s", latency_s)
    sigma = check_number("sigma", sigma)
    if not 0 < q < 1:
        raise ValueError(f"q is a probability strictly between 0 and 1, got {q!r}")
    return latency_s * math.exp(sigma * NormalDist().inv_cdf(q))


def _survival(latency_s: float, sigma: float) -> Callable[[float], float]:
    """``t -> P(time to first byte > t)`` for a log-normal with median ``latency_s``."""
    normal = NormalDist()

    def survival(t: float) -> float:
        if t <= 0:
            return 1.0
        if sigma == 0:
            return 1.0 if t < latency_s else 0.0
        return 1.0 - normal.cdf(math.log(t / latency_s) / sigma)

    return survival


def expected_slowest_s(n_requests: int, latency_s: float, sigma: float, *, hedge_after_s: float | None = None,
                       timeout_s: float | None = None) -> float:
    """The mean time until the slowest of ``n_requests`` requests sent together has answered.

    Each request's time to first byte is log-normal, median ``latency_s``, spread ``sigma``
    (the course's store: ``latency_s``, ``latency_sigma``); no CPU, no queue.

    Args:
        n_requests: requests sent at once (>= 1), e.g. a batch from a pool of as many threads.
        latency_s: the median time per request (> 0).
        sigma: the spread of its logarithm (>= 0; 0 for the same time every time).
        hedge_after_s: if given, a request not answered after this long is sent a second
            time, and the first answer wins.
        timeout_s: if given (and no hedge), a request not answered after this long is
            abandoned and sent again at once, as often as it takes.

    Returns:
        Seconds: ``latency_s`` when ``n_requests`` = 1 and ``sigma`` = 0; at ``sigma`` = 1
        and 16 requests, about 6.9 times ``latency_s`` without a remedy.

    Raises:
        ValueError: an argument out of range, or both a hedge and a timeout.
    """
    n_requests = check_int("n_requests", n_requests, minimum=1)
    latency_s = check_seconds("latency_s", latency_s)
    if latency_s <= 0:
        raise ValueError(f"latency_s must be > 0 seconds, got {latency_s!r}")
    sigma = check_number("sigma", sigma)
    if hedge_after_s is not None and timeout_s is not None:
        raise ValueError("give a hedge or a timeout, not both")
    for name, value in (("hedge_after_s", hedge_after_s), ("timeout_s", timeout_s)):
        if value is not None and not check_seconds(name, value) > 0:
            raise ValueError(f"{name} must be > 0 seconds, got {value!r}")
    survival = _survival(latency_s, sigma)
    if hedge_after_s is not None:
        h = hedge_after_s

        def one(t: float) -> float:
            return survival(t) * (survival(t - h) if t > h else 1.0)
    elif timeout_s is not None:
        tau = timeout_s
        late = survival(tau)  # a whole attempt wasted

        def one(t: float) -> float:
            k = int(t // tau)
            return late ** k * survival(t - k * tau)
    else:
        one = survival
    if sigma == 0:  # a step: the slowest takes as long as any one
        times = [latency_s, latency_s + (hedge_after_s or 0.0)]
        grid = sorted({0.0, *times, 2 * max(times)})
        return sum((b - a) * (1.0 - (1.0 - one(a + 1e-12)) ** n_requests) for a, b in zip(grid, grid[1:]))
    # integrate 1 - (1 - S(t))^n over ln t (the mass spans decades), midpoint rule
    lo, hi = math.log(latency_s) - 8 * sigma, math.log(latency_s) + 9 * sigma + math.log(n_requests + 1)
    steps = 6000
    du = (hi - lo) / steps
    total = latency_s * math.exp(-8 * sigma)  # below the grid, the integrand is 1
    for i in range(steps):
        t = math.exp(lo + (i + 0.5) * du)
        total += (1.0 - (1.0 - one(t)) ** n_requests) * t * du
    return total
