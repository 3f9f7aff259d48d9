"""The gateway's own task vocabulary: the only shapes the store and the task API exchange.

A `Task` is the gateway-owned record of one task-augmented `tools/call`. Its `Outcome` is
what the upstream gave back, stored raw (the exact result object, or the exact JSON-RPC
error object), so `tasks/result` returns precisely what the call would have returned and a
later protocol generation can be served from the same rows. `status_for()` is the one place
that maps an outcome to a terminal status; `status_2026()` is how a reader of the 2026-07-28
tasks extension sees the stored status (a 2025-11-25 reader sees it as stored).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from enum import StrEnum

from pydantic import BaseModel, ConfigDict

from gateway.protocol.jsonrpc import JsonObject, RequestId
from gateway.protocol.outcome import Outcome


class TaskStatus(StrEnum):
    WORKING = "working"
    INPUT_REQUIRED = "input_required"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"

    @property
    def terminal(self) -> bool:
        return self in TERMINAL


TERMINAL = frozenset({TaskStatus.COMPLETED, TaskStatus.FAILED, TaskStatus.CANCELLED})

# working -> input_required <-> working -> completed | failed | cancelled; terminal is final.
_ALLOWED: dict[TaskStatus, frozenset[TaskStatus]] = {
    TaskStatus.WORKING: frozenset({TaskStatus.INPUT_REQUIRED, *TERMINAL}),
    TaskStatus.INPUT_REQUIRED: frozenset({TaskStatus.WORKING, *TERMINAL}),
    TaskStatus.COMPLETED: frozenset(),
    TaskStatus.FAILED: frozenset(),
    TaskStatus.CANCELLED: frozenset(),
}


def may_transition(current: TaskStatus, new: TaskStatus) -> bool:
    """The spec's lifecycle: the only transitions any writer may make."""
    return new in _ALLOWED[current]


_SOURCES = {new: tuple(s for s in TaskStatus if may_transition(s, new)) for new in TaskStatus}


def sources_of(new: TaskStatus) -> tuple[TaskStatus, ...]:
    """The statuses a task may be in for a writer to move it to `new` (what a store's
    conditional update matches)."""
    return _SOURCES[new]


def utcnow() -> datetime:
    return datetime.now(UTC)


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)
#: `n * _MILLISECOND` is a third of `timedelta(milliseconds=n)`'s cost, which every poll paid.
_MILLISECOND = timedelta(milliseconds=1)


def epoch_us(moment: datetime) -> int:
    """Whole microseconds since the Unix epoch: as stored and as put in list cursors, because
    integers keep ordering and equality exact, which ISO strings with offsets do not."""
    return (moment - _EPOCH) // _MICROSECOND


def from_epoch_us(us: int) -> datetime:
    """The UTC moment `epoch_us` gave `us` for."""
    return _EPOCH + us * _MICROSECOND


# Bounded memo: isoformat costs a microsecond, and every poll of a task formats the same two
# moments of it again (its creation and last update); 4,096 moments are a few hundred KiB.
@functools.lru_cache(maxsize=4096)
def iso(moment: datetime) -> str:
    """ISO 8601 in UTC with millisecond precision, as the SDKs print it."""
    if moment.tzinfo is not UTC:
        moment = moment.astimezone(UTC)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def owner_of(route: str, principal: str | None) -> str | None:
    """Whom a principal's tasks belong to, in either generation (None without a principal).

    The route is part of it: a principal is a name one route's authenticator vouches for,
    and an API key's "alice" on one route is not a token's "alice" on another.
    """
    return f"principal:{route}:{principal}" if principal else None


def names_nothing_stored(task_id: str) -> bool:
    """True for an id no store holds: one with a NUL, which PostgreSQL's text cannot hold
    (SQLite can), so that a client's id never reaches a store that would fail on it."""
    return "\x00" in task_id


def storable_text(text: str) -> str:
    """Free text a task keeps (a tool's name, an upstream's message) with each NUL replaced
    by U+FFFD: PostgreSQL's text cannot hold one, and both stores keep the same."""
    return text.replace("\x00", "\ufffd") if "\x00" in text else text


def principal_of(task: Task) -> str | None:
    """The principal a task belongs to (`owner_of` read back); None for a task of a caller
    without one (a session's, or an anonymous 2026-07-28 caller's)."""
    prefix = f"principal:{task.route}:"
    return task.owner.removeprefix(prefix) if task.owner.startswith(prefix) else None


class TaskFilter(BaseModel):
    """Which tasks an operator means, of every owner: each field set narrows the choice."""

    model_config = ConfigDict(frozen=True)

    route: str | None = None
    principal: str | None = None
    status: TaskStatus | None = None
    #: Only tasks created before this moment.
    created_before: datetime | None = None
    #: At most this many, oldest first.
    limit: int = 1000


@dataclass(frozen=True, slots=True, kw_only=True)
class Task:
    """A task as the store keeps it. Not a pydantic model as the other shapes here are: it is
    made only by the gateway and from its own rows, never parsed, and it is read on every
    request about a task; a model's every attribute read goes through pydantic's
    `__getattr__` hook (some 100 reads a creation), and each task in flight carried a dict
    and a set of its fields."""

    task_id: str
    #: Whose task this is: the route and principal (`owner_of`); with no authentication the
    #: 2025-11-25 session that made it, or the route's anonymous 2026-07-28 callers alike.
    owner: str
    route: str
    tool: str
    status: TaskStatus
    status_message: str | None = None
    created_at: datetime
    updated_at: datetime
    #: Milliseconds from creation before the task and its result may be deleted; None: never.
    ttl_ms: int | None
    poll_interval_ms: int
    #: The progress token the client sent with the call, echoed on relayed progress.
    progress_token: RequestId | None = None
    #: The protocol generation of the request that made the task ("2025-11-25" or
    #: "2026-07-28"); either may read it, each rendered by the reader's rules.
    generation: str = "2025-11-25"
    #: Whether the task runs again from its stored request when the gateway stopped while it
    #: ran: decided when it is created and kept with it.
    repeatable: bool = False
    #: Which run of the task this is; the first is 1 (see `tasks.recovery`).
    attempt: int = 1

    @property
    def expires_at(self) -> datetime | None:
        return None if self.ttl_ms is None else self.created_at + self.ttl_ms * _MILLISECOND

    def expired(self, now: datetime) -> bool:
        expires = self.expires_at
        return expires is not None and now >= expires

    def wire(self) -> JsonObject:
        """The protocol's `Task` object (tasks/get, tasks/list, CreateTaskResult, notifications)."""
        out: JsonObject = {
            "taskId": self.task_id,
            "status": self.status.value,
            "createdAt": iso(self.created_at),
            "lastUpdatedAt": iso(self.updated_at),
            "ttl": self.ttl_ms,
            "pollInterval": self.poll_interval_ms,
        }
        if self.status_message is not None:
            out["statusMessage"] = self.status_message
        return out


def _first_text(result: JsonObject) -> str | None:
    content = result.get("content")
    if isinstance(content, list):
        for block in content:
            if isinstance(block, dict) and block.get("type") == "text":
                text = block.get("text")
                if isinstance(text, str):
                    return text
    return None


#: The statusMessage the runner stores while a task waits for its client's answers: the
#: 2025-11-25 words, and the same wait in the tasks extension's (`status_2026`).
INPUT_MESSAGE = "waiting for the client's answer: call tasks/result to receive the request"
INPUT_MESSAGE_2026 = "waiting for the client's answers: see inputRequests, answer with tasks/update"


def status_for(outcome: Outcome) -> tuple[TaskStatus, str | None]:
    """The terminal status and statusMessage an outcome gives a task.

    A tool result with `isError: true` is a *result* (tasks/result returns it as is), yet the
    task is `failed`: the spec's rule for tool calls. A JSON-RPC error fails the task too.
    """
    if outcome.kind == "error":
        message = outcome.body.get("message")
        if not isinstance(message, str):
            return TaskStatus.FAILED, "the call failed"
        return TaskStatus.FAILED, storable_text(message)
    if outcome.body.get("isError") is True:
        text = _first_text(outcome.body)
        return TaskStatus.FAILED, storable_text(text) if text else "the tool reported an error"
    return TaskStatus.COMPLETED, None


def status_2026(task: Task, outcome: Outcome | None) -> tuple[TaskStatus, str | None]:
    """The status and statusMessage a reader of the tasks extension (2026-07-28) sees.

    A tool result with `isError` completes the task there (`failed` is for JSON-RPC errors
    only), and a completed task carries no message. The store keeps one message, so the
    runner's own wait message is recognised by its text and told in the extension's words;
    any other, an upstream's progress included, is shown as it came.
    """
    status = task.status
    if status is TaskStatus.FAILED and outcome is not None and outcome.kind == "result":
        status = TaskStatus.COMPLETED
    if task.status_message == INPUT_MESSAGE:
        return status, INPUT_MESSAGE_2026
    return status, None if status is TaskStatus.COMPLETED else task.status_message


class InputRequest(BaseModel):
    """A question the upstream asked during a task's call, kept until it is answered.

    The 2026-07-28 generation shows the pending ones in `tasks/get` as `inputRequests`, under
    `key`, and takes their answers in `tasks/update`; `upstream_id` is the id the upstream
    gave its request, under which the answer goes back.
    """

    model_config = ConfigDict(frozen=True)

    task_id: str
    #: Minted by the gateway, unique for the task's lifetime (the extension requires it).
    key: str
    method: str
    params: JsonObject
    upstream_id: RequestId
    created_at: datetime


class AttemptCall(BaseModel):
    """The upstream request of a task's latest attempt, kept with the task until its terminal
    write so that a later process can cancel it there (`notifications/cancelled`)."""

    model_config = ConfigDict(frozen=True)

    task_id: str
    #: The HTTP upstream's `Mcp-Session-Id`; None without one (stdio, or no session).
    session_id: str | None
    #: The id the gateway gave the request upstream.
    request_id: RequestId


class SessionRecord(BaseModel):
    """What survives a restart of a client session: enough to carry on with the same id."""

    model_config = ConfigDict(frozen=True)

    session_id: str
    route: str
    principal: str | None = None
    protocol_version: str
    #: The client's initialize request and initialized notification, replayed upstream when
    #: the session is first used after a restart.
    initialize: JsonObject
    initialized: JsonObject | None = None
    created_at: datetime
    #: The HTTP upstream's `Mcp-Session-Id` for this session (None for stdio, or before the
    #: upstream gave one): with a shared store, another replica carries the same upstream
    #: session on instead of opening a new one.
    upstream_session_id: str | None = None
    #: The protocol version that upstream session speaks (its `MCP-Protocol-Version`).
    upstream_protocol_version: str | None = None
