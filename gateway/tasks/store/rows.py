"""How a stored row reads back as a model, for both backends: one mapper per kind of row.

Both schemas keep the same columns in the same shapes (times as `epoch_us` integers, JSON as
text), so a row reads the same whether `sqlite3.Row` or `asyncpg.Record` holds it; only a
flag differs (0/1 in SQLite, a boolean in PostgreSQL), and `bool` reads either.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any, Protocol

from gateway.protocol.jsonrpc import JsonObject
from gateway.protocol.outcome import Outcome
from gateway.tasks.history import StatusChange, TaskHistory
from gateway.tasks.models import (
    AttemptCall,
    InputRequest,
    SessionRecord,
    Task,
    TaskStatus,
    from_epoch_us,
)

#: What `task_from_row` reads.
TASK_COLUMNS = (
    "task_id, owner, route, tool, status, status_message, created_at, updated_at, ttl_ms,"
    " poll_interval_ms, progress_token, generation, repeatable, attempt"
)

#: What `history_from_row` reads: kept apart from `TASK_COLUMNS`, which every poll reads.
HISTORY_COLUMNS = "history, history_dropped, progress, progress_at"

#: What `input_from_row` reads. `upstream_id` is JSON text, so 1 and "1" stay apart.
INPUT_COLUMNS = "task_id, key, method, params, upstream_id, created_at"


class Row(Protocol):
    """A result row read by column name: `sqlite3.Row` and `asyncpg.Record` alike."""

    def __getitem__(self, key: str, /) -> Any: ...


def json_text(value: object) -> str | None:
    """A JSON column's value (None stays NULL)."""
    # ensure_ascii (the default) escapes NUL and lone surrogates, which neither a UTF-8 file
    # nor a PostgreSQL text column would take.
    return None if value is None else json.dumps(value)


def task_from_row(row: Row) -> Task:
    token = row["progress_token"]
    return Task(
        task_id=row["task_id"],
        owner=row["owner"],
        route=row["route"],
        tool=row["tool"],
        status=TaskStatus(row["status"]),
        status_message=row["status_message"],
        created_at=from_epoch_us(row["created_at"]),
        updated_at=from_epoch_us(row["updated_at"]),
        ttl_ms=row["ttl_ms"],
        poll_interval_ms=row["poll_interval_ms"],
        # JSON text keeps an int token an int and a str token a str.
        progress_token=None if token is None else json.loads(token),
        generation=row["generation"],
        repeatable=bool(row["repeatable"]),
        attempt=row["attempt"],
    )


def history_from_row(row: Row) -> TaskHistory:
    """The entries are those `writes.change` made, in the order appended."""
    progress_at = row["progress_at"]
    return TaskHistory(
        changes=tuple(
            StatusChange(
                status=TaskStatus(entry["status"]),
                at=from_epoch_us(entry["at"]),
                message=entry.get("message"),
                attempt=entry.get("attempt"),
            )
            for entry in json.loads(row["history"])
        ),
        dropped=row["history_dropped"],
        progress=row["progress"],
        progress_at=None if progress_at is None else from_epoch_us(progress_at),
    )


def outcome_from_row(row: Row) -> Outcome:
    return Outcome(kind=row["kind"], body=json.loads(row["body"]))


def input_from_row(row: Row) -> InputRequest:
    return InputRequest(
        task_id=row["task_id"],
        key=row["key"],
        method=row["method"],
        params=json.loads(row["params"]),
        upstream_id=json.loads(row["upstream_id"]),
        created_at=from_epoch_us(row["created_at"]),
    )


def inputs_oldest_first(rows: Iterable[Row]) -> list[InputRequest]:
    """The input requests of `rows` by age (RETURNING comes in no promised order)."""
    return sorted(map(input_from_row, rows), key=lambda r: (r.created_at, r.key))


def answer_from_row(row: Row) -> tuple[str, JsonObject]:
    """An answered input request: its key and the answer it got."""
    response: JsonObject = json.loads(row["response"])
    return row["key"], response


def request_from_row(row: Row) -> JsonObject:
    request: JsonObject = json.loads(row["request"])
    return request


def upstream_call_from_row(row: Row) -> AttemptCall:
    return AttemptCall(
        task_id=row["task_id"],
        session_id=row["upstream_session_id"],
        request_id=json.loads(row["upstream_request_id"]),
    )


def session_from_row(row: Row) -> SessionRecord:
    initialized = row["initialized"]
    return SessionRecord(
        session_id=row["session_id"],
        route=row["route"],
        principal=row["principal"],
        protocol_version=row["protocol_version"],
        initialize=json.loads(row["initialize"]),
        initialized=None if initialized is None else json.loads(initialized),
        created_at=from_epoch_us(row["created_at"]),
        upstream_session_id=row["upstream_session_id"],
        upstream_protocol_version=row["upstream_protocol_version"],
    )
