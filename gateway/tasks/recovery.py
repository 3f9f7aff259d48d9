"""What becomes of a task whose process was lost while it ran: run it again, or fail it.

The one decision for every store: the SQLite gateway makes it at start-up for the live tasks
its previous process left, and a PostgreSQL replica makes it for the tasks of a replica whose
lease expired. It reads only the task (whether it is repeatable is stored with it, so a config
edit after the loss changes nothing for it) and the bounds its route sets (attempts, time
limit); the time limit and the ttl count from the task's creation, never from a re-run.
`losses` acts on it; `gateway/recovery/` tells the whole story.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from gateway.protocol import jsonrpc
from gateway.tasks.models import Task

#: A task still running at shutdown (a tool safe to repeat is left live instead).
SHUTDOWN_MESSAGE = "interrupted: gateway shut down"
#: A lost task that is not run again, as every such task was failed before re-runs existed.
INTERRUPTED_MESSAGE = "interrupted: gateway restarted"
#: The same, when the process was one of several replicas and a survivor settles its tasks.
REPLICA_LOST_MESSAGE = "interrupted: the gateway replica running it was lost"


@dataclass(frozen=True, slots=True)
class Rerun:
    """Run the task again as `attempt`, with `message` as its statusMessage."""

    attempt: int
    message: str
    #: Seconds the run has left of `tasks.time_limit_seconds` (None: no limit).
    time_left: float | None


@dataclass(frozen=True, slots=True)
class Fail:
    """Fail the task with `message` (statusMessage, and the internal error's message)."""

    message: str


@dataclass(frozen=True, slots=True)
class Bounds:
    """What a route allows a lost task: runs in all, and how long from its creation."""

    max_attempts: int
    time_limit_seconds: float | None


def after_loss(
    task: Task, now: datetime, policy: Bounds, lost: str = INTERRUPTED_MESSAGE
) -> Rerun | Fail:
    """Whether a task that was live when its process was lost runs again, or fails and why.

    A repeatable task runs again while it has attempts left (`max_attempts`, the first run
    included), is within its time limit and its ttl; any other fails, with `lost` saying
    how its process was lost. A task already
    terminal is not the caller's to recover: it gets a Fail that the store will refuse to write.
    """
    if task.status.terminal or not task.repeatable:
        return Fail(lost)
    not_again = f"{lost}; not run again"
    if task.attempt >= policy.max_attempts:
        return Fail(f"{not_again} after {task.attempt} attempts")
    time_left = None
    if policy.time_limit_seconds is not None:
        limit = timedelta(seconds=policy.time_limit_seconds)
        time_left = (task.created_at + limit - now).total_seconds()
        if time_left <= 0:
            return Fail(f"{not_again} past its time limit (tasks.time_limit_seconds)")
    if task.expired(now):
        return Fail(f"{not_again} past its ttl")
    attempt = task.attempt + 1
    message = f"restarted after the gateway stopped: attempt {attempt} of {policy.max_attempts}"
    return Rerun(attempt=attempt, message=message, time_left=time_left)


def kept_call(request: jsonrpc.Request, capabilities: jsonrpc.JsonObject) -> jsonrpc.JsonObject:
    """What a repeatable task keeps to run again: its tools/call parameters (no `_meta`, no
    `task`: a re-run has its own token and is no client's request) and the question
    capabilities its upstream session was opened with. Never a credential."""
    params = {k: v for k, v in (request.params or {}).items() if k not in ("_meta", "task")}
    return {"params": params, "capabilities": capabilities}


def call_of(kept: jsonrpc.JsonObject) -> tuple[jsonrpc.Request, jsonrpc.JsonObject]:
    """The tools/call and capabilities `kept_call` kept."""
    params = kept.get("params")
    capabilities = kept.get("capabilities")
    request = jsonrpc.Request(
        jsonrpc="2.0",
        id=0,
        method="tools/call",
        params=params if isinstance(params, dict) else {},
    )
    return request, capabilities if isinstance(capabilities, dict) else {}
