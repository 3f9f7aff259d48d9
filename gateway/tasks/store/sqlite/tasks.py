"""The SQLite store's task and outcome writes: creation, status moves and the terminal write.

Each status check sits in its UPDATE's WHERE, so check and write are one statement; and the
file's single writer (`writer`) runs one write at a time, so a count before an insert holds
until the insert. The functions here run inside the writer's transaction for the write.
"""

from __future__ import annotations

import functools
import json
import sqlite3
from collections.abc import Collection, Sequence
from dataclasses import replace
from datetime import datetime
from typing import Any

from gateway.protocol.jsonrpc import JsonObject
from gateway.protocol.outcome import Outcome
from gateway.tasks.models import Task, TaskStatus, epoch_us, from_epoch_us
from gateway.tasks.store.rows import TASK_COLUMNS, json_text, task_from_row
from gateway.tasks.store.sqlite import attempts, inputs
from gateway.tasks.store.sqlite.schema import IN_JSON_ARRAY, SQL, appending
from gateway.tasks.store.writes import change


def _marks(values: Collection[Any]) -> str:
    """One `?` placeholder per value, comma-separated."""
    return ",".join("?" * len(values))


#: The statuses of a task that is still running, as bound: plain strings, as every status
#: and flag here is (why: the adapter note in `schema`).
_LIVE = tuple(s.value for s in TaskStatus if not s.terminal)

_CREATE = (
    f"INSERT INTO tasks ({TASK_COLUMNS}, expires_at, history, history_dropped)"
    f" VALUES ({_marks(TASK_COLUMNS.split(','))}, ?, ?, 0)"
)

# The message is the task's progress too: a status move replaces the statusMessage, and an
# operator still reads the latest progress.
_NOTE = (
    "UPDATE tasks SET status_message = ?, updated_at = ?, progress = ?, progress_at = ?"
    f" WHERE task_id = ? AND status IN ({_marks(_LIVE)}) RETURNING {TASK_COLUMNS}"
)


def create(
    db: sqlite3.Connection, task: Task, max_active: int | None, request: JsonObject | None
) -> bool:
    """Inserts `task`, with its request if given; False, writing nothing, if its owner has
    `max_active` live tasks already."""
    if max_active is not None:
        (active,) = db.execute(SQL.count_live, (task.owner, max_active)).fetchone()
        if active >= max_active:
            return False
    expires = task.expires_at
    row = (
        *(task.task_id, task.owner, task.route, task.tool, task.status.value),
        *(task.status_message, epoch_us(task.created_at), epoch_us(task.updated_at)),
        *(task.ttl_ms, task.poll_interval_ms, json_text(task.progress_token)),
        *(task.generation, int(task.repeatable), task.attempt),
        None if expires is None else epoch_us(expires),
        f"[{change(task.status, task.created_at, task.status_message)}]",
    )
    db.execute(_CREATE, row)
    if request is not None:
        attempts.save_request(db, task.task_id, request)
    return True


def note(db: sqlite3.Connection, task_id: str, message: str, now: datetime) -> Task | None:
    """Sets the statusMessage of a live task; None for any other task."""
    at = epoch_us(now)
    rows = db.execute(_NOTE, (message, at, message, at, task_id, *_LIVE)).fetchall()
    return next(map(task_from_row, rows), None)


def transition(
    db: sqlite3.Connection,
    which: str | Collection[str],
    sources: Sequence[TaskStatus],
    status: TaskStatus,
    message: str | None,
    now: datetime,
) -> list[Task]:
    """Moves the task `which` names (or those it lists) whose status is in `sources`; each
    one whose status changes gains a history entry."""
    one = isinstance(which, str)
    key = which if isinstance(which, str) else json.dumps(list(which))
    entry = change(status, now, message)
    params = (status.value, message, epoch_us(now), entry, key, *(s.value for s in sources))
    sql = _transition_sql(status, len(sources), one)
    return [task_from_row(row) for row in db.execute(sql, params).fetchall()]


def transition_kept(
    db: sqlite3.Connection,
    kept: Task,
    sources: Sequence[TaskStatus],
    status: TaskStatus,
    message: str | None,
    now: datetime,
) -> list[Task]:
    """`transition` of the one task the store keeps as `kept` (its row as last committed),
    with the moved task made from that copy instead of read back: RETURNING costs SQLite a
    temporary table, and the row's reading a model, some 7 % of a task's creation in all.

    A move changes the status, its message and the time; of the other columns only
    `attempt` is ever written again, so the UPDATE also asks for the kept one. A row that is
    not as kept (moved meanwhile, or its run begun again) is read back as `transition` does."""
    entry = change(status, now, message)
    at = epoch_us(now)
    params = (status.value, message, at, entry, kept.task_id, *(s.value for s in sources))
    sql = _transition_sql(status, len(sources), True, kept=True)
    if db.execute(sql, (*params, kept.attempt)).rowcount == 1:
        return [replace(kept, status=status, status_message=message, updated_at=from_epoch_us(at))]
    return transition(db, kept.task_id, sources, status, message, now)


@functools.cache
def _transition_sql(status: TaskStatus, sources: int, one: bool, kept: bool = False) -> str:
    """The UPDATE of `transition` (or, `kept`, of `transition_kept`), built once per status,
    number of sources and whether one task or a list is named (a handful in all)."""
    named = "task_id = ?" if one else f"task_id {IN_JSON_ARRAY}"
    # The status is an enum's value, never a caller's text: written into the SQL as it is.
    moved = appending(f"status <> '{status.value}'")
    update = (
        f"UPDATE tasks SET status = ?, status_message = ?, updated_at = ?, {moved}"
        f" WHERE {named} AND status IN ({_marks(range(sources))})"
    )
    return f"{update} AND attempt = ?" if kept else f"{update} RETURNING {TASK_COLUMNS}"


def ending(
    db: sqlite3.Connection, tasks: list[Task], outcome: Outcome | None, now: datetime
) -> int:
    """What goes with the terminal write that moved `tasks`: for each, the outcome kept, the
    questions withdrawn, the stored request and upstream call forgotten (only repeatable
    tasks have those). Returns the size of the outcome as stored (0 without one)."""
    size = 0
    if outcome is not None:
        body = json.dumps(outcome.body)
        if len(tasks) == 1:  # a task's own terminal write: executemany's iteration spared
            db.execute(SQL.insert_outcome, (tasks[0].task_id, outcome.kind, body))
        else:
            rows = [(task.task_id, outcome.kind, body) for task in tasks]
            db.executemany(SQL.insert_outcome, rows)
        size = len(body)
    inputs.withdraw_all(db, [task.task_id for task in tasks], now)
    attempts.forget(db, [task.task_id for task in tasks if task.repeatable])
    return size
