"""The WHERE clauses of an operator's choice of tasks and sessions, for either backend.

Both keep the same columns (times as whole microseconds since the epoch); only their
placeholders differ (`?` for SQLite, `$1, $2, ...` for PostgreSQL), so each backend passes
its own `mark`, which is given the 1-based number of each parameter.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from typing import Any

from gateway.tasks.models import TaskFilter, TaskStatus, epoch_us

Mark = Callable[[int], str]


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


def sessions_where(route: str | None, principal: str | None, mark: Mark) -> tuple[str, list[Any]]:
    """The condition on session records of `route` and `principal` (either may be None: any)."""
    clauses: list[str] = []
    params: list[Any] = []
    for column, value in (("route", route), ("principal", principal)):
        if value is not None:
            params.append(value)
            clauses.append(f"{column} = {mark(len(params))}")
    return " AND ".join(clauses) or "1 = 1", params
