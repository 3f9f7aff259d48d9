"""What a new task is, from the `tools/call` that asks for it and its route's policy.

Nothing is stored here: `TaskRunner.submit` checks the caller's quotas and writes the task.
"""

from __future__ import annotations

import secrets
import time
from datetime import datetime

from gateway.config import Limits, TaskPolicy
from gateway.protocol import jsonrpc
from gateway.protocol.errors import TaskError
from gateway.tasks.models import Task, TaskStatus, storable_text


def new_task_id() -> str:
    """The creation's millisecond in hex, then 144 bits from the CSPRNG (unguessable even
    where tasks are not bound to a caller; the spec asks for enough entropy, DESIGN.md for 128
    bits or more). The time first, so that ids sort by age: each store's indexes on the id
    take new ones at their end, a page a batch of creations shares, where wholly random ids
    dirtied a page of their own each (SQLite's WAL frames per creation, 9.2 to 6.1)."""
    return f"{time.time_ns() // 1_000_000:011x}{secrets.token_urlsafe(18)}"


def policy_ttl(request: jsonrpc.Request, policy: TaskPolicy, limits: Limits) -> int:
    """The task's ttl in milliseconds: the one `params.task.ttl` asks for, within what the
    route's policy and the caller's limits allow.

    Raises:
        TaskError: params.task.ttl is not a non-negative number.
    """
    params = jsonrpc.param(request, "task") or {}
    requested = params.get("ttl")
    if requested is not None:
        # The schema types ttl as a number; milliseconds below one mean nothing.
        if not isinstance(requested, int | float) or isinstance(requested, bool) or requested < 0:
            raise TaskError("params.task.ttl must be a non-negative number of milliseconds")
        requested = int(requested)
    return min(policy.ttl(requested), limits.max_ttl_ms or policy.max_ttl_ms)


def new_task(
    request: jsonrpc.Request,
    *,
    task_id: str,
    now: datetime,
    owner: str,
    route: str,
    ttl: int,
    poll_interval_ms: int,
    generation: str,
    repeatable: bool,
) -> Task:
    """The task `request` makes, working from `now`."""
    name = jsonrpc.param(request, "name")
    return Task(
        task_id=task_id,
        owner=owner,
        route=route,
        tool=storable_text(name) if isinstance(name, str) else "",
        status=TaskStatus.WORKING,
        created_at=now,
        updated_at=now,
        ttl_ms=ttl,
        poll_interval_ms=poll_interval_ms,
        progress_token=jsonrpc.progress_token(request),
        generation=generation,
        repeatable=repeatable,
    )
