"""The PostgreSQL store's task and outcome writes: creation, status moves and the terminal write.

A task is created with this replica as its runner, and each later write of the runner's
carries `runner = <this replica>` in its WHERE, beside the status check: check and write are
one statement, which PostgreSQL re-checks against the latest row when another transaction
changed it first (a takeover, a cancel), so a write never lands on a row that stopped being
its to make. The functions here run inside the store's transaction for the write.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Sequence
from datetime import datetime
from typing import Any

from gateway.protocol.jsonrpc import JsonObject
from gateway.protocol.outcome import Outcome
from gateway.tasks.models import Task, TaskStatus, epoch_us
from gateway.tasks.store.postgres import attempts, inputs
from gateway.tasks.store.postgres.schema import LOCKS, OWNER_LOCK, SQL, Connection, appending
from gateway.tasks.store.rows import TASK_COLUMNS, json_text, task_from_row
from gateway.tasks.store.sql import LIVE_SQL
from gateway.tasks.store.writes import change

#: A write of one or more task rows, returning the tasks it moved.
Move = Callable[[Connection], Awaitable[list[Task]]]

#: An owner's stored bytes: outcomes and kept requests.
STORED_BYTES = (
    "SELECT coalesce(sum(octet_length(o.body)), 0) + coalesce(sum(octet_length(c.request)), 0)"
    " FROM tasks t LEFT JOIN outcomes o USING (task_id) LEFT JOIN task_calls c USING (task_id)"
    " WHERE t.owner = $1"
)

#: A task marked as waited for by a replica that does not run it (schema 8, `heed_task`):
#: one statement, the row as the mark left it.
HEED = f"SELECT {TASK_COLUMNS} FROM heed_task($1)"

_INTO = f"INSERT INTO tasks ({TASK_COLUMNS}, expires_at, runner, history, history_dropped)"
_VALUES = ", ".join(f"${n}" for n in range(1, 18))
_INSERT = f"{_INTO} VALUES ({_VALUES}, 0)"
# Inserted only while its owner (`$2`) has fewer than `$19` live tasks (`live_below`, which
# takes the lock `$18`): a row returned if it was.
_INSERT_CAPPED = f"{_INTO} SELECT {_VALUES}, 0 WHERE live_below($18, $2, $19) RETURNING 1"
#: Whether an owner (`$2`) may make one more task (`live_below`), within a transaction.
_BELOW_CAP = "SELECT live_below($1, $2, $3)"

# The message is the task's progress too: a status move replaces the statusMessage, and an
# operator still reads the latest progress.
_NOTE = (
    "UPDATE tasks SET status_message = $2, updated_at = $3, progress = $2, progress_at = $3"
    f" WHERE task_id = $1 AND {LIVE_SQL} AND runner = $4 RETURNING {TASK_COLUMNS}"
)


def inserting(task: Task, replica: str, max_active: int | None = None) -> tuple[str, list[Any]]:
    """The statement that inserts `task` run by `replica`, and its parameters: alone, a
    creation with no request to keep, in one round trip. With `max_active`, only while its
    owner has fewer live tasks, and it returns a row if it inserted."""
    expires = task.expires_at
    params = [
        *(task.task_id, task.owner, task.route, task.tool, task.status.value),
        *(task.status_message, epoch_us(task.created_at), epoch_us(task.updated_at)),
        *(task.ttl_ms, task.poll_interval_ms, json_text(task.progress_token)),
        *(task.generation, task.repeatable, task.attempt),
        *(None if expires is None else epoch_us(expires), replica),
        f"[{change(task.status, task.created_at, task.status_message)}]",
    ]
    if max_active is None:
        return _INSERT, params
    return _INSERT_CAPPED, [*params, LOCKS + OWNER_LOCK, max_active]


async def create(
    db: Connection,
    task: Task,
    max_active: int | None,
    request: JsonObject | None,
    replica: str,
) -> bool:
    """Inserts `task` run by `replica`, with its request if given; False, writing nothing, if
    its owner has `max_active` live tasks already."""
    # One owner's creations queue on `live_below`'s lock, on every replica: none can slip
    # past the cap.
    if max_active is not None and not await db.fetchval(
        _BELOW_CAP, LOCKS + OWNER_LOCK, task.owner, max_active
    ):
        return False
    sql, params = inserting(task, replica)
    await db.execute(sql, *params)
    if request is not None:
        await attempts.save_request(db, task.task_id, request)
    return True


async def note(
    db: Connection, task_id: str, message: str, now: datetime, replica: str
) -> Task | None:
    """Sets the statusMessage of a live task `replica` runs; None for any other task."""
    row = await db.fetchrow(_NOTE, task_id, message, epoch_us(now), replica)
    return None if row is None else task_from_row(row)


def _moving(
    which: str | list[str],
    sources: Sequence[TaskStatus],
    status: TaskStatus,
    message: str | None,
    now: datetime,
    runner: str | None,
) -> tuple[str, list[Any]]:
    """`transition`'s statement and its parameters (`$3` is `now`)."""
    params: list[Any] = [status.value, message, epoch_us(now), [s.value for s in sources], which]
    params.append(change(status, now, message))
    named = "task_id = $5" if isinstance(which, str) else "task_id = ANY($5::text[])"
    where = ["status = ANY($4::text[])", named]
    if runner is not None:
        params.append(runner)
        where.append(f"runner = ${len(params)}")
    sql = (
        "UPDATE tasks SET status = $1, status_message = $2, updated_at = $3,"
        f" {appending('status <> $1', '$6')} WHERE {' AND '.join(where)} RETURNING {TASK_COLUMNS}"
    )
    return sql, params


def transition(
    which: str | list[str],
    sources: Sequence[TaskStatus],
    status: TaskStatus,
    message: str | None,
    now: datetime,
    runner: str | None,
) -> Move:
    """Moves the task `which` names (or those it lists) whose status is in `sources`, and with
    `runner` only those that replica runs; each one whose status changes gains a history
    entry."""
    sql, params = _moving(which, sources, status, message, now, runner)

    async def move(db: Connection) -> list[Task]:
        return [task_from_row(row) for row in await db.fetch(sql, *params)]

    return move


def finishing(
    task_id: str,
    sources: Sequence[TaskStatus],
    status: TaskStatus,
    message: str | None,
    now: datetime,
    runner: str | None,
    outcome: tuple[str, str] | None,
) -> tuple[str, list[Any]]:
    """One task's terminal write (`transition` made `ending`) as one statement, which is a
    transaction of its own: one round trip to the database instead of six (BEGIN, the move,
    the outcome, the questions, the call, COMMIT). Its parts see the same snapshot and
    touch different tables; each acts on the row the move returns, so a task not moved
    (terminal already, or not `runner`'s) keeps everything. `outcome`: its kind and its body
    as stored (JSON)."""
    sql, params = _moving(task_id, sources, status, message, now, runner)
    parts = [f"moved AS ({sql})"]
    if outcome is not None:
        params += list(outcome)
        kept = f"SELECT task_id, ${len(params) - 1}, ${len(params)} FROM moved"
        parts.append(f"kept AS (INSERT INTO outcomes (task_id, kind, body) {kept})")
    ended = "task_id IN (SELECT task_id FROM moved)"
    withdraw = "UPDATE task_inputs SET state = 'withdrawn', settled_at = $3"
    parts.append(f"withdrawn AS ({withdraw} WHERE state = 'pending' AND {ended})")
    parts.append(f"forgotten AS (DELETE FROM task_calls WHERE {ended})")
    return f"WITH {', '.join(parts)} SELECT * FROM moved", params


def ending(move: Move, outcome: Outcome | None, now: datetime) -> Move:
    """`move` as a terminal write: for each task it moved, the outcome kept, the questions
    withdrawn, the stored request and upstream call forgotten."""

    async def end(db: Connection) -> list[Task]:
        tasks = await move(db)
        ended = [task.task_id for task in tasks]
        if outcome is not None and ended:
            body = json.dumps(outcome.body)
            rows = [(task_id, outcome.kind, body) for task_id in ended]
            await db.executemany(SQL.insert_outcome, rows)
        await inputs.withdraw_all(db, ended, now)
        await attempts.forget(db, ended)
        return tasks

    return end
