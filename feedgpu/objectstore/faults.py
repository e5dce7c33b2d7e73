"""What befalls one request to the course's object store: drawn from a seed, or set by the request rate.

Two kinds of fault, told apart because they are cured differently:

* **Drawn per request** (:func:`draw_fate`): the time to first byte (a median with a
  log-normal tail), a connection dropped before any answer, a ``503 SlowDown`` at random,
  and a connection cut part-way through the body. The ``n``-th request since the store
  started (or since its counters were reset) draws from ``random.Random(f"{seed}/{n}")``,
  so the same requests meet the same faults in every run. Retrying helps against these;
  slowing down does not.
* **Set by the request rate** (:class:`TokenBucket`): S3 limits the requests per second
  that one partitioned prefix takes (AWS documents 5,500 GET/HEAD per second per prefix)
  and answers the excess at once with ``503 SlowDown``; it does not queue them. The store
  keeps one such limit for all of its keys, as one prefix. Slowing down helps against this.

The tail of the latency: ``latency_s * exp(sigma * z)`` with ``z`` a standard normal
draw, so ``latency_s`` is the *median* and ``sigma`` sets the tail: the 99th percentile is
``latency_s * exp(2.33 * sigma)``, about 10 times the median at ``sigma = 1``.
"""

from __future__ import annotations

import math
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

__all__ = ["Fate", "draw_fate", "TokenBucket", "default_burst"]

#: Where a cut may fall, as a share of the body: never before its first byte nor after its last.
CUT_RANGE = (0.1, 0.9)


@dataclass(frozen=True)
class Fate:
    """What one request meets, drawn when it arrives.

    Attributes:
        latency_s: its time to first byte, in seconds.
        drop: the connection closes before any answer (the client sees a connection error).
        slowdown: it is answered ``503 SlowDown`` (the random kind, whatever the rate).
        cut_at: the share of the body sent before the connection is cut, or ``None`` for
            a whole body. Only a successful answer with a body of 2 bytes or more is cut.
    """

    latency_s: float
    drop: bool
    slowdown: bool
    cut_at: float | None


def draw_fate(settings: Any, number: int) -> Fate:
    """The fate of request ``number`` under ``settings`` (a ``StoreSettings``).

    Every draw always happens, in the same order (drop, slowdown, cut, where the cut
    falls, latency), so changing one setting leaves the others' sequences unchanged.
    """
    rng = random.Random(f"{settings.seed}/{number}")
    drop = rng.random() < settings.drop_rate
    slowdown = rng.random() < settings.slowdown_rate
    cut = rng.random() < settings.cut_rate
    cut_at = rng.uniform(*CUT_RANGE)
    z = rng.gauss(0.0, 1.0)
    latency_s = settings.latency_s * math.exp(settings.latency_sigma * z) if settings.latency_s > 0 else 0.0
    return Fate(latency_s=latency_s, drop=drop, slowdown=slowdown, cut_at=cut_at if cut else None)


def default_burst(requests_per_s: float) -> float:
    """Requests a fresh or idle store takes at once before its rate limit bites: a tenth of a
    second's worth, at least one."""
    return max(1.0, requests_per_s / 10.0)


class TokenBucket:
    """A request-rate limit: ``rate_per_s`` tokens a second, at most ``burst`` saved up.

    A request takes a token if there is one and is served; if there is none it is
    refused at once (S3's ``SlowDown``), and a refused request takes nothing, so a client
    that keeps sending still gets ``rate_per_s`` requests a second through.

    Args:
        rate_per_s: tokens added per second (> 0).
        burst: the most tokens saved up (>= 1); the bucket starts full.
        clock: seconds from any origin (``time.monotonic``; a test passes its own).
    """

    def __init__(self, rate_per_s: float, burst: float, clock: Callable[[], float] = time.monotonic) -> None:
        if not rate_per_s > 0:
            raise ValueError(f"rate_per_s must be > 0 requests per second, got {rate_per_s!r}")
        if not burst >= 1:
            raise ValueError(f"burst must be >= 1 request, got {burst!r}")
        self.rate_per_s = float(rate_per_s)
        self.burst = float(burst)
        self._clock = clock
        self._tokens = self.burst
        self._last = clock()
        self._lock = threading.Lock()

    def take(self) -> bool:
        """Take one token if there is one; ``False`` means: refuse this request."""
        with self._lock:
            now = self._clock()
            self._tokens = min(self.burst, self._tokens + (now - self._last) * self.rate_per_s)
            self._last = now
            if self._tokens >= 1.0:
                self._tokens -= 1.0
                return True
            return False
