"""The tasks benchmark's client patterns side by side: each later pattern's rate over the polling
pattern's on the same server, and the blocking pattern's ``tasks/result`` waits round by round.

``tests/bench/lifecycles.py`` says what each pattern sends; ``tests/bench/tasks.py`` runs them
and calls ``report_patterns`` with every round's measurements. A wait is the time from the
``tasks/result`` request to its answer; the echo ends at once, so a wait past ``SLOW_WAIT_S``
is a wake-up the server missed (on the gateway, its 5 s backstop).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from tests.bench.passthrough import KEY_CONCURRENCY, JsonObj, Measurement, Summary

#: A tasks/result that waited longer than this is counted as slow.
SLOW_WAIT_S = 1.0


@dataclass
class TaskMeasurement(Measurement):
    """A passthrough Measurement (requests = completed operations) plus HTTP requests sent,
    the blocking pattern's tasks/result waits, and the CPU seconds the store's gateways (their
    event loops' threads apart too) and database backends spent in the measured window
    (`tests/bench/cpu.py`)."""

    http_requests: int = 0
    waits_s: list[float] = field(default_factory=list)
    gateway_cpu_s: float | None = None
    #: The part of `gateway_cpu_s` the gateways' event loops' threads spent.
    loop_cpu_s: float | None = None
    db_cpu_s: float | None = None


@dataclass(frozen=True)
class Waits:
    """One round's blocking tasks/result latencies."""

    answers: int
    p50_ms: float
    p99_ms: float
    max_ms: float
    #: Answers that took longer than SLOW_WAIT_S.
    slow: int

    @classmethod
    def of(cls, waits: Sequence[float]) -> Waits:
        ordered = sorted(waits)

        def pct(q: float) -> float:
            return ordered[max(1, math.ceil(q * len(ordered))) - 1] * 1000 if ordered else math.nan

        slow = sum(1 for w in ordered if w > SLOW_WAIT_S)
        return cls(len(ordered), pct(0.5), pct(0.99), pct(1.0), slow)

    def short(self) -> str:
        return (
            f"tasks/result p99 {self.p99_ms:.1f} ms max {self.max_ms:.1f} ms, "
            f">{SLOW_WAIT_S:g}s: {self.slow}/{self.answers}"
        )


def round_note(m: Measurement) -> str:
    """What a round's progress line adds for a blocking measurement."""
    if m.target != "blocking" or not isinstance(m, TaskMeasurement):
        return ""
    return " " + Waits.of(m.waits_s).short()


def _x(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.2f}x"


def report_patterns(
    targets: dict[str, list[Summary]], runs: dict[tuple[str, str, int], list[Measurement]]
) -> JsonObj:
    """Each later pattern's rate over the polling pattern's (`lifecycle`) on the same target,
    of the medians and round by round; then the blocking waits, round by round. `targets`:
    every gateway store's and reference's summaries; `runs`: every round's measurement by
    (target, measurement, concurrency)."""
    c = KEY_CONCURRENCY
    out: JsonObj = {"vs_lifecycle": {}, "blocking_waits": {}}
    later = [s for ss in targets.values() for s in ss if s.target not in ("create", "lifecycle")]
    if later:
        print(
            f"\nclient patterns at c={c}: each one's rate over the polling pattern's (lifecycle) "
            "on the same server, of the medians and round by round"
        )
        header = (
            f"{'server':<17} {'pattern':<9} {'ops/s':>8} {'http/op':>7}  {'vs poll':>7}  rounds vs"
        )
        print(header)
        print("-" * len(header))
    for target, summaries in targets.items():
        by_kind = {s.target: s for s in summaries if s.concurrency == c}
        poll = by_kind.get("lifecycle")
        for kind, s in by_kind.items():
            if kind in ("create", "lifecycle"):
                continue
            m = s.chosen
            http = m.http_requests if isinstance(m, TaskMeasurement) else 0
            per_op = f"{http / m.requests:.1f}" if m.requests else "-"
            ok = poll is not None and poll.valid and s.valid and poll.chosen.rps > 0
            median = s.chosen.rps / poll.chosen.rps if ok and poll is not None else None
            rounds = [
                g / r if r > 0 else None
                for g, r in zip(s.rounds_rps, poll.rounds_rps if poll else [], strict=False)
            ]
            print(
                f"{target:<17} {kind:<9} {m.rps:>8.1f} {per_op:>7}  {_x(median):>7}  "
                + "/".join(_x(r) for r in rounds)
            )
            out["vs_lifecycle"].setdefault(target, {})[kind] = {
                "median": None if median is None else round(median, 3),
                "rounds": [None if r is None else round(r, 3) for r in rounds],
            }
    if not any(key[1] == "blocking" for key in runs):
        return out
    print(
        f"\nblocking tasks/result: from the request to its answer, every answer of each round "
        f"(p50, p99, max; how many took over {SLOW_WAIT_S:g} s: a missed wake-up waits for a "
        "backstop)"
    )
    header = (
        f"{'server':<17} {'round':>5} {'answers':>8} {'p50 ms':>8} {'p99 ms':>8} {'max ms':>8}"
        f"  over {SLOW_WAIT_S:g}s"
    )
    print(header)
    print("-" * len(header))
    totals: list[str] = []
    for target in targets:
        rows, slow, answers = [], 0, 0
        for i, m in enumerate(runs.get((target, "blocking", c), []), 1):
            w = Waits.of(m.waits_s if isinstance(m, TaskMeasurement) else [])
            slow, answers = slow + w.slow, answers + w.answers
            print(
                f"{target:<17} {i:>5} {w.answers:>8} {w.p50_ms:>8.2f} {w.p99_ms:>8.2f} "
                f"{w.max_ms:>8.1f}  {w.slow}"
            )
            rows.append({k: None if math.isnan(v) else round(v, 3) for k, v in vars(w).items()})
        if rows:
            out["blocking_waits"][target] = rows
            totals.append(f"{target} {slow}/{answers}")
    print(f"KEY blocking tasks/result answers over {SLOW_WAIT_S:g} s: " + ", ".join(totals))
    return out
