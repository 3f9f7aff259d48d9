"""Per-principal request rate limits: a token bucket per caller, this replica's share of it.

A bucket holds up to `burst` tokens and refills at `rate` per second; each request takes
one. An empty bucket answers how long until the next token, which becomes `Retry-After`.
Buckets are dropped once full again, so idle callers cost nothing.

Several replicas on one PostgreSQL store hold the rate for the whole deployment without a
store round trip per request: each replica enforces its `Share` of it, `rate / N` and
`burst / N` (at least one token), N being the live replicas its latest lease round counted.
Alone (SQLite, or the only live replica) the share is the whole: the same bucket as ever.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass

from gateway.protocol.errors import LimitExceeded


class Share:
    """This process's share of the request rates, which hold for the whole deployment: one
    of `replicas`, as this replica's latest lease round counted them (1 alone)."""

    def __init__(self) -> None:
        self.replicas = 1

    def count(self, replicas: int) -> None:
        """The live replicas a lease round saw, this one included (never fewer than 1)."""
        self.replicas = max(1, replicas)


def split(rate: float, burst: int, replicas: int) -> tuple[float, float]:
    """One of `replicas`' share of `rate` and `burst`: each a `replicas`-th, the burst at
    least one token (else a bucket of less than a token would refuse every request)."""
    if replicas <= 1:
        return rate, burst
    return rate / replicas, max(1.0, burst / replicas)


@dataclass(slots=True)
class _Bucket:
    tokens: float
    updated: float


class RateLimiter:
    def __init__(
        self,
        rate: float | None,
        burst: int,
        clock: Callable[[], float] = time.monotonic,
        share: Share | None = None,
    ) -> None:
        self._rate = rate
        self._burst = burst
        self._clock = clock
        self._share = share
        self._buckets: dict[str, _Bucket] = {}

    def check(self, key: str) -> None:
        """Take a token for `key`.

        Raises:
            LimitExceeded: the bucket is empty; its Retry-After says when to come back.
        """
        if self._rate is None:
            return
        replicas = 1 if self._share is None else self._share.replicas
        rate, burst = split(self._rate, self._burst, replicas)
        now = self._clock()
        bucket = self._buckets.get(key)
        if bucket is None:
            bucket = self._buckets[key] = _Bucket(float(burst), now)
        else:
            bucket.tokens = min(burst, bucket.tokens + (now - bucket.updated) * rate)
            bucket.updated = now
        if bucket.tokens >= 1:
            bucket.tokens -= 1
            if len(self._buckets) > 10_000:
                self._forget_full(now, burst / rate)
            return
        wait = (1 - bucket.tokens) / rate
        shared = "" if replicas == 1 else f", {rate:g} per second on each of {replicas} replicas"
        raise LimitExceeded(
            f"Too many requests: over {self._rate:g} per second "
            f"(limits.requests_per_second{shared}); retry in {wait:.2f} s",
            headers={"Retry-After": str(max(1, math.ceil(wait)))},
        )

    def _forget_full(self, now: float, refill: float) -> None:
        for key in [k for k, b in self._buckets.items() if now - b.updated >= refill]:
            del self._buckets[key]
