"""Every call of a run, judged: what its client got against what the upstream answered, ran and
when the gateway wrote its end.

For each task: (i) the result or error delivered equals the upstream's own answer to that call
(`probe.Templates`), the gateway's related-task meta and `resultType` aside; (ii) it reached a
terminal status, the one its tool implies for the reader's generation; (iii) the upstream ran
it once, or once per attempt where the task was re-run (`task_rerun` in the audit), and no
other upstream ran it (on the member route: the member its name named); a cancelled `hang`
was stopped upstream; (iv) each blocking `tasks/result` answered within the bound of the
terminal write, and no `tasks/get` sent after that bound read a live status.

The one documented exception: a task running on a gateway that was killed ends `failed` with
REPLICA_LOST_MESSAGE, and one running on a gateway stopped with SIGTERM with SHUTDOWN_MESSAGE,
unless its tool is repeatable (then it runs again and must end as any other). A request broken
on its way while a gateway was being stopped is sent again elsewhere; one broken while no
gateway was stopped is a violation.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field

from gateway.tasks.recovery import REPLICA_LOST_MESSAGE, SHUTDOWN_MESSAGE
from gateway.tasks.stops import CANCELLED_MESSAGE
from tests.integrity.calls import TERMINAL, Call, Fault, JsonObj
from tests.integrity.evidence import Audit, Runs, epoch, stalled
from tests.integrity.probe import Templates
from tests.integrity.procs import MAX_ATTEMPTS, REPEATABLE, REPEATABLE_ROUTE

#: How a task running on a stopped gateway may end: failed by the survivors that took over its
#: lease, or (SIGTERM) by the gateway itself as it shut down.
LOST_MESSAGES = {
    "kill": (REPLICA_LOST_MESSAGE,),
    "restart": (SHUTDOWN_MESSAGE, REPLICA_LOST_MESSAGE),
}
INTERNAL_ERROR = -32603
#: What a tool's task ends as, per generation (2025-11-25: an isError result is `failed`).
STATUS = {
    "2025-11-25": {"fail": "failed", "error": "failed", "hang": "cancelled"},
    "2026-07-28": {"error": "failed", "hang": "cancelled"},
}
#: Violations, in the order the table prints them.
KINDS = (
    "lost",
    "stuck",
    "wrong status",
    "mismatched",
    "ran twice",
    "wrong upstream",
    "not run",
    "not stopped upstream",
    "late",
    "stale read",
    "two terminal writes",
    "id reused in flight",
    "broken stream",
    "protocol",
    "unknown run",
)


@dataclass(frozen=True)
class Bounds:
    """The contract's times for a topology (DESIGN, "What a task's result must be")."""

    #: A blocking tasks/result, after the terminal write: every one.
    answer: float
    #: ... and at the 99th percentile (None: no separate bound).
    p99: float | None
    #: A tasks/get sent this long after the terminal write must read it.
    stale: float


@dataclass
class Verdict:
    #: (topology, generation, tool) -> status -> tasks.
    statuses: dict[tuple[str, str, str], Counter[str]] = field(default_factory=dict)
    #: (topology, route or route/member) -> tasks.
    routes: Counter[tuple[str, str]] = field(default_factory=Counter)
    violations: Counter[str] = field(default_factory=Counter)
    details: list[str] = field(default_factory=list)
    #: What the contract allows and the run saw: interrupted, re-run, cut by a fault ...
    accepted: Counter[str] = field(default_factory=Counter)
    #: topology -> seconds from terminal write to the blocking tasks/result's answer, and
    #: how long of that the harness's own event loop was stalled.
    latencies: dict[str, list[tuple[float, float]]] = field(default_factory=dict)
    #: topology -> terminal writes timed by the task's lastUpdatedAt (no audit line).
    untimed: Counter[str] = field(default_factory=Counter)
    #: topology -> for each blocking tasks/result: seconds from the terminal write to the
    #: gateway's reading out the result (its audit line), where it has one: the part of the
    #: time spent before the answer left the gateway's hands.
    built: dict[str, list[float]] = field(default_factory=dict)

    def violate(self, kind: str, call: Call | None, detail: str) -> None:
        self.violations[kind] += 1
        self.details.append(f"{kind}: {call.label() if call else ''} {detail}")


@dataclass
class Judge:
    templates: Templates
    runs: Runs
    audit: Audit
    faults: list[Fault]
    bounds: dict[str, Bounds]
    #: topology -> when its clients were done (before any gateway was stopped).
    ended: dict[str, float]
    #: topology -> the harness's event-loop lag samples: (when it woke, how late), in order.
    lags: dict[str, list[tuple[float, float]]]
    verdict: Verdict = field(default_factory=Verdict)

    def all(self, calls: list[Call]) -> Verdict:
        for call in calls:
            self.judge(call)
        self.unknown(calls)
        self.ids()
        for topology, bound in self.bounds.items():
            timed = self.verdict.latencies.get(topology, [])
            latencies = sorted(raw - stall for raw, stall in timed)
            if bound.p99 is not None and latencies:
                p99 = latencies[min(len(latencies) - 1, int(0.99 * len(latencies)))]
                if p99 > bound.p99:
                    detail = f"{topology}: p99 {p99 * 1000:.1f} ms > {bound.p99 * 1000:g} ms"
                    self.verdict.violate("late", None, detail + " (less the harness's stalls)")
        return self.verdict

    def _excused(self, where: str, moment: float) -> bool:
        return any(fault.covers(where, moment) for fault in self.faults)

    def judge(self, call: Call) -> None:
        v = self.verdict
        for where, moment, why in call.breaks:
            if not self._excused(where, moment):
                v.violate("broken stream", call, f"a request to {where} broke ({why}), no fault")
        for problem in call.problems:
            v.violate("protocol", call, problem)
        if call.task_id is None:
            if call.cut is not None and self._excused(*call.cut):
                v.accepted["tools/call cut by a fault"] += 1
                self._ran(call, None, self._cut_reruns(call))
            elif call.cut is not None:
                v.violate("lost", call, f"tools/call to {call.cut[0]} broke, no fault there")
            elif call.stuck:
                v.violate("stuck", call, "the tools/call itself never answered")
            elif not call.problems:
                v.violate("lost", call, "no task and no answer")
            return
        key = (call.topology, call.generation, call.tool)
        v.routes[call.topology, call.where] += 1
        if call.mrtr_rounds:
            v.accepted["2026-07-28 calls that took an MRTR round first"] += 1
        if call.unattributed:
            v.accepted["questions on the GET stream, no related-task (stdio)"] += 1
        if call.stuck or call.status not in TERMINAL:
            v.statuses.setdefault(key, Counter())["stuck"] += 1
            v.violate("stuck", call, f"{call.task_id} last read {call.status}")
            return
        v.statuses.setdefault(key, Counter())[str(call.status)] += 1
        trail = self.audit.tasks.get(call.task_id)
        reruns = trail.reruns if trail is not None else 0
        if trail is not None and len(trail.terminal) > 1:
            v.violate("two terminal writes", call, f"{trail.terminal}")
        lost = self._lost(call)
        if lost is not None:
            v.accepted["interrupted with its gateway"] += 1
            status, delivered = "failed", ("error", {"code": INTERNAL_ERROR, "message": lost})
        else:
            status, delivered = self._expected(call)
        if reruns:
            v.accepted["re-run after its gateway was lost"] += 1
        if call.status != status:
            v.violate("wrong status", call, f"{call.status} ({call.status_message}), not {status}")
        # As text, keys in the order they came: byte for byte, once the gateway's own meta
        # is out (json.loads keeps the order, json.dumps writes it back).
        if json.dumps(call.delivered) != json.dumps(delivered):
            v.violate("mismatched", call, f"got {call.delivered}, upstream said {delivered}")
        self._ran(call, lost, reruns)
        self._timing(call)

    def _cut_reruns(self, call: Call) -> int:
        """Re-runs a task may have had whose tools/call broke with its gateway: its client
        never learned its id, and the killed gateway's audit may have lost the line that
        names its nonce; so a repeatable tool's may have had every attempt the route allows."""
        task_id = self.audit.by_nonce.get(call.nonce)
        known = self.audit.tasks[task_id].reruns if task_id else 0
        if call.topology == "replicas" and call.upstream == REPEATABLE_ROUTE:
            if call.tool in REPEATABLE:  # on its own route, and on the member route
                return max(known, MAX_ATTEMPTS - 1)
        return known

    def _ending(self, call: Call) -> Fault | None:
        """The fault that stopped the gateway process that made (and ran) the task: the
        first one on its gateway that the task was made before the end of."""
        ends = [
            fault
            for fault in self.faults
            if fault.gateway == call.created_on
            and call.created_at < (fault.back if fault.back is not None else float("inf"))
        ]
        return min(ends, key=lambda fault: fault.at, default=None)

    def _lost(self, call: Call) -> str | None:
        """The documented message, if the stop of the gateway process running the task
        ended it: its terminal write came after that stop, and says so."""
        fault = self._ending(call)
        if fault is None or call.status != "failed":
            return None
        if call.status_message not in LOST_MESSAGES[fault.kind]:
            return None
        ended = self.audit.written(call.task_id)
        if ended is None and call.last_updated is not None:
            ended = epoch(call.last_updated)
        if ended is None or ended < fault.at - 0.001:  # (the audit's milliseconds)
            return None
        return call.status_message

    def _expected(self, call: Call) -> tuple[str, tuple[str, JsonObj]]:
        status = STATUS[call.generation].get(call.tool, "completed")
        if call.tool != "hang":
            return status, self.templates.expect(call.upstream, call.tool, call.nonce)
        if call.generation == "2025-11-25":
            return status, ("error", {"code": INTERNAL_ERROR, "message": CANCELLED_MESSAGE})
        return status, ("none", {})

    def _ran(self, call: Call, lost: str | None, reruns: int) -> None:
        starts = self.runs.starts(call.nonce)
        if starts > 1 + reruns:
            self.verdict.violate("ran twice", call, f"{starts} starts upstream, {reruns} re-runs")
        elsewhere = self.runs.elsewhere(call.nonce, call.upstream)
        if elsewhere:
            self.verdict.violate("wrong upstream", call, f"started on {', '.join(elsewhere)}")
        upstream_answer = call.task_id is not None and call.tool != "hang" and lost is None
        if upstream_answer and starts == 0:
            self.verdict.violate("not run", call, "a result, and no run upstream")
        if call.tool == "hang" and lost is None and call.status == "cancelled" and starts:
            if self.runs.stopped_by(call.nonce, self.ended[call.topology]):
                return
            if self._runner_gone(call):
                self.verdict.accepted["cancelled after its gateway died: left running"] += 1
            else:
                self.verdict.violate("not stopped upstream", call, "still running upstream")

    def _runner_gone(self, call: Call) -> bool:
        """The gateway that ran the call was stopped before its cancel could reach it (the
        cancel lands in the store, and no process is left to stop the call upstream)."""
        written = self.audit.written(call.task_id) or float("inf")
        fault = self._ending(call)
        return fault is not None and fault.at < written + 1.0

    def _timing(self, call: Call) -> None:
        v, bound = self.verdict, self.bounds[call.topology]
        written = self.audit.written(call.task_id)
        if written is None:
            # No audit line for the terminal write (a task failed by the survivors' recovery
            # writes none): its lastUpdatedAt is set before that write commits, so it cannot
            # time a wake-up against the commit. Counted, not judged.
            v.untimed[call.topology] += 1
            return
        for wait in call.waits:
            if wait.sent >= written:
                continue  # sent after the end: not a blocking wait
            latency = wait.arrived - written
            stall = stalled(self.lags.get(call.topology, []), written, wait.arrived)
            v.latencies.setdefault(call.topology, []).append((latency, stall))
            built = self.audit.built(call.task_id, wait.where, written, wait.arrived)
            if built is not None:
                v.built.setdefault(call.topology, []).append(max(0.0, built - written))
            if latency - stall > bound.answer and self._excused(wait.where, wait.sent):
                v.accepted["(not counted) late from a gateway being stopped or started"] += 1
            elif latency - stall > bound.answer:
                detail = f"tasks/result on {wait.where} {latency * 1000:.0f} ms"
                if built is not None:
                    detail += f" (result read out at {(built - written) * 1000:.0f} ms)"
                v.violate("late", call, f"{detail} (harness stalled {stall * 1000:.0f} ms)")
            elif latency > bound.answer:
                v.accepted["(not counted) late only by the harness's own stall"] += 1
        for poll in call.polls:
            if poll.sent > written + bound.stale and poll.status not in TERMINAL:
                late = (poll.sent - written) * 1000
                v.violate("stale read", call, f"{poll.status} on {poll.where} {late:.0f} ms")

    def ids(self) -> None:
        overlaps, later = self.runs.reused()
        for overlap in overlaps:
            self.verdict.violate("id reused in flight", None, overlap)
        if later:
            self.verdict.accepted["(not counted) ids used again in a session after the end"] = later

    def unknown(self, calls: list[Call]) -> None:
        """Runs upstream that no call of the run made."""
        nonces = {call.nonce for call in calls} | {self.templates.probe}
        for nonce in self.runs.events:
            if nonce not in nonces:
                self.verdict.violate("unknown run", None, f"the upstream ran nonce {nonce}")
