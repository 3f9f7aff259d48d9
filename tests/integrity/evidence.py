"""What the processes wrote down: the upstreams' runs file and the gateways' audit lines.

The runs file (`upstream_py.py`, `upstream_ts.mjs`) has a line per start, end or cancellation
of a tool run, keyed by the call's nonce and naming the upstream: how many times, and where,
the upstreams ran each call. The audit
lines (`gateway/observability/audit.py`, one file per gateway) give, per task, its creation
(with the call's arguments, so its nonce: `audit.include_arguments` is on), its terminal write
(`task_status_changed` with a terminal status, stamped to the millisecond just after the
store's commit returned), and its re-runs (`task_rerun`).
"""

from __future__ import annotations

import bisect
import json
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from tests.integrity.calls import TERMINAL, JsonObj


def stalled(samples: list[tuple[float, float]], start: float, end: float) -> float:
    """How long, at most, the harness's loop was stalled within [start, end], from its lag
    samples in order: one that woke at w, l late, says it was stalled over [w - l, w]."""
    worst = 0.0
    for woke, lag in samples[bisect.bisect_left(samples, (start, 0.0)) :]:
        if woke - lag > end:
            break
        worst = max(worst, min(woke, end) - max(woke - lag, start))
    return worst


def epoch(stamp: str) -> float:
    """An ISO 8601 time (the audit's, or a task's lastUpdatedAt) as Unix seconds."""
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


@dataclass
class Runs:
    """The upstream runs of each nonce: (event, time) in file order; and each run's JSON-RPC
    id in its upstream session, with the time it was in flight."""

    events: dict[str, list[tuple[str, float]]] = field(default_factory=lambda: defaultdict(list))
    #: nonce -> the upstream of each start.
    ran_on: dict[str, list[str]] = field(default_factory=lambda: defaultdict(list))
    #: (upstream session, JSON-RPC id) -> [start, end] of each run that came with it.
    flights: dict[tuple[str, str], list[list[float]]] = field(
        default_factory=lambda: defaultdict(list)
    )

    @classmethod
    def read(cls, path: Path) -> Runs:
        runs = cls()
        open_runs: dict[tuple[str, str, str], list[float]] = {}
        for line in path.read_text().splitlines():
            event = json.loads(line)
            moment = float(event["t"])
            runs.events[event["nonce"]].append((event["event"], moment))
            key = (str(event["session"]), json.dumps(event["id"]))
            if event["event"] == "start":
                runs.ran_on[event["nonce"]].append(str(event.get("upstream")))
                flight = [moment, float("inf")]
                runs.flights[key].append(flight)
                open_runs[(*key, event["nonce"])] = flight
            elif (*key, event["nonce"]) in open_runs:
                open_runs.pop((*key, event["nonce"]))[1] = moment
        return runs

    def reused(self) -> tuple[list[str], int]:
        """Ids an upstream session saw on two calls in flight at once (what a stateful
        upstream cannot tell apart: DESIGN, "Its own answer"); and how many ids came again
        in a session after their first call had ended (allowed by JSON-RPC)."""
        overlaps, later = [], 0
        for (session, request_id), flights in self.flights.items():
            flights.sort()
            busy_until = flights[0][1]
            for start, end in flights[1:]:
                if start < busy_until:
                    overlaps.append(f"session {session}: id {request_id} on two calls at once")
                else:
                    later += 1
                busy_until = max(busy_until, end)
        return overlaps, later

    def starts(self, nonce: str) -> int:
        return sum(1 for event, _ in self.events.get(nonce, ()) if event == "start")

    def elsewhere(self, nonce: str, upstream: str) -> list[str]:
        """The upstreams other than `upstream` that started the call."""
        return sorted({where for where in self.ran_on.get(nonce, ()) if where != upstream})

    def stopped_by(self, nonce: str, moment: float) -> bool:
        """The upstream saw the call's cancellation before `moment`."""
        return any(e == "cancelled" and t <= moment for e, t in self.events.get(nonce, ()))


@dataclass
class TaskTrail:
    """One task's audit lines, from every gateway."""

    task_id: str
    nonce: str | None = None
    created_by: str | None = None
    #: (time, status, gateway) of each terminal write.
    terminal: list[tuple[float, str, str]] = field(default_factory=list)
    reruns: int = 0
    #: (time, gateway) of each `task_result_retrieved`: a result read out for a client
    #: (tasks/result's answer built, or a terminal tasks/get of 2026-07-28).
    retrieved: list[tuple[float, str]] = field(default_factory=list)


@dataclass
class Audit:
    tasks: dict[str, TaskTrail] = field(default_factory=dict)
    by_nonce: dict[str, str] = field(default_factory=dict)

    def read(self, gateway: str, path: Path) -> None:
        if not path.exists():
            return
        for line in path.read_text().splitlines():
            try:
                event: JsonObj = json.loads(line)
            except ValueError:
                continue  # a line cut short by a SIGKILL
            task_id = event.get("task_id")
            if not isinstance(task_id, str):
                continue
            trail = self.tasks.setdefault(task_id, TaskTrail(task_id))
            kind = event["event"]
            if kind == "task_created":
                trail.created_by = gateway
                nonce = (event.get("arguments") or {}).get("nonce")
                if isinstance(nonce, str):
                    trail.nonce = nonce
                    self.by_nonce[nonce] = task_id
            elif kind == "task_status_changed" and event.get("status") in TERMINAL:
                trail.terminal.append((epoch(event["time"]), event["status"], gateway))
            elif kind == "task_rerun":
                trail.reruns += 1
            elif kind == "task_result_retrieved":
                trail.retrieved.append((epoch(event["time"]), gateway))

    def built(self, task_id: str | None, gateway: str, start: float, end: float) -> float | None:
        """When `gateway` read out the task's result between `start` and `end` (the audit's
        milliseconds: from the one before `start`)."""
        trail = self.tasks.get(task_id or "")
        times = [t for t, where in trail.retrieved if where == gateway] if trail else []
        within = [t for t in times if start - 0.001 <= t <= end]
        return max(within) if within else None

    def written(self, task_id: str | None) -> float | None:
        """When the task's terminal write landed (its first, if there were several)."""
        trail = self.tasks.get(task_id or "")
        if trail is None or not trail.terminal:
            return None
        return min(t for t, _, _ in trail.terminal)
