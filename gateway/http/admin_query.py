"""What the admin API reads from a request (filters, ages, ids) and the rows it answers with,
a task's detail among them (`task_detail`, over what `read_facts` reads of it).

Everything an operator sends is checked here before it reaches the store: unknown or repeated
parameters, a status that is none of the five, an age that is not `30s`, `15m`, `2h` or `7d`
(or is beyond a century), a limit out of range, text the databases cannot hold (NUL, lone
surrogates) are each a `BadQuery`, which the API answers with 400 and its message.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from multidict import MultiMapping

from gateway.observability.logs import printable
from gateway.protocol.jsonrpc import JsonObject
from gateway.protocol.outcome import Outcome
from gateway.tasks.history import StatusChange, TaskHistory
from gateway.tasks.models import (
    TERMINAL,
    InputRequest,
    SessionRecord,
    Task,
    TaskFilter,
    TaskStatus,
    iso,
    principal_of,
)

if TYPE_CHECKING:  # the operator's commands import this module, and need no store
    from gateway.tasks.store import TaskStore

#: Rows a list answers with unless `limit` says otherwise, and the most it may ask for.
DEFAULT_LIMIT = 1000
MAX_LIMIT = 10_000
#: The oldest an age may reach back; beyond, dates stop meaning anything.
MAX_AGE = timedelta(days=36_500)

_DURATION = re.compile(r"([0-9]{1,9})([smhd])")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86_400}
_MAX_TEXT = 1000

_TASK_KEYS = frozenset({"route", "principal", "status", "older_than", "limit"})
_PURGE_KEYS = frozenset({"route", "principal", "status", "older_than"})
_SESSION_KEYS = frozenset({"route", "principal", "limit"})


class BadQuery(Exception):
    """A request the admin API cannot use; the message says what to change."""


def parse_age(text: str) -> timedelta:
    """`30s`, `15m`, `2h` or `7d`: a whole number and one unit.

    Raises:
        BadQuery: anything else, or more than `MAX_AGE`.
    """
    match = _DURATION.fullmatch(text)
    if match is None:
        raise BadQuery(
            f"older_than: {printable(text, 40)!r} is not an age such as 30s, 15m, 2h or 7d"
        )
    age = timedelta(seconds=int(match[1]) * _UNITS[match[2]])
    if age > MAX_AGE:
        raise BadQuery(f"older_than: at most {MAX_AGE.days}d")
    return age


def checked_text(name: str, value: str) -> str:
    """`value`, if the store can hold and match it.

    Raises:
        BadQuery: empty, too long, with NUL, or not encodable as UTF-8.
    """
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise BadQuery(f"{name}: not valid UTF-8") from None
    if not value or len(value) > _MAX_TEXT or "\x00" in value:
        raise BadQuery(f"{name}: must be 1 to {_MAX_TEXT} characters, without NUL")
    return value


def _one_each(query: MultiMapping[str], allowed: frozenset[str]) -> dict[str, str]:
    given: dict[str, str] = {}
    for key, value in query.items():
        if key not in allowed:
            known = ", ".join(sorted(allowed))
            raise BadQuery(f"unknown parameter {printable(key, 40)!r}: this one takes {known}")
        if key in given:
            raise BadQuery(f"{key}: given twice")
        given[key] = checked_text(key, value)
    return given


def _limit(given: Mapping[str, str]) -> int:
    text = given.get("limit")
    if text is None:
        return DEFAULT_LIMIT
    if not (text.isascii() and text.isdecimal() and len(text) <= 6) or not (
        1 <= int(text) <= MAX_LIMIT
    ):
        raise BadQuery(f"limit: a whole number from 1 to {MAX_LIMIT}")
    return int(text)


def task_filter(query: MultiMapping[str], now: datetime, purge: bool = False) -> TaskFilter:
    """The tasks a request's query picks: to list, or with `purge` to delete (finished ones
    only, created before `now` at the latest, so that a purge ends).

    Raises:
        BadQuery: see the module's docstring.
    """
    given = _one_each(query, _PURGE_KEYS if purge else _TASK_KEYS)
    status = None
    if "status" in given:
        try:
            status = TaskStatus(given["status"])
        except ValueError:
            raise BadQuery(f"status: one of {', '.join(TaskStatus)}") from None
    if purge and status is not None and status not in TERMINAL:
        raise BadQuery("status: a purge removes finished tasks only: completed, failed, cancelled")
    age = given.get("older_than")
    before = now - parse_age(age) if age is not None else (now if purge else None)
    return TaskFilter(
        route=given.get("route"),
        principal=given.get("principal"),
        status=status,
        created_before=before,
        limit=_limit(given),
    )


def session_filter(query: MultiMapping[str]) -> tuple[str | None, str | None, int]:
    """The route, principal (None: any) and limit of a sessions query.

    Raises:
        BadQuery: see the module's docstring.
    """
    given = _one_each(query, _SESSION_KEYS)
    return given.get("route"), given.get("principal"), _limit(given)


def task_row(task: Task) -> JsonObject:
    """A task as `tasks list --json` shows it."""
    return {
        "taskId": task.task_id,
        "route": task.route,
        "principal": principal_of(task),
        "status": task.status.value,
        "tool": task.tool,
        "createdAt": iso(task.created_at),
        "lastUpdatedAt": iso(task.updated_at),
    }


@dataclass(frozen=True)
class TaskFacts:
    """What the store holds of a task beside its row, for its detail."""

    history: TaskHistory
    #: Its unanswered questions: those the store keeps (see docs/operations.md).
    questions: list[InputRequest]
    outcome: Outcome | None


async def read_facts(store: TaskStore, task: Task) -> TaskFacts:
    """The facts of `task` as the store holds them now, on any replica: a task deleted
    meanwhile reads as one without history."""
    history = await store.get_history(task.task_id)
    finished = task.status.terminal
    return TaskFacts(
        history=TaskHistory(dropped=None) if history is None else history,
        questions=[] if finished else await store.pending_inputs(task.task_id),
        outcome=await store.get_outcome(task.task_id) if finished else None,
    )


def task_detail(task: Task, facts: TaskFacts, show_results: bool = False) -> JsonObject:
    """A task as `tasks show` and the console show it: its row, and the rest an operator may
    want. Its questions and outcome without their content (a caller's data), but for the
    outcome's with `show_results` (`admin.console_shows_results`)."""
    expires = task.expires_at
    history = facts.history
    return {
        **task_row(task),
        "statusMessage": task.status_message,
        "ttl": task.ttl_ms,
        "expiresAt": None if expires is None else iso(expires),
        "generation": task.generation,
        "attempt": task.attempt,
        "history": [_change(change) for change in history.changes],
        "historyDropped": history.dropped,
        "progress": None
        if history.progress is None or history.progress_at is None
        else {"message": history.progress, "at": iso(history.progress_at)},
        "questions": [
            {"key": q.key, "method": q.method, "askedAt": iso(q.created_at)}
            for q in facts.questions
        ],
        "outcome": _outcome(facts.outcome, show_results),
    }


def _change(change: StatusChange) -> JsonObject:
    row: JsonObject = {"status": change.status.value, "at": iso(change.at)}
    if change.message is not None:
        row["message"] = change.message
    if change.attempt is not None:
        row["attempt"] = change.attempt
    return row


def _outcome(outcome: Outcome | None, show_results: bool) -> JsonObject:
    """Its kind (a tool's `isError` result is a `tool_error`) and its size as stored."""
    if outcome is None:
        return {"kind": "none", "bytes": 0}
    tool_error = outcome.kind == "result" and outcome.body.get("isError") is True
    shown: JsonObject = {
        "kind": "tool_error" if tool_error else outcome.kind,
        "bytes": len(json.dumps(outcome.body).encode()),
    }
    if show_results:
        shown["content"] = outcome.body
    return shown


def session_row(record: SessionRecord) -> JsonObject:
    """A session as `sessions list --json` shows it."""
    return {
        "sessionId": record.session_id,
        "route": record.route,
        "principal": record.principal,
        "createdAt": iso(record.created_at),
    }
