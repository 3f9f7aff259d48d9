"""The SQLite store's input-request rows: the questions a task's call asked, and their fate.

A row is `pending` until it is `answered` or `withdrawn`, and never changes again; it stays
until its task is deleted (the foreign key cascades), so a settled key is never reused. The
write functions here run inside the store's writer (`writer`), each in its batch's
transaction; the store does the reads.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Collection
from datetime import datetime

from gateway.protocol.jsonrpc import JsonObject
from gateway.tasks.models import InputRequest, epoch_us
from gateway.tasks.store.rows import INPUT_COLUMNS, input_from_row, inputs_oldest_first, json_text
from gateway.tasks.store.sql import LIVE_SQL
from gateway.tasks.store.sqlite.schema import IN_JSON_ARRAY, SQL

# INSERT ... SELECT from the task's row: no row (unknown or terminal task), no insert; the
# check and the write are one statement. A taken key inserts nothing either.
_ADD = (
    f"INSERT INTO task_inputs ({INPUT_COLUMNS}, state)"
    f" SELECT ?, ?, ?, ?, ?, ?, 'pending' FROM tasks WHERE task_id = ? AND {LIVE_SQL}"
    " ON CONFLICT (task_id, key) DO NOTHING RETURNING key"
)


def add(db: sqlite3.Connection, request: InputRequest) -> bool:
    """Inserts `request` as pending; False if its task is unknown or terminal or the key taken."""
    row = (
        *(request.task_id, request.key, request.method, json_text(request.params)),
        *(json_text(request.upstream_id), epoch_us(request.created_at), request.task_id),
    )
    return bool(db.execute(_ADD, row).fetchall())


def answer(
    db: sqlite3.Connection, task_id: str, key: str, response: JsonObject, now: datetime
) -> InputRequest | None:
    """Moves the pending `key` to answered with `response`; None unless it was pending."""
    params = (json_text(response), epoch_us(now), task_id, key)
    rows = db.execute(SQL.answer_input, params).fetchall()
    return next((input_from_row(row) for row in rows), None)


def withdraw(
    db: sqlite3.Connection, task_id: str, now: datetime, keys: Collection[str] | None
) -> list[InputRequest]:
    """Moves the task's pending rows named by `keys` (all when None) to withdrawn; returns
    them oldest first."""
    named, params = "", [epoch_us(now), task_id]
    if keys is not None:
        named = f"AND key {IN_JSON_ARRAY}"
        params.append(json.dumps(list(keys)))
    sql = f"{SQL.withdraw_inputs} AND task_id = ? {named} RETURNING {INPUT_COLUMNS}"
    return inputs_oldest_first(db.execute(sql, params).fetchall())


def withdraw_all(db: sqlite3.Connection, task_ids: Collection[str], now: datetime) -> None:
    """Withdraws every pending row of `task_ids`: part of their terminal write, so that a
    finished task never shows a question."""
    if len(task_ids) == 1:  # a task's own terminal write: the id alone, no JSON to read
        db.execute(f"{SQL.withdraw_inputs} AND task_id = ?", (epoch_us(now), *task_ids))
    elif task_ids:
        sql = f"{SQL.withdraw_inputs} AND task_id {IN_JSON_ARRAY}"
        db.execute(sql, (epoch_us(now), json.dumps(list(task_ids))))
