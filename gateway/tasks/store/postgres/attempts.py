"""The PostgreSQL store's record of attempts, and which replica runs each task.

As in SQLite (`sqlite.attempts`), a repeatable task's request is kept from its creation to its
terminal write, with the upstream request of its latest attempt. Here a task also has a
`runner`, the replica running it, and every replica a lease in `replicas`, renewed in one
statement on the database's clock. A replica whose lease has run out (or whose row is gone:
it stopped) runs nothing any more: the survivors claim its live tasks (`claim`), each
exactly once, and its own later writes to them are refused, since every runner's write is
fenced on `runner`. The write functions here run inside the store's transaction for the
write.
"""

from __future__ import annotations

from collections.abc import Collection
from datetime import datetime

from gateway.protocol.jsonrpc import JsonObject, RequestId
from gateway.tasks.models import Task, TaskStatus, epoch_us
from gateway.tasks.store.postgres import inputs
from gateway.tasks.store.postgres.schema import SQL, Connection, appending
from gateway.tasks.store.rows import TASK_COLUMNS, json_text, task_from_row
from gateway.tasks.store.sql import LIVE_SQL
from gateway.tasks.store.writes import change

#: How long a dead replica's row is kept once its tasks are settled, for operators to see.
_FORGET_REPLICAS_AFTER = "1 hour"

# Renews, and counts the live replicas in the same statement: the others whose lease runs
# now (the statement's snapshot predates its own insert), and this one.
RENEW = (
    "WITH renewed AS (INSERT INTO replicas (replica, lease_until, marks_waits)"
    " VALUES ($1, now() + $2::float8 * interval '1 second', true)"
    " ON CONFLICT (replica) DO UPDATE SET lease_until = excluded.lease_until, marks_waits = true)"
    " SELECT 1 + count(*) FROM replicas WHERE replica <> $1 AND lease_until > now()"
)

RELEASE = "DELETE FROM replicas WHERE replica = $1"

# INSERT ... SELECT from the task's row: a terminal, unknown or another replica's task gets no
# row; FOR SHARE holds off a takeover until this commits.
_NOTE = (
    "INSERT INTO task_calls (task_id, upstream_session_id, upstream_request_id)"
    f" SELECT task_id, $2, $3 FROM tasks WHERE task_id = $1 AND {LIVE_SQL} AND runner = $4"
    " FOR SHARE ON CONFLICT (task_id) DO UPDATE"
    " SET upstream_session_id = excluded.upstream_session_id,"
    " upstream_request_id = excluded.upstream_request_id"
)

# The attempt check sits in the WHERE: a replica that finds the attempt already begun (by
# itself, or by another) moves nothing. A run begun again is in the history always, whatever
# status the task had.
_BEGIN = (
    "UPDATE tasks SET status = $2, status_message = $3, attempt = $4, updated_at = $5,"
    f" {appending('TRUE', '$7')}"
    f" WHERE task_id = $1 AND {LIVE_SQL} AND attempt < $4 AND runner = $6"
    f" RETURNING {TASK_COLUMNS}"
)

_FORGET = "DELETE FROM task_calls WHERE task_id = ANY($1::text[])"

# SKIP LOCKED: replicas claiming at once each take what the others have not locked, and a
# row claimed meanwhile fails the re-checked lease condition, so no task is claimed twice.
# A task whose runner is this replica is never its orphan, even were its own lease late.
# A claimed task is marked watched: whoever waited for it without marking (its runner was
# the replica it waited on) hears of it from its new runner.
_CLAIM = f"""
    UPDATE tasks SET runner = $1, watched = true WHERE task_id IN (
        SELECT task_id FROM tasks AS t WHERE {LIVE_SQL} AND runner <> $1 AND NOT EXISTS (
            SELECT 1 FROM replicas WHERE replica = t.runner AND lease_until > now()
        )
        FOR UPDATE OF t SKIP LOCKED
    ) RETURNING {TASK_COLUMNS}
"""

#: The transaction-scoped advisory lock claims take turns on (any bigint the database's
#: other users do not take: this one is "mcp-task" in ASCII).
_CLAIM_LOCK = 0x6D63702D7461736B
_CLAIM_TURN = "SELECT pg_advisory_xact_lock($1)"

_FORGET_DEAD = f"""
    DELETE FROM replicas AS r
    WHERE lease_until < now() - interval '{_FORGET_REPLICAS_AFTER}' AND NOT EXISTS (
        SELECT 1 FROM tasks WHERE runner = r.replica AND {LIVE_SQL}
    )
"""


async def save_request(db: Connection, task_id: str, request: JsonObject) -> None:
    """Keeps the request a repeatable task runs again from; part of its creation."""
    await db.execute(SQL.save_request, task_id, json_text(request))


async def note(
    db: Connection, task_id: str, session_id: str | None, request_id: RequestId, replica: str
) -> None:
    """Records the upstream request of a live task's current attempt, replacing the last, if
    the task is `replica`'s to run."""
    await db.execute(_NOTE, task_id, session_id, json_text(request_id), replica)


async def begin(
    db: Connection, task_id: str, attempt: int, message: str, now: datetime, replica: str
) -> Task | None:
    """Moves a live task of `replica`'s below `attempt` to it, working with `message`, and
    withdraws its pending input requests; None (and nothing written) for any other task."""
    working = TaskStatus.WORKING
    entry = change(working, now, message, attempt)
    params = (task_id, working.value, message, attempt, epoch_us(now), replica, entry)
    row = await db.fetchrow(_BEGIN, *params)
    if row is None:
        return None
    # The questions of the earlier attempt are never answered into this one.
    await inputs.withdraw_all(db, [task_id], now)
    return task_from_row(row)


async def forget(db: Connection, task_ids: Collection[str]) -> None:
    """Deletes what `task_calls` keeps of `task_ids`: part of their terminal write."""
    if task_ids:
        await db.execute(_FORGET, list(task_ids))


async def claim(db: Connection, replica: str) -> list[Task]:
    """Makes `replica` the runner of every live task whose runner is gone, oldest first; then
    forgets the replicas long gone that run nothing."""
    # Claims take turns. Two at once could both take the same orphan: under READ COMMITTED,
    # the re-check of a row another claim has just taken did not always see that claim
    # through the lease test (CI: 100 orphans, each claimed by both replicas, about one run
    # in 25 under load). After the wait for the lock, the claim's statement sees every claim
    # committed before it. Claims are rare (at a start, and once per lease), so the turn costs
    # nothing that matters; rows that other work holds are still skipped, not waited for.
    await db.execute(_CLAIM_TURN, _CLAIM_LOCK)
    tasks = [task_from_row(row) for row in await db.fetch(_CLAIM, replica)]
    await db.execute(_FORGET_DEAD)
    return sorted(tasks, key=lambda task: (task.created_at, task.task_id))
