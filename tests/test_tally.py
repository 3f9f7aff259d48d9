"""The plain-number series (`gateway.observability.tally`) read exactly as prometheus_client's
own Counter and Histogram would: dashboards and alert rules see no difference."""

from __future__ import annotations

import re

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from gateway.observability.tally import Tallies

BUCKETS = (0.001, 0.01, 0.1, 1, 10)
# On a bound, just past one, far past the last, zero.
OBSERVED = [0.001, 0.0010001, 0.05, 1.0, 3.0, 25.0, 0.0, 0.1]


def _exposition(registry: CollectorRegistry) -> str:
    # _created holds the time each series was made: equal up to the clock, not to the digit.
    return re.sub(r"(_created\{[^}]*\}) \S+", r"\1 T", generate_latest(registry).decode())


def test_a_tally_exposes_the_samples_the_client_library_would() -> None:
    ours, theirs = CollectorRegistry(), CollectorRegistry()
    tallies = Tallies()
    counter = tallies.counter("x_requests", "Requests.", ["route", "outcome"])
    histogram = tallies.histogram("x_seconds", "Latency.", ["route"], BUCKETS)
    gauge = tallies.gauge("x_active", "Active.", ["route"])
    tallies.register(ours)
    their_counter = Counter("x_requests", "Requests.", ["route", "outcome"], registry=theirs)
    their_histogram = Histogram(
        "x_seconds", "Latency.", ["route"], buckets=BUCKETS, registry=theirs
    )
    their_gauge = Gauge("x_active", "Active.", ["route"], registry=theirs)
    counter.touch("c", "ok")  # a series at zero before its first event
    their_counter.labels("c", "ok")
    gauge.set(0, "c")
    their_gauge.labels("c").set(0)
    for n, value in enumerate(OBSERVED):
        route, outcome = ("a" if n % 3 else "b"), ("ok" if n % 2 else "error")
        counter.inc(route, outcome)
        their_counter.labels(route, outcome).inc()
        histogram.observe(value, route)
        their_histogram.labels(route).observe(value)
        if n % 3:
            gauge.inc(route)
            their_gauge.labels(route).inc()
        else:
            gauge.dec(route)
            their_gauge.labels(route).dec()

    assert _exposition(ours) == _exposition(theirs)
    assert 'x_requests_total{outcome="ok",route="c"} 0.0' in _exposition(ours)
    # route b saw 0.001 (on the bound), 1.0 and 0.0
    assert 'x_seconds_bucket{le="0.001",route="b"} 2.0' in _exposition(ours)


def test_tallies_claim_their_names_in_the_registry() -> None:
    registry = CollectorRegistry()
    tallies = Tallies()
    tallies.counter("x_requests", "Requests.", ["route"])
    tallies.register(registry)
    try:
        Counter("x_requests", "Again.", registry=registry)
    except ValueError as exc:
        assert "Duplicated timeseries" in str(exc)
    else:
        raise AssertionError("a second x_requests was registered beside the tally")
