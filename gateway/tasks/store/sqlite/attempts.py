"""The SQLite store's record of a task's attempts: what a re-run after a restart needs.

A repeatable task's request is kept in `task_calls` from its creation to its terminal write,
and only that long (its arguments are at rest until then); so is the upstream request of its
latest attempt, so that the next process can cancel that call before it runs the task again.
The write functions here run inside the store's writer (`writer`), each in its
batch's transaction; the store does the reads.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Collection
from datetime import datetime

from gateway.protocol.jsonrpc import JsonObject, RequestId
from gateway.tasks.models import Task, TaskStatus, epoch_us
from gateway.tasks.store.rows import TASK_COLUMNS, json_text, task_from_row
from gateway.tasks.store.sql import LIVE_SQL
from gateway.tasks.store.sqlite import inputs
from gateway.tasks.store.sqlite.schema import IN_JSON_ARRAY, SQL, appending
from gateway.tasks.store.writes import change

LIVE_TASKS = f"SELECT {TASK_COLUMNS} FROM tasks WHERE {LIVE_SQL} ORDER BY created_at, task_id"

# INSERT ... SELECT from the task's row: a terminal or unknown task gets no row.
_NOTE = (
    "INSERT INTO task_calls (task_id, upstream_session_id, upstream_request_id)"
    f" SELECT task_id, ?, ? FROM tasks WHERE task_id = ? AND {LIVE_SQL}"
    " ON CONFLICT (task_id) DO UPDATE SET upstream_session_id = excluded.upstream_session_id,"
    " upstream_request_id = excluded.upstream_request_id"
)

# The attempt check sits in the WHERE: a process that finds the attempt already begun (by
# itself, or by another replica) moves nothing. A run begun again is in the history always,
# whatever status the task had.
_BEGIN = (
    "UPDATE tasks SET status = ?, status_message = ?, attempt = ?, updated_at = ?,"
    f" {appending('1')}"
    f" WHERE task_id = ? AND {LIVE_SQL} AND attempt < ? RETURNING {TASK_COLUMNS}"
)

_FORGET = f"DELETE FROM task_calls WHERE task_id {IN_JSON_ARRAY}"


def save_request(db: sqlite3.Connection, task_id: str, request: JsonObject) -> None:
    """Keeps the request a repeatable task runs again from; part of its creation."""
    db.execute(SQL.save_request, (task_id, json_text(request)))


def note(
    db: sqlite3.Connection, task_id: str, session_id: str | None, request_id: RequestId
) -> None:
    """Records the upstream request of a live task's current attempt, replacing the last."""
    db.execute(_NOTE, (session_id, json_text(request_id), task_id))


def begin(
    db: sqlite3.Connection, task_id: str, attempt: int, message: str, now: datetime
) -> Task | None:
    """Moves a live task below `attempt` to it, working with `message`, and withdraws its
    pending input requests; None (and nothing written) for any other task."""
    working = TaskStatus.WORKING
    entry = change(working, now, message, attempt)
    params = (working.value, message, attempt, epoch_us(now), entry, task_id, attempt)
    rows = db.execute(_BEGIN, params).fetchall()
    task = next((task_from_row(row) for row in rows), None)
    if task is not None:
        # The questions of the earlier attempt are never answered into this one.
        inputs.withdraw_all(db, [task_id], now)
    return task


def forget(db: sqlite3.Connection, task_ids: Collection[str]) -> None:
    """Deletes what `task_calls` keeps of `task_ids`: part of their terminal write."""
    if task_ids:
        db.execute(_FORGET, (json.dumps(list(task_ids)),))
