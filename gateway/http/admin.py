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
`FAILURE_BURST`, then one every `1 / FAILURE_RATE` seconds; past that 429, and no audit
line): guessing the token, or flooding the audit trail with `admin_auth_failed`, stops at the
burst. The right token is never refused for others' failures. Answers are JSON, errors
`{"error": message}` (never a 500 for what a caller sends); every action is audited with
`"actor": "operator"`. The parts it works through are the gateway's own (store, runner,
session registry), so a cancel here is a client's tasks/cancel, on this replica or another,
and an ended session a client's DELETE.
"""

from __future__ import annotations

import hmac
import logging
import socket
from collections.abc import Callable
from datetime import datetime

from aiohttp import web
from aiohttp.typedefs import Handler, Middleware
from multidict import MultiDict

from gateway.config import HttpConfig
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
from gateway.http.server import ConnectionGuard, GuardedRunner
from gateway.observability.audit import audit
from gateway.observability.logs import printable
from gateway.protocol.errors import GatewayError, LimitExceeded, TaskError
from gateway.security.limits import RateLimiter
from gateway.session.registry import SessionRegistry
from gateway.tasks.models import TERMINAL, Task, TaskFilter, principal_of
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
#: Failed authentications per client address: a burst, then this many a second.
FAILURE_BURST = 10
FAILURE_RATE = 0.2


class _Unknown(Exception):
    """The id names no task or session (404); the message says which."""


def _error(status: int, message: str, headers: dict[str, str] | None = None) -> web.Response:
    return web.json_response({"error": message}, status=status, headers=headers)


def _guard(token: str) -> Middleware:
    expected = f"Bearer {token}".encode()
    failures = RateLimiter(FAILURE_RATE, FAILURE_BURST)

    @web.middleware
    async def guard(request: web.Request, handler: Handler) -> web.StreamResponse:
        try:
            given = request.headers.get("Authorization", "").encode("utf-8", "surrogateescape")
        except UnicodeEncodeError:
            given = b""
        if not hmac.compare_digest(given, expected):
            try:
                failures.check(str(request.remote))
            except LimitExceeded as exc:
                return _error(
                    429,
                    "too many refused requests from this address; retry after "
                    f"{exc.headers['Retry-After']} s",
                    exc.headers,
                )
            audit("admin_auth_failed", remote=request.remote, path=printable(request.path, 200))
            return _error(
                401,
                "the admin API needs Authorization: Bearer <the token in admin.token_env>",
                {"WWW-Authenticate": "Bearer"},
            )
        try:
            return await handler(request)
        except BadQuery as exc:
            return _error(400, str(exc))
        except _Unknown as exc:
            return _error(404, str(exc))
        except web.HTTPException as exc:  # the router's 404 and 405
            return _error(
                exc.status, f"{exc.reason}: {request.method} {printable(request.path, 200)}"
            )
        except GatewayError as exc:  # the store is unreachable just now
            return _error(exc.http_status, exc.message, exc.headers)
        except Exception:
            log.exception("admin %s %s: internal error", request.method, printable(request.path))
            return _error(500, "internal error (the gateway's log has the details)")

    return guard


class AdminApi:
    """The handlers, over the gateway's own store, runner and session registry."""

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

    def app(self, token: str) -> web.Application:
        app = web.Application(middlewares=[_guard(token)], client_max_size=1024)
        app.router.add_get("/admin/tasks", self.list_tasks)
        app.router.add_post("/admin/tasks/purge", self.purge)
        app.router.add_get("/admin/tasks/{id}", self.show_task)
        app.router.add_post("/admin/tasks/{id}/cancel", self.cancel)
        app.router.add_get("/admin/sessions", self.list_sessions)
        app.router.add_delete("/admin/sessions/{id}", self.end_session)
        return app

    async def list_tasks(self, request: web.Request) -> web.Response:
        choice = task_filter(request.query, self._clock())
        found = await self._store.query_tasks(choice.model_copy(update={"limit": choice.limit + 1}))
        page = found[: choice.limit]
        audit("admin_tasks_listed", actor=OPERATOR, count=len(page), **_filters(request))
        return web.json_response(
            {"tasks": [task_row(t) for t in page], "more": len(found) > choice.limit}
        )

    async def show_task(self, request: web.Request) -> web.Response:
        task = await self._task(request)
        audit(
            "admin_task_shown",
            actor=OPERATOR,
            route=task.route,
            task_id=task.task_id,
            principal=principal_of(task),
        )
        facts = await read_facts(self._store, task)
        return web.json_response(task_detail(task, facts, self._show_results))

    async def cancel(self, request: web.Request) -> web.Response:
        task = await self._task(request)
        try:
            if task.status.terminal:
                raise TaskError(f"already in terminal status '{task.status}'")
            # The owner's own path: the cancelled status committed, then the call stopped
            # and notifications/cancelled sent upstream, by whichever replica runs it.
            done = await self._runner.cancel(task, actor=OPERATOR)
        except TaskError:
            latest = await self._store.get_task(task.task_id) or task
            return _error(
                409,
                f"task {task.task_id} is {latest.status} already: only a working or "
                "input_required task can be cancelled",
            )
        return web.json_response(task_row(done))

    async def purge(self, request: web.Request) -> web.Response:
        query = MultiDict(request.query)
        dry_run = query.popall("dry_run", [])
        if dry_run not in ([], ["1"]):
            raise BadQuery("dry_run: 1, given once, or left out")
        choice = task_filter(query, self._clock(), purge=True)
        if dry_run:
            return await self._would_purge(request, choice)
        batch: TaskFilter = choice.model_copy(update={"limit": PURGE_BATCH})
        purged = 0
        while True:
            deleted = await self._store.purge_tasks(batch)
            purged += len(deleted)
            if len(deleted) < PURGE_BATCH:
                break
        audit("tasks_purged", actor=OPERATOR, count=purged, **_filters(request))
        return web.json_response({"purged": purged})

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
        audit("admin_tasks_listed", actor=OPERATOR, count=len(found), **_filters(request))
        shown = [task_row(task) for task in found[:PREVIEW_ROWS]]
        return web.json_response({"wouldPurge": len(found), "more": more, "tasks": shown})

    async def list_sessions(self, request: web.Request) -> web.Response:
        route, principal, limit = session_filter(request.query)
        found = await self._store.query_sessions(route, principal, limit + 1)
        page = found[:limit]
        audit("admin_sessions_listed", actor=OPERATOR, count=len(page), **_filters(request))
        return web.json_response(
            {"sessions": [session_row(r) for r in page], "more": len(found) > limit}
        )

    async def end_session(self, request: web.Request) -> web.Response:
        session_id = checked_text("session id", request.match_info["id"])
        record = await self._sessions.end_recorded(session_id, OPERATOR)
        if record is None:
            raise _Unknown(f"no session {printable(session_id, 100)}")
        return web.json_response(session_row(record))

    async def _task(self, request: web.Request) -> Task:
        task_id = checked_text("task id", request.match_info["id"])
        task = await self._store.get_task(task_id)
        if task is None:
            raise _Unknown(f"no task {printable(task_id, 100)}")
        return task


def _filters(request: web.Request) -> dict[str, str]:
    """The filters a request used, for its audit event (names and ages, never a secret)."""
    return {key: printable(value, 200) for key, value in request.query.items()}


#: Connections the admin listener holds at once: a few operators and their scripts. At the cap
#: the oldest one idle or still sending its head makes room, so a flood cannot shut them out.
MAX_CONNECTIONS = 64


async def serve(
    api: AdminApi, token: str, sockets: list[socket.socket], http: HttpConfig
) -> web.AppRunner:
    """Serves `api` on the bound `sockets`, on the guarded server the gateway's port runs
    (a deadline per request head, caps per address and in all, bad requests answered without
    a traceback: `http.server`); the caller cleans the runner up."""
    guard = ConnectionGuard(http, MAX_CONNECTIONS)
    runner = GuardedRunner(api.app(token), guard, access_log=None)
    await runner.setup()
    try:
        for sock in sockets:
            await web.SockSite(runner, sock).start()
    except BaseException:
        await runner.cleanup()
        raise
    return runner
