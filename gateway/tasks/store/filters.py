"""The queries of an operator's choice of tasks and sessions, for either backend.

Which conditions apply depends on the choice, so these are built per call, with the
backend's placeholders (`sql.Mark`) numbered as the parameters are added.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from gateway.tasks.models import TaskFilter, TaskStatus, epoch_us
from gateway.tasks.store.rows import TASK_COLUMNS
from gateway.tasks.store.sql import Mark


def select_tasks(choice: TaskFilter, mark: Mark) -> tuple[str, list[Any]]:
    """`query_tasks`: the tasks `choice` picks, oldest first, at most `choice.limit`; the
    statement and its parameters."""
    where, params = tasks_where(choice, mark)
    sql = (
        f"SELECT {TASK_COLUMNS} FROM tasks WHERE {where}"
        f" ORDER BY created_at, task_id LIMIT {mark(len(params) + 1)}"
    )
    return sql, [*params, choice.limit]


def tasks_where(
    choice: TaskFilter, mark: Mark, statuses: Collection[TaskStatus] = ()
) -> tuple[str, list[Any]]:
    """The condition `choice` sets (and, if given, one of `statuses`), and its parameters."""
    clauses: list[str] = []
    params: list[Any] = []

    def add(clause: str, *values: Any) -> None:
        marks = [mark(len(params) + i + 1) for i in range(len(values))]
        clauses.append(clause.format(*marks))
        params.extend(values)

    if choice.route is not None:
        add("route = {}", choice.route)
    if choice.principal is not None:
        # Whole, as `owner_of` makes it: one principal's name never matches another's end.
        add("owner = 'principal:' || route || ':' || {}", choice.principal)
    if choice.status is not None:
        add("status = {}", choice.status.value)
    if statuses:
        add(f"status IN ({', '.join('{}' for _ in statuses)})", *(s.value for s in statuses))
    if choice.created_before is not None:
        add("created_at < {}", epoch_us(choice.created_before))
    return " AND ".join(clauses) or "1 = 1", params


def select_sessions(
    route: str | None, principal: str | None, limit: int, mark: Mark
) -> tuple[str, list[Any]]:
    """`query_sessions`: the session records of `route` and `principal` (either may be None:
    any), oldest first, at most `limit`; the statement and its parameters."""
    clauses: list[str] = []
    params: list[Any] = []
    for column, value in (("route", route), ("principal", principal)):
        if value is not None:
            params.append(value)
            clauses.append(f"{column} = {mark(len(params))}")
    where = " AND ".join(clauses) or "1 = 1"
    sql = (
        f"SELECT * FROM sessions WHERE {where}"
        f" ORDER BY created_at, session_id LIMIT {mark(len(params) + 1)}"
    )
    return sql, [*params, limit]
