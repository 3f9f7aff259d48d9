"""The run's counts as a table, the violations with the first few details, and the timings."""

from __future__ import annotations

import json
from collections import Counter

from tests.integrity.checks import KINDS, Bounds, Verdict

STATUSES = ("completed", "failed", "cancelled", "stuck")
SHOWN_DETAILS = 25


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:.1f}"


def _spread(values: list[float]) -> str:
    ordered = sorted(values)

    def at(q: float) -> float:
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))]

    return f"p50 {_ms(at(0.5))} ms, p99 {_ms(at(0.99))} ms, max {_ms(ordered[-1])} ms"


def timing(latencies: list[tuple[float, float]], bound: Bounds) -> str:
    """The blocking tasks/result's times after the terminal write, as measured and less
    the harness's own stalls."""
    if not latencies:
        return "no blocking tasks/result"
    raw = [x for x, _ in latencies]
    net = [x - stall for x, stall in latencies]
    limit = bound.p99 or bound.answer
    over = sum(1 for x in net if x > limit)
    return (
        f"{len(raw)} blocking tasks/result after the terminal write: {_spread(raw)}; less "
        f"the harness's stalls: {_spread(net)}; over {_ms(limit)} ms: {over}"
    )


def loop_lag(lags: list[float]) -> str:
    """The harness's own event-loop lag: what a timing it took may owe to itself."""
    if not lags:
        return "harness event loop not sampled"
    ordered = sorted(lags)
    p50, p99 = ordered[len(ordered) // 2], ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))]
    return f"harness event loop lag p50 {_ms(p50)} ms, p99 {_ms(p99)} ms, max {_ms(ordered[-1])} ms"


def lines(verdict: Verdict, bounds: dict[str, Bounds]) -> list[str]:
    out = [
        f"{'topology':<9} {'generation':<11} {'tool':<8} {'tasks':>6} "
        + " ".join(f"{s:>9}" for s in STATUSES)
    ]
    totals: Counter[str] = Counter()
    for (topology, generation, tool), counts in sorted(verdict.statuses.items()):
        total = sum(counts.values())
        totals.update(counts)
        cells = " ".join(f"{counts.get(s, 0):>9}" for s in STATUSES)
        out.append(f"{topology:<9} {generation:<11} {tool:<8} {total:>6} {cells}")
    cells = " ".join(f"{totals.get(s, 0):>9}" for s in STATUSES)
    out.append(f"{'all':<30} {sum(totals.values()):>6} {cells}")
    routes = ", ".join(f"{t}/{r} {n}" for (t, r), n in sorted(verdict.routes.items()))
    out.append(f"tasks by route: {routes}")
    out.append("")
    for kind in KINDS:
        out.append(f"{kind:<22} {verdict.violations.get(kind, 0)}")
    for kind, count in sorted(verdict.accepted.items()):
        out.append(f"{'(allowed) ' + kind:<44} {count}")
    for topology, bound in bounds.items():
        line = timing(verdict.latencies.get(topology, []), bound)
        untimed = verdict.untimed.get(topology, 0)
        if untimed:
            line += f"; {untimed} tasks not timed (their terminal write has no audit line)"
        out.append(f"{topology}: {line}")
        built = verdict.built.get(topology)
        if built:
            out.append(f"{topology}: of which terminal write -> result read out: {_spread(built)}")
    if verdict.details:
        out.append("")
        out.extend(verdict.details[:SHOWN_DETAILS])
        if len(verdict.details) > SHOWN_DETAILS:
            out.append(f"... and {len(verdict.details) - SHOWN_DETAILS} more")
    return out


def as_json(verdict: Verdict) -> str:
    return json.dumps(
        {
            "statuses": {"/".join(k): dict(v) for k, v in verdict.statuses.items()},
            "violations": dict(verdict.violations),
            "accepted": dict(verdict.accepted),
            # (as measured, of which the harness's own stall), ms
            "latencies_ms": {
                t: [(round(x * 1000, 2), round(s * 1000, 2)) for x, s in sorted(xs)]
                for t, xs in verdict.latencies.items()
            },
            "details": verdict.details,
        }
    )
