"""One call of the mix, and what its client saw of it: the record every check reads.

A call is a tool, its arguments (with a `nonce` no other call has), the route and the
generation of the client that makes it; on the member route, also the member (upstream) it is
for, its tool called as MEMBER__TOOL. The client fills in what it saw: the task id and
the gateway that made the task, every `tasks/get` it sent (when, and the status it read), each
`tasks/result` that answered (sent, arrived), the delivered result or error, the final status,
and any protocol surprise on the way (`problems`).
"""

from __future__ import annotations

import random
import secrets
from dataclasses import dataclass, field
from typing import Any

from tests.integrity.procs import SEPARATOR

JsonObj = dict[str, Any]

#: The mix: tool -> weight.
WEIGHTS = {"instant": 3, "slow": 3, "ask": 2, "fail": 1, "error": 1, "hang": 1}
TERMINAL = ("completed", "failed", "cancelled")
#: How long `hang` would sleep if nobody cancelled it.
HANG_MS = 120_000


def nonce() -> str:
    return "n" + secrets.token_hex(12)


def answer_for(nonce: str) -> str:
    """What a client answers to the question of the `ask` call with this nonce."""
    return f"a-{nonce}"


@dataclass
class Poll:
    """One tasks/get: when it was sent, and the status it read."""

    sent: float
    status: str
    where: str


@dataclass
class Wait:
    """One tasks/result that answered: sent and arrived (time.time()), and where."""

    sent: float
    arrived: float
    where: str


@dataclass
class Call:
    tool: str
    route: str
    generation: str
    topology: str
    client: str
    args: JsonObj
    #: On the member route: the member (an upstream) whose tool it calls.
    member: str | None = None
    #: 2025-11-25: wait on tasks/result at once ("block") or poll tasks/get ("poll").
    mode: str = "block"
    #: hang: seconds after the task's creation that the client cancels it.
    cancel_after: float = 0.0
    task_id: str | None = None
    #: The gateway that answered the tools/call with the new task, and when.
    created_on: str | None = None
    created_at: float = 0.0
    #: The tools/call broke on its way (the connection, while a gateway was stopped): the
    #: failure's (gateway, time), for the check to match against the run's faults.
    cut: tuple[str, float] | None = None
    #: Requests of the task (reads, answers, its cancel) that broke on their way and were
    #: sent again to the next gateway: (gateway, time, why) each, matched against the faults.
    breaks: list[tuple[str, float, str]] = field(default_factory=list)
    polls: list[Poll] = field(default_factory=list)
    waits: list[Wait] = field(default_factory=list)
    #: ("result" | "error" | "none", the object); None until something was delivered.
    delivered: tuple[str, JsonObj] | None = None
    status: str | None = None
    status_message: str | None = None
    last_updated: str | None = None
    #: The 2026-07-28 tools/call answered the result itself (no task).
    direct: bool = False
    #: MRTR rounds the 2026-07-28 tools/call took before it made the task.
    mrtr_rounds: int = 0
    #: 2025-11-25: its question came on the session's GET stream, with no related-task meta
    #: (the gateway could not tell which call asked: a stdio upstream, several calls).
    unattributed: int = 0
    #: Its tasks/cancel was sent (hang) at this time.
    cancelled_at: float | None = None
    #: The client gave up waiting for a terminal status.
    stuck: bool = False
    problems: list[str] = field(default_factory=list)

    @property
    def nonce(self) -> str:
        return str(self.args["nonce"])

    @property
    def upstream(self) -> str:
        """The upstream that must run it (its answers are the reference)."""
        return self.member or self.route

    @property
    def name(self) -> str:
        """The tool's name as the client calls it."""
        return f"{self.member}{SEPARATOR}{self.tool}" if self.member else self.tool

    @property
    def where(self) -> str:
        """The route, and the member: `members/py-http`."""
        return f"{self.route}/{self.member}" if self.member else self.route

    def label(self) -> str:
        return f"{self.topology}/{self.generation}/{self.where}/{self.tool} {self.nonce}"

    def budget(self) -> float:
        """Seconds the tool works upstream (hang: until its cancel)."""
        if self.tool == "slow":
            return float(self.args["ms"]) / 1000
        return self.cancel_after if self.tool == "hang" else 0.0


def draw(
    rng: random.Random,
    topology: str,
    generation: str,
    client: str,
    routes: tuple[str, ...],
    members: tuple[str, ...] = (),
) -> Call:
    """A call of the mix: tool and route at random, its timings drawn too; on a route of
    `members`, which member's tool too."""
    tool = rng.choices(list(WEIGHTS), weights=list(WEIGHTS.values()))[0]
    args: JsonObj = {"nonce": nonce()}
    if tool == "slow":
        args["ms"] = rng.randrange(100, 1500)
        args["steps"] = rng.randrange(1, 6)
    elif tool == "hang":
        args["ms"] = HANG_MS
    call = Call(tool, rng.choice(routes), generation, topology, client, args)
    if members:
        call.member = rng.choice(members)
    if generation == "2025-11-25" and tool not in ("ask", "hang"):
        call.mode = rng.choices(["block", "poll"], weights=[3, 1])[0]
    if tool == "hang":
        call.cancel_after = rng.uniform(0.2, 1.5)
    return call


@dataclass
class Fault:
    """A gateway stopped on purpose: SIGKILL ("kill") or SIGTERM and a new start
    ("restart"), at `at`; serving again from `back` (None: not again in the run)."""

    kind: str
    gateway: str
    at: float
    back: float | None = None

    def covers(self, gateway: str, moment: float) -> bool:
        """A request to `gateway` that broke at `moment` may have been broken by this."""
        end = self.back if self.back is not None else float("inf")
        return gateway == self.gateway and self.at <= moment <= end + 1.0
