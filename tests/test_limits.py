"""The token bucket, on a fake clock."""

from __future__ import annotations

import pytest

from gateway.protocol.errors import LimitExceeded
from gateway.security.limits import RateLimiter


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_bucket_allows_the_burst_then_refuses_with_retry_after_then_refills() -> None:
    clock = Clock()
    limiter = RateLimiter(rate=2, burst=3, clock=clock)
    for _ in range(3):
        limiter.check("alice")
    with pytest.raises(LimitExceeded) as refused:
        limiter.check("alice")
    assert refused.value.http_status == 429
    assert refused.value.headers == {"Retry-After": "1"}
    limiter.check("bob")  # every caller has a bucket of its own
    clock.now += 0.5  # one token at 2 per second
    limiter.check("alice")
    with pytest.raises(LimitExceeded):
        limiter.check("alice")
    clock.now += 10  # refills to the burst, never beyond
    for _ in range(3):
        limiter.check("alice")
    with pytest.raises(LimitExceeded):
        limiter.check("alice")


def test_retry_after_rounds_up_to_whole_seconds() -> None:
    clock = Clock()
    limiter = RateLimiter(rate=0.25, burst=1, clock=clock)
    limiter.check("x")
    with pytest.raises(LimitExceeded) as refused:
        limiter.check("x")
    assert refused.value.headers == {"Retry-After": "4"}


def test_no_rate_means_no_limit() -> None:
    limiter = RateLimiter(rate=None, burst=1)
    for _ in range(1000):
        limiter.check("x")
