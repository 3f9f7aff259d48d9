"""The token bucket, on a fake clock."""

from __future__ import annotations

import pytest

from gateway.protocol.errors import LimitExceeded
from gateway.security.limits import RateLimiter, Share, split


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


def test_a_replicas_share_is_a_nth_of_the_rate_and_burst_never_below_one_token() -> None:
    assert split(100, 200, 1) == (100, 200)  # alone: the whole, exactly as configured
    assert split(100, 200, 0) == (100, 200)  # (no lease round counted yet)
    assert split(90, 30, 3) == (30, 10)
    assert split(10, 4, 4) == (2.5, 1)
    assert split(10, 2, 3) == (10 / 3, 1)  # a bucket of 2/3 of a token would refuse all


def test_a_share_counts_at_least_this_replica() -> None:
    share = Share()
    assert share.replicas == 1
    share.count(3)
    assert share.replicas == 3
    share.count(0)  # a round that saw none (its own lease lapsed meanwhile) is still one
    assert share.replicas == 1


def test_a_limiter_holds_its_share_and_follows_the_count_of_replicas() -> None:
    clock, share = Clock(), Share()
    share.count(3)
    limiter = RateLimiter(rate=30, burst=30, clock=clock, share=share)
    for _ in range(10):  # burst 30 / 3 replicas
        limiter.check("alice")
    with pytest.raises(LimitExceeded) as refused:
        limiter.check("alice")
    assert "over 30 per second (limits.requests_per_second, 10 per second on each of 3" in str(
        refused.value
    )
    clock.now += 1  # 10 tokens a second here
    for _ in range(10):
        limiter.check("alice")
    with pytest.raises(LimitExceeded):
        limiter.check("alice")
    share.count(2)  # a replica died: its share comes back to the survivors
    clock.now += 1
    for _ in range(15):
        limiter.check("alice")
    with pytest.raises(LimitExceeded):
        limiter.check("alice")
    share.count(6)  # replicas joined: a full bucket shrinks to the new share at once
    clock.now += 10
    for _ in range(5):
        limiter.check("alice")
    with pytest.raises(LimitExceeded) as refused:
        limiter.check("alice")
    assert refused.value.headers == {"Retry-After": "1"}  # 1 token at 5 per second


def test_three_shares_admit_the_deployments_rate_within_a_burst() -> None:
    """Three replicas, requests spread evenly: together they admit the configured rate over
    any stretch, within the configured burst."""
    clock, share = Clock(), Share()
    share.count(3)
    limiters = [RateLimiter(rate=60, burst=30, clock=clock, share=share) for _ in range(3)]
    admitted = 0
    for step in range(3000):  # 1000 requests a second for 3 s, round robin
        clock.now += 0.001
        try:
            limiters[step % 3].check("alice")
        except LimitExceeded:
            continue
        admitted += 1
    assert 30 + 60 * 3 - 3 <= admitted <= 30 + 60 * 3


def test_one_replica_flooded_admits_its_share_only() -> None:
    clock, share = Clock(), Share()
    share.count(3)
    limiter = RateLimiter(rate=60, burst=30, clock=clock, share=share)
    admitted = 0
    for _ in range(3000):
        clock.now += 0.001
        try:
            limiter.check("mallory")
        except LimitExceeded:
            continue
        admitted += 1
    assert 10 + 20 * 3 - 1 <= admitted <= 10 + 20 * 3  # its burst and rate: a third of each


def test_alone_the_bucket_and_its_refusal_are_unchanged() -> None:
    clock = Clock()
    limiter = RateLimiter(rate=2, burst=3, clock=clock, share=Share())
    for _ in range(3):
        limiter.check("alice")
    with pytest.raises(LimitExceeded) as refused:
        limiter.check("alice")
    assert str(refused.value).startswith(
        "Too many requests: over 2 per second (limits.requests_per_second); retry in 0.50 s"
    )
