"""The SQLite store's session records: what a client session needs to outlive a restart.

The write functions here run inside the store's writer (`writer`), each in its batch's
transaction; the store does the reads.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Collection
from datetime import datetime

from gateway.tasks.models import SessionRecord, epoch_us
from gateway.tasks.store.rows import json_text
from gateway.tasks.store.sqlite.schema import IN_JSON_ARRAY, SQL

# Not INSERT OR REPLACE: rewriting a record (its `initialized` arrives later) must not set its
# last-seen time back to its creation.
_SAVE = (
    "INSERT INTO sessions (session_id, route, principal, protocol_version, initialize,"
    " initialized, created_at, last_seen, upstream_session_id, upstream_protocol_version)"
    " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
    " ON CONFLICT (session_id) DO UPDATE SET route = excluded.route,"
    " principal = excluded.principal, protocol_version = excluded.protocol_version,"
    " initialize = excluded.initialize, initialized = excluded.initialized,"
    " created_at = excluded.created_at, upstream_session_id = excluded.upstream_session_id,"
    " upstream_protocol_version = excluded.upstream_protocol_version,"
    " last_seen = max(last_seen, excluded.last_seen)"
)

_TOUCH = f"UPDATE sessions SET last_seen = ? WHERE session_id {IN_JSON_ARRAY} AND last_seen < ?"


def save(db: sqlite3.Connection, record: SessionRecord) -> None:
    """Inserts or updates `record`; an update keeps the later of the two last-seen times."""
    created = epoch_us(record.created_at)
    row = (
        *(record.session_id, record.route, record.principal, record.protocol_version),
        *(json_text(record.initialize), json_text(record.initialized), created, created),
        *(record.upstream_session_id, record.upstream_protocol_version),
    )
    db.execute(_SAVE, row)


def update(db: sqlite3.Connection, record: SessionRecord) -> bool:
    """Rewrites `record` if it still exists."""
    row = (
        *(record.protocol_version, json_text(record.initialize), json_text(record.initialized)),
        *(record.upstream_session_id, record.upstream_protocol_version, record.session_id),
    )
    cursor = db.execute(SQL.update_session, row)
    return cursor.rowcount > 0


def prune(
    db: sqlite3.Connection, live: Collection[str], now: datetime, idle_before: datetime
) -> list[str]:
    """Marks the `live` sessions seen at `now`, then deletes those last seen before
    `idle_before`; returns the deleted ids."""
    seen = epoch_us(now)
    db.execute(_TOUCH, (seen, json.dumps(list(live)), seen))
    rows = db.execute(SQL.prune_sessions, (epoch_us(idle_before),)).fetchall()
    return [row["session_id"] for row in rows]
