"""The PostgreSQL store's input-request rows: the questions a task's call asked, and their fate.

The same rows as SQLite's (`sqlite.inputs`): `pending` until `answered` or `withdrawn`, kept
until their task is deleted so that a settled key is never reused. Asking and withdrawing are
the runner's writes, fenced on the task's `runner`; an answer is a client's, taken on any
replica. The write functions here run inside the store's transaction for the write.
"""

from __future__ import annotations

from collections.abc import Collection
from datetime import datetime

from gateway.protocol.jsonrpc import JsonObject
from gateway.tasks.models import InputRequest, epoch_us
from gateway.tasks.store.postgres.schema import SQL, Connection
from gateway.tasks.store.rows import INPUT_COLUMNS, input_from_row, inputs_oldest_first, json_text
from gateway.tasks.store.sql import LIVE_SQL

# INSERT ... SELECT from the task's row: no row (unknown, terminal, or another replica's
# task), no insert. FOR SHARE holds off a takeover until this commits, so that the new
# runner's `begin_attempt` withdraws this question too.
_ADD = (
    f"INSERT INTO task_inputs ({INPUT_COLUMNS}, state)"
    " SELECT task_id, $2, $3, $4, $5, $6, 'pending' FROM tasks"
    f" WHERE task_id = $1 AND {LIVE_SQL} AND runner = $7 FOR SHARE"
    " ON CONFLICT (task_id, key) DO NOTHING RETURNING key"
)

_FENCE = "SELECT 1 FROM tasks WHERE task_id = $1 AND runner = $2 FOR SHARE"


async def add(db: Connection, request: InputRequest, replica: str) -> bool:
    """Inserts `request` as pending; False if its task is unknown, terminal or not `replica`'s
    to run, or the key is taken."""
    row = (request.task_id, request.key, request.method, json_text(request.params))
    asked = (json_text(request.upstream_id), epoch_us(request.created_at), replica)
    return await db.fetchval(_ADD, *row, *asked) is not None


async def answer(
    db: Connection, task_id: str, key: str, response: JsonObject, now: datetime
) -> InputRequest | None:
    """Moves the pending `key` to answered with `response`; None unless it was pending."""
    row = await db.fetchrow(SQL.answer_input, json_text(response), epoch_us(now), task_id, key)
    return None if row is None else input_from_row(row)


async def withdraw(
    db: Connection, task_id: str, now: datetime, keys: Collection[str] | None, replica: str
) -> list[InputRequest]:
    """Moves the task's pending rows named by `keys` (all when None) to withdrawn, if the task
    is `replica`'s to run; returns them oldest first."""
    if await db.fetchval(_FENCE, task_id, replica) is None:
        return []
    named, params = "", [epoch_us(now), task_id]
    if keys is not None:
        named = "AND key = ANY($3::text[])"
        params.append(list(keys))
    sql = f"{SQL.withdraw_inputs} AND task_id = $2 {named} RETURNING {INPUT_COLUMNS}"
    return inputs_oldest_first(await db.fetch(sql, *params))


async def withdraw_all(db: Connection, task_ids: Collection[str], now: datetime) -> None:
    """Withdraws every pending row of `task_ids`: part of their terminal write, so that a
    finished task never shows a question."""
    if task_ids:
        sql = f"{SQL.withdraw_inputs} AND task_id = ANY($2::text[])"
        await db.execute(sql, epoch_us(now), list(task_ids))
