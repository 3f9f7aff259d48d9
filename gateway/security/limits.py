"""Per-principal request rate limits: a token bucket per caller.

A bucket holds up to `burst` tokens and refills at `rate` per second; each request takes
one. An empty bucket answers how long until the next token, which becomes `Retry-After`.
Buckets are dropped once full again, so idle callers cost nothing.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass

from gateway.protocol.errors import LimitExceeded


@dataclass(slots=True)
class _Bucket:
    tokens: float
    updated: float


class RateLimiter:
    def __init__(
        self, rate: float | None, burst: int, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._rate = rate
        self._burst = burst
        self._clock = clock
        self._buckets: dict[str, _Bucket] = {}

    def check(self, key: str) -> None:
        """Take a token for `key`.

        Raises:
            LimitExceeded: the bucket is empty; its Retry-After says when to come back.
        """
        if self._rate is None:
            return
        now = self._clock()
        bucket = self._buckets.get(key)
        if bucket is None:
            bucket = self._buckets[key] = _Bucket(float(self._burst), now)
        else:
            bucket.tokens = min(self._burst, bucket.tokens + (now - bucket.updated) * self._rate)
            bucket.updated = now
        if bucket.tokens >= 1:
            bucket.tokens -= 1
            if len(self._buckets) > 10_000:
                self._forget_full(now)
            return
        wait = (1 - bucket.tokens) / self._rate
        raise LimitExceeded(
            f"Too many requests: over {self._rate:g} per second (limits.requests_per_second); "
            f"retry in {wait:.2f} s",
            headers={"Retry-After": str(max(1, math.ceil(wait)))},
        )

    def _forget_full(self, now: float) -> None:
        assert self._rate is not None
        refill = self._burst / self._rate
        for key in [k for k, b in self._buckets.items() if now - b.updated >= refill]:
            del self._buckets[key]
