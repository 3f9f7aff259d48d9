"""What an operator does from the console: cancel a task, end a session, purge finished tasks.

Each is two steps: a page that says what is about to happen (the purge's names how many
finished tasks its filters match), then a POST from that page's form, which carries the
session's CSRF token (`access`). The work is the admin API's own (`AdminApi.cancel_task`,
`end_session_as_operator`, `purge_tasks`), so each is audited exactly as the API's with
`"actor": "operator"`, and a task is cancelled as its owner's tasks/cancel would.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from urllib.parse import quote

from aiohttp import web
from multidict import MultiDict, MultiMapping

from gateway.console.access import posted, session_of
from gateway.console.pages import Pages
from gateway.console.views import COUNT_CAP, count_tasks, given
from gateway.http.admin import AdminApi, filters_of
from gateway.http.admin_query import task_filter, task_row
from gateway.tasks.models import TERMINAL, TaskFilter
from gateway.tasks.store import TaskStore

#: The purge's filters, as its forms carry them.
_PURGE_FIELDS = ("route", "principal", "status", "older_than")


class Actions:
    """The confirmations and the POSTs that act."""

    def __init__(
        self, api: AdminApi, store: TaskStore, pages: Pages, clock: Callable[[], datetime]
    ) -> None:
        self._api = api
        self._store = store
        self._pages = pages
        self._clock = clock

    async def confirm_cancel(self, request: web.Request) -> web.Response:
        task = await self._api.find_task(request.match_info["id"])
        return self._pages.render(
            "confirm_cancel.html",
            title=f"Cancel task {task.task_id}",
            task=task_row(task),
            finished=task.status in TERMINAL,
            csrf=session_of(request).csrf,
        )

    async def cancel(self, request: web.Request) -> web.StreamResponse:
        task = await self._api.find_task(request.match_info["id"])
        await self._api.cancel_task(task)
        raise web.HTTPSeeOther(f"{self._pages.base}tasks/{quote(task.task_id, safe='')}")

    async def confirm_end(self, request: web.Request) -> web.Response:
        return self._pages.render(
            "confirm_end.html",
            title="End a session",
            session_id=request.match_info["id"],
            csrf=session_of(request).csrf,
        )

    async def end(self, request: web.Request) -> web.StreamResponse:
        await self._api.end_session_as_operator(request.match_info["id"])
        raise web.HTTPSeeOther(f"{self._pages.base}sessions")

    async def confirm_purge(self, request: web.Request) -> web.Response:
        query = given(request.query)
        count = await self._count(task_filter(query, self._clock(), purge=True))
        return self._pages.render(
            "confirm_purge.html",
            title="Purge finished tasks",
            filters=dict(query),
            count=count,
            cap=COUNT_CAP,
            csrf=session_of(request).csrf,
        )

    async def purge(self, request: web.Request) -> web.Response:
        form = await posted(request)
        fields: MultiMapping[str] = MultiDict(
            (key, value) for key, value in form.items() if isinstance(value, str)
        )
        query = given(MultiDict((k, v) for k, v in fields.items() if k in _PURGE_FIELDS))
        choice = task_filter(query, self._clock(), purge=True)
        purged = await self._api.purge_tasks(choice, filters_of(query))
        return self._pages.render(
            "purged.html",
            title="Purged",
            purged=purged,
            filters=dict(query),
            csrf=session_of(request).csrf,
        )

    async def _count(self, choice: TaskFilter) -> int:
        """The finished tasks `choice` picks (a purge removes those alone)."""
        if choice.status is not None:
            return await count_tasks(self._store, choice)
        total = 0
        for status in sorted(TERMINAL):
            total += await count_tasks(self._store, choice.model_copy(update={"status": status}))
        return total
