"""The PostgreSQL store's session records: what a client session needs to go on at any replica,
the upstream's own session id included (DESIGN.md, "Several replicas").

The write functions here run inside the store's transaction for the write.
"""

from __future__ import annotations

from collections.abc import Collection
from datetime import datetime

from gateway.tasks.models import SessionRecord, epoch_us
from gateway.tasks.store.postgres.schema import SQL, Connection
from gateway.tasks.store.rows import json_text

# An update keeps the later last-seen time: rewriting a record (its `initialized` arrives
# later) must not set it back to its creation.
_SAVE = (
    "INSERT INTO sessions (session_id, route, principal, protocol_version, initialize,"
    " initialized, created_at, last_seen, upstream_session_id, upstream_protocol_version)"
    " VALUES ($1, $2, $3, $4, $5, $6, $7, $7, $8, $9)"
    " ON CONFLICT (session_id) DO UPDATE SET route = excluded.route,"
    " principal = excluded.principal, protocol_version = excluded.protocol_version,"
    " initialize = excluded.initialize, initialized = excluded.initialized,"
    " created_at = excluded.created_at, upstream_session_id = excluded.upstream_session_id,"
    " upstream_protocol_version = excluded.upstream_protocol_version,"
    " last_seen = greatest(sessions.last_seen, excluded.last_seen)"
)

_TOUCH = "UPDATE sessions SET last_seen = $1 WHERE session_id = ANY($2::text[]) AND last_seen < $1"


async def save(db: Connection, record: SessionRecord) -> None:
    """Inserts or updates `record`; an update keeps the later of the two last-seen times."""
    await db.execute(
        _SAVE,
        *(record.session_id, record.route, record.principal, record.protocol_version),
        *(json_text(record.initialize), json_text(record.initialized)),
        *(epoch_us(record.created_at), record.upstream_session_id),
        record.upstream_protocol_version,
    )


async def update(db: Connection, record: SessionRecord) -> bool:
    """Rewrites `record` if it still exists."""
    status: str = await db.execute(
        SQL.update_session,
        *(record.protocol_version, json_text(record.initialize), json_text(record.initialized)),
        *(record.upstream_session_id, record.upstream_protocol_version, record.session_id),
    )
    return status != "UPDATE 0"


async def prune(
    db: Connection, live: Collection[str], now: datetime, idle_before: datetime
) -> list[str]:
    """Marks the `live` sessions seen at `now`, then deletes those last seen before
    `idle_before`; returns the deleted ids."""
    await db.execute(_TOUCH, epoch_us(now), list(live))
    rows = await db.fetch(SQL.prune_sessions, epoch_us(idle_before))
    return [row["session_id"] for row in rows]
