"""The operators' admin API: every principal's tasks and sessions, on an address of its own.

    GET     /admin/tasks?route=R&principal=P&status=S&older_than=7d&limit=N
                                        {"tasks": [row, ...], "more": bool}, oldest first
    GET     /admin/tasks/{id}           the task's row and the rest (statusMessage, ttl, history,
                                        progress, questions, outcome: `task_detail`)
    POST    /admin/tasks/{id}/cancel    as the owner's tasks/cancel; 409 for a finished task
    POST    /admin/tasks/purge?route=R&principal=P&status=S&older_than=7d
                                        {"purged": N}: finished tasks only, however chosen;
                                        with &dry_run=1 nothing is deleted: {"wouldPurge": N,
                                        "more": bool, "tasks": [the first rows]}
    GET     /admin/sessions?route=R&principal=P&limit=N
                                        {"sessions": [row, ...], "more": bool}
    DELETE  /admin/sessions/{id}        as the client's DELETE: its next request gets 404

Only `admin.listen` serves it (the gateway's port answers 404 there), and every request needs
`Authorization: Bearer <the token in admin.token_env>`, compared in constant time: clients'
credentials are refused with 401. Refusals are rate-limited per client address (a burst of
`admin_guard.FAILURE_BURST`, then one every `1 / FAILURE_RATE` seconds; past that 429, and no audit
line): guessing the token, or flooding the audit trail with `admin_auth_failed`, stops at the
burst. The right token is never refused for others' failures. Answers are JSON, errors
`{"error": message}` (never a 500 for what a caller sends); every action is audited with
`"actor": "operator"`. The parts it works through are the gateway's own (store, runner,
session registry), so a cancel here is a client's tasks/cancel, on this replica or another,
and an ended session a client's DELETE.

The operators' console (`gateway.console`) is mounted under `CONSOLE_PATH` on the same
listener: it signs operators in with the same token into a cookie session of its own, its
refused sign-ins count against the same per-address limit, and its actions are these.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from datetime import datetime
from functools import partial

from aiohttp import web
from multidict import MultiDict, MultiMapping

from gateway.http.admin_guard import Refusals, Unknown, error, guard
from gateway.http.admin_query import (
    MAX_LIMIT,
    BadQuery,
    checked_text,
    read_facts,
    session_filter,
    session_row,
    task_detail,
    task_filter,
    task_row,
)
from gateway.http.request_body import asks_no_body_first, expect_continue
from gateway.observability.audit import audit
from gateway.observability.logs import printable
from gateway.protocol.errors import TaskError
from gateway.protocol.jsonrpc import JsonObject
from gateway.session.registry import SessionRegistry
from gateway.tasks.models import TERMINAL, SessionRecord, Task, TaskFilter, principal_of
from gateway.tasks.runner import TaskRunner
from gateway.tasks.store import TaskStore

log = logging.getLogger(__name__)


#: Who the audit says acted, for everything done here.
OPERATOR = "operator"
#: Tasks deleted per transaction by a purge: a large purge never holds the store's writer
#: (and every client's write behind it) for long.
PURGE_BATCH = 500
#: Tasks a dry run of a purge lists (it counts them all).
PREVIEW_ROWS = 20
#: Where the operators' console is mounted (`gateway.console`).
CONSOLE_PATH = "/admin/console/"
#: The largest request body taken: the API takes none, the console's forms are small.
MAX_FORM_BYTES = 4096


class AdminApi:
    """The handlers, over the gateway's own store, runner and session registry; the console
    acts through the same methods (`cancel_task`, `purge_tasks`, `end_session_as_operator`)."""

    def __init__(
        self,
        store: TaskStore,
        runner: TaskRunner,
        sessions: SessionRegistry,
        clock: Callable[[], datetime],
        show_results: bool = False,
    ) -> None:
        self._store = store
        self._runner = runner
        self._sessions = sessions
        self._clock = clock
        #: `admin.console_shows_results`: a task's detail carries its result's content.
        self._show_results = show_results
        self.refusals = Refusals()

    def app(self, token: str, console: web.Application | None = None) -> web.Application:
        """The API's application; `console`, when given, is mounted at `CONSOLE_PATH` and
        signs its operators in itself."""
        checked = guard(token, self.refusals, console)
        app = web.Application(middlewares=[checked], client_max_size=MAX_FORM_BYTES)
        # No `100 Continue` before the token check: the handlers read no body, so none at all.
        get = partial(app.router.add_get, expect_handler=expect_continue)
        post = partial(app.router.add_post, expect_handler=expect_continue)
        delete = partial(app.router.add_delete, expect_handler=expect_continue)
        get("/admin/tasks", self.list_tasks)
        post("/admin/tasks/purge", self.purge)
        get("/admin/tasks/{id}", self.show_task)
        post("/admin/tasks/{id}/cancel", self.cancel)
        get("/admin/sessions", self.list_sessions)
        delete("/admin/sessions/{id}", self.end_session)
        asks_no_body_first(app)
        if console is not None:
            app.add_subapp(CONSOLE_PATH.rstrip("/"), console)
        return app

    async def list_tasks(self, request: web.Request) -> web.Response:
        choice = task_filter(request.query, self._clock())
        page, more = await self.tasks_page(choice, request.query)
        return web.json_response({"tasks": [task_row(t) for t in page], "more": more})

    async def tasks_page(
        self, choice: TaskFilter, filters: Mapping[str, str], audited: bool = True
    ) -> tuple[list[Task], bool]:
        """The tasks `choice` picks, up to its limit, and whether more match; audited as
        `admin_tasks_listed` with `filters` unless not `audited` (the console's refresh)."""
        found = await self._store.query_tasks(choice.model_copy(update={"limit": choice.limit + 1}))
        page = found[: choice.limit]
        if audited:
            audit("admin_tasks_listed", actor=OPERATOR, count=len(page), **filters_of(filters))
        return page, len(found) > choice.limit

    async def show_task(self, request: web.Request) -> web.Response:
        task = await self.find_task(request.match_info["id"])
        return web.json_response(await self.detail(task))

    async def detail(self, task: Task, audited: bool = True) -> JsonObject:
        """What an operator reads of `task` (`task_detail`), as the store holds it now;
        audited as `admin_task_shown` unless not `audited` (the console's live refresh)."""
        if audited:
            audit(
                "admin_task_shown",
                actor=OPERATOR,
                route=task.route,
                task_id=task.task_id,
                principal=principal_of(task),
            )
        facts = await read_facts(self._store, task)
        return task_detail(task, facts, self._show_results)

    async def cancel(self, request: web.Request) -> web.Response:
        task = await self.find_task(request.match_info["id"])
        try:
            done = await self.cancel_task(task)
        except TaskError as exc:
            return error(409, str(exc))
        return web.json_response(task_row(done))

    async def cancel_task(self, task: Task) -> Task:
        """Cancels `task` as its owner's tasks/cancel would, audited as the operator's.

        Raises:
            TaskError: it is finished already (the message says in which status).
        """
        try:
            if task.status.terminal:
                raise TaskError(f"already in terminal status '{task.status}'")
            # The owner's own path: the cancelled status committed, then the call stopped
            # and notifications/cancelled sent upstream, by whichever replica runs it.
            return await self._runner.cancel(task, actor=OPERATOR)
        except TaskError:
            latest = await self._store.get_task(task.task_id) or task
            raise TaskError(
                f"task {task.task_id} is {latest.status} already: only a working or "
                "input_required task can be cancelled"
            ) from None

    async def purge(self, request: web.Request) -> web.Response:
        query = MultiDict(request.query)
        dry_run = query.popall("dry_run", [])
        if dry_run not in ([], ["1"]):
            raise BadQuery("dry_run: 1, given once, or left out")
        choice = task_filter(query, self._clock(), purge=True)
        if dry_run:
            return await self._would_purge(request, choice)
        purged = await self.purge_tasks(choice, filters_of(request.query))
        return web.json_response({"purged": purged})

    async def purge_tasks(self, choice: TaskFilter, filters: dict[str, str]) -> int:
        """Deletes the finished tasks `choice` picks, in batches; audited with `filters`."""
        batch: TaskFilter = choice.model_copy(update={"limit": PURGE_BATCH})
        purged = 0
        while True:
            deleted = await self._store.purge_tasks(batch)
            purged += len(deleted)
            if len(deleted) < PURGE_BATCH:
                break
        audit("tasks_purged", actor=OPERATOR, count=purged, **filters)
        return purged

    async def _would_purge(self, request: web.Request, choice: TaskFilter) -> web.Response:
        """What a purge by `choice` would delete, deleting nothing: a listing of the finished
        tasks it picks (up to `MAX_LIMIT` of each status; `more` past that), audited as one."""
        found: list[Task] = []
        more = False
        for status in [choice.status] if choice.status else sorted(TERMINAL):
            picked = choice.model_copy(update={"status": status, "limit": MAX_LIMIT + 1})
            rows = await self._store.query_tasks(picked)
            more = more or len(rows) > MAX_LIMIT
            found += rows[:MAX_LIMIT]
        found.sort(key=lambda task: (task.created_at, task.task_id))
        audit("admin_tasks_listed", actor=OPERATOR, count=len(found), **filters_of(request.query))
        shown = [task_row(task) for task in found[:PREVIEW_ROWS]]
        return web.json_response({"wouldPurge": len(found), "more": more, "tasks": shown})

    async def list_sessions(self, request: web.Request) -> web.Response:
        page, more = await self.sessions_page(request.query, request.query)
        return web.json_response({"sessions": [session_row(r) for r in page], "more": more})

    async def sessions_page(
        self, query: MultiMapping[str], filters: Mapping[str, str]
    ) -> tuple[list[SessionRecord], bool]:
        """The sessions `query` picks (`session_filter`), up to its limit, and whether more
        match; audited as `admin_sessions_listed` with `filters`.

        Raises:
            BadQuery: see `admin_query`.
        """
        route, principal, limit = session_filter(query)
        found = await self._store.query_sessions(route, principal, limit + 1)
        page = found[:limit]
        audit("admin_sessions_listed", actor=OPERATOR, count=len(page), **filters_of(filters))
        return page, len(found) > limit

    async def end_session(self, request: web.Request) -> web.Response:
        record = await self.end_session_as_operator(request.match_info["id"])
        return web.json_response(session_row(record))

    async def end_session_as_operator(self, session_id: str) -> SessionRecord:
        """Ends the session as the client's DELETE would, audited as the operator's.

        Raises:
            BadQuery: the id is no text a store holds.
            Unknown: no session has it.
        """
        record = await self._sessions.end_recorded(checked_text("session id", session_id), OPERATOR)
        if record is None:
            raise Unknown(f"no session {printable(session_id, 100)}")
        return record

    async def find_task(self, task_id: str) -> Task:
        """The task of `task_id`, any principal's.

        Raises:
            BadQuery: the id is no text a store holds.
            Unknown: no task has it.
        """
        task = await self._store.get_task(checked_text("task id", task_id))
        if task is None:
            raise Unknown(f"no task {printable(task_id, 100)}")
        return task


def filters_of(query: Mapping[str, str]) -> dict[str, str]:
    """The filters a request used, for its audit event (names and ages, never a secret)."""
    return {key: printable(value, 200) for key, value in query.items()}
