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
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from dataclasses import dataclass

from .checks import check_int, check_seconds

__all__ = ["predicted_items_per_s", "StoreSimulation", "simulate_store"]


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
