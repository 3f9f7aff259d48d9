"""The console's pages for reading: tasks, a task, sessions and routes.

Each reads the store, not this replica's memory, so that with replicas on one PostgreSQL
database any replica's console shows every replica's tasks and sessions. Filters are the admin
API's (`admin_query`), checked the same way, and a page is audited as the API's answer would be
(`admin_tasks_listed`, ...), except the live refresh's background reads (the page's script
asks with `X-Console-Refresh`), which would otherwise write a line every few seconds.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any
from urllib.parse import urlencode

from aiohttp import web
from multidict import MultiDict, MultiMapping

from gateway.console.access import session_of
from gateway.console.pages import Pages
from gateway.http.admin import AdminApi
from gateway.http.admin_query import session_row, task_filter, task_row
from gateway.observability.metrics import Metrics
from gateway.protocol.members import Naming
from gateway.tasks.models import TERMINAL, Task, TaskFilter, TaskStatus
from gateway.tasks.store import TaskStore

if TYPE_CHECKING:
    from gateway.route import Route

#: Rows a list shows unless its `limit` says otherwise.
PAGE_ROWS = 200
#: The most tasks a count reads: beyond, a page says "more than".
COUNT_CAP = 10_000
#: The header the page's script sends with its background reads.
REFRESH = "X-Console-Refresh"
_RUNNING = (TaskStatus.WORKING, TaskStatus.INPUT_REQUIRED)


def given(query: MultiMapping[str]) -> MultiDict[str]:
    """A form's query without its empty fields: a filter left blank chooses nothing."""
    return MultiDict((key, value) for key, value in query.items() if value != "")


def age(span: timedelta) -> str:
    """`span` as an operator reads an age: 42 s, 5 min, 3 h, 2 d."""
    seconds = max(0, int(span.total_seconds()))
    for unit, size in (("d", 86_400), ("h", 3600), ("min", 60)):
        if seconds >= size:
            return f"{seconds // size} {unit}"
    return f"{seconds} s"


async def count_tasks(store: TaskStore, choice: TaskFilter) -> int:
    """How many tasks `choice` picks, up to `COUNT_CAP + 1`."""
    return len(await store.query_tasks(choice.model_copy(update={"limit": COUNT_CAP + 1})))


class Views:
    """The pages; `routes` reads the gateway's routes as they are now (a reload changes them)."""

    def __init__(
        self,
        api: AdminApi,
        store: TaskStore,
        pages: Pages,
        routes: Callable[[], dict[str, Route]],
        metrics: Metrics,
        clock: Callable[[], datetime],
    ) -> None:
        self._api = api
        self._store = store
        self._pages = pages
        self._routes = routes
        self._metrics = metrics
        self._clock = clock

    def _render(self, request: web.Request, name: str, **context: Any) -> web.Response:
        return self._pages.render(name, csrf=session_of(request).csrf, **context)

    async def home(self, request: web.Request) -> web.StreamResponse:
        raise web.HTTPSeeOther(f"{self._pages.base}tasks")

    async def tasks(self, request: web.Request) -> web.Response:
        query = given(request.query)
        filters = dict(query)
        if "limit" not in query:
            query["limit"] = str(PAGE_ROWS)
        now = self._clock()
        choice = task_filter(query, now)
        page, more = await self._api.tasks_page(choice, filters, REFRESH not in request.headers)
        rows = [self._row(task, now) for task in page]
        purge = {key: value for key, value in filters.items() if key != "limit"}
        return self._render(
            request,
            "tasks.html",
            title="Tasks",
            rows=rows,
            more=more,
            filters=filters,
            statuses=[status.value for status in TaskStatus],
            purge_query=urlencode(purge),
            live=True,
        )

    def _row(self, task: Task, now: datetime) -> dict[str, Any]:
        return {
            **task_row(task),
            "upstream": self._member(task),
            "age": age(now - task.created_at),
            "idle": age(now - task.updated_at),
        }

    def _member(self, task: Task) -> str | None:
        """The upstream that runs `task`: its route's member by the tool's name, or the
        route's one upstream (named as `upstream_up` names it)."""
        route = self._routes().get(task.route)
        if route is None:
            return None
        members = route.inputs.config.upstreams
        if members is None:
            return route.name
        found = Naming([member.name for member in members]).member_of(task.tool)
        return None if found is None else found[0]

    async def task(self, request: web.Request) -> web.Response:
        task = await self._api.find_task(request.match_info["id"])
        detail = await self._api.detail(task, audited=REFRESH not in request.headers)
        now = self._clock()
        return self._render(
            request,
            "task.html",
            title=f"Task {task.task_id}",
            task=detail,
            facts={k: v for k, v in detail.items() if not isinstance(v, dict | list)},
            parts={k: v for k, v in detail.items() if isinstance(v, dict | list)},
            upstream=self._member(task),
            age=age(now - task.created_at),
            idle=age(now - task.updated_at),
            running=task.status not in TERMINAL,
            live=True,
        )

    async def sessions(self, request: web.Request) -> web.Response:
        query = given(request.query)
        filters = dict(query)
        if "limit" not in query:
            query["limit"] = str(PAGE_ROWS)
        page, more = await self._api.sessions_page(query, filters)
        now = self._clock()
        rows = [{**session_row(r), "age": age(now - r.created_at)} for r in page]
        return self._render(
            request,
            "sessions.html",
            title="Sessions",
            rows=rows,
            more=more,
            filters=filters,
        )

    async def routes(self, request: web.Request) -> web.Response:
        shown = []
        for name, route in self._routes().items():
            config = route.inputs.config
            members = [m.name for m in config.upstreams] if config.upstreams else [name]
            running = 0
            for status in _RUNNING:
                running += await count_tasks(self._store, TaskFilter(route=name, status=status))
            shown.append(
                {
                    "name": name,
                    "path": route.path,
                    "generations": ", ".join(route.generations),
                    "upstreams": [
                        (member, self._metrics.upstream_state(name, member)) for member in members
                    ],
                    "running": running,
                    "policy": route.policy.model_dump(mode="json"),
                    "limits": route.limits.model_dump(mode="json"),
                }
            )
        return self._render(request, "routes.html", title="Routes", routes=shown, cap=COUNT_CAP)
