"""The operators' admin API: every principal's tasks and sessions, on an address of its own.

    GET     /admin/tasks?route=R&principal=P&status=S&older_than=7d&limit=N
                                        {"tasks": [row, ...], "more": bool}, oldest first
    GET     /admin/tasks/{id}           the task's row and the rest (statusMessage, ttl, ...)
    POST    /admin/tasks/{id}/cancel    as the owner's tasks/cancel; 409 for a finished task
    POST    /admin/tasks/purge?route=R&principal=P&status=S&older_than=7d
                                        {"purged": N}: finished tasks only, however chosen
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

The operators' console (`gateway.console`) is mounted under `CONSOLE_PATH` on the same
listener: it signs operators in with the same token into a cookie session of its own, its
refused sign-ins count against the same per-address limit, and its actions are these.
"""

from __future__ import annotations

import hmac
import logging
import socket
from collections.abc import Callable, Mapping
from datetime import datetime

from aiohttp import web
from aiohttp.typedefs import Handler, Middleware

from gateway.config import HttpConfig
from gateway.http.admin_query import (
    BadQuery,
    checked_text,
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
from gateway.tasks.models import SessionRecord, Task, TaskFilter, principal_of
from gateway.tasks.runner import TaskRunner
from gateway.tasks.store import TaskStore

log = logging.getLogger(__name__)


#: Who the audit says acted, for everything done here.
OPERATOR = "operator"
#: Tasks deleted per transaction by a purge: a large purge never holds the store's writer
#: (and every client's write behind it) for long.
PURGE_BATCH = 500
#: Where the operators' console is mounted (`gateway.console`).
CONSOLE_PATH = "/admin/console/"
#: The largest request body taken: the API takes none, the console's forms are small.
MAX_FORM_BYTES = 4096
#: Failed authentications per client address: a burst, then this many a second.
FAILURE_BURST = 10
FAILURE_RATE = 0.2


class Unknown(Exception):
    """The id names no task or session (404); the message says which."""


def _error(status: int, message: str, headers: dict[str, str] | None = None) -> web.Response:
    return web.json_response({"error": message}, status=status, headers=headers)


class Refusals:
    """Failed authentications per client address, the API's and the console's sign-in alike:
    a burst, then one every `1 / FAILURE_RATE` seconds."""

    def __init__(self) -> None:
        self._limiter = RateLimiter(FAILURE_RATE, FAILURE_BURST)

    def count(self, request: web.Request) -> None:
        """One refusal of `request`, audited as `admin_auth_failed` while within the limit.

        Raises:
            LimitExceeded: past the burst; nothing is audited (its Retry-After says when).
        """
        self._limiter.check(str(request.remote))
        audit("admin_auth_failed", remote=request.remote, path=printable(request.path, 200))


def _guard(token: str, refusals: Refusals, console: web.Application | None) -> Middleware:
    expected = f"Bearer {token}".encode()

    @web.middleware
    async def guard(request: web.Request, handler: Handler) -> web.StreamResponse:
        if console is not None and console in request.match_info.apps:
            return await handler(request)  # its own sign-in and cookie (gateway.console)
        try:
            given = request.headers.get("Authorization", "").encode("utf-8", "surrogateescape")
        except UnicodeEncodeError:
            given = b""
        if not hmac.compare_digest(given, expected):
            try:
                refusals.count(request)
            except LimitExceeded as exc:
                return _error(
                    429,
                    "too many refused requests from this address; retry after "
                    f"{exc.headers['Retry-After']} s",
                    exc.headers,
                )
            return _error(
                401,
                "the admin API needs Authorization: Bearer <the token in admin.token_env>",
                {"WWW-Authenticate": "Bearer"},
            )
        try:
            return await handler(request)
        except BadQuery as exc:
            return _error(400, str(exc))
        except Unknown as exc:
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
    """The handlers, over the gateway's own store, runner and session registry; the console
    acts through the same methods (`cancel_task`, `purge_tasks`, `end_session_as_operator`)."""

    def __init__(
        self,
        store: TaskStore,
        runner: TaskRunner,
        sessions: SessionRegistry,
        clock: Callable[[], datetime],
    ) -> None:
        self._store = store
        self._runner = runner
        self._sessions = sessions
        self._clock = clock
        self.refusals = Refusals()

    def app(self, token: str, console: web.Application | None = None) -> web.Application:
        """The API's application; `console`, when given, is mounted at `CONSOLE_PATH` and
        signs its operators in itself."""
        guard = _guard(token, self.refusals, console)
        app = web.Application(middlewares=[guard], client_max_size=MAX_FORM_BYTES)
        app.router.add_get("/admin/tasks", self.list_tasks)
        app.router.add_post("/admin/tasks/purge", self.purge)
        app.router.add_get("/admin/tasks/{id}", self.show_task)
        app.router.add_post("/admin/tasks/{id}/cancel", self.cancel)
        app.router.add_get("/admin/sessions", self.list_sessions)
        app.router.add_delete("/admin/sessions/{id}", self.end_session)
        if console is not None:
            app.add_subapp(CONSOLE_PATH.rstrip("/"), console)
        return app

    async def list_tasks(self, request: web.Request) -> web.Response:
        choice = task_filter(request.query, self._clock())
        found = await self._store.query_tasks(choice.model_copy(update={"limit": choice.limit + 1}))
        page = found[: choice.limit]
        audit("admin_tasks_listed", actor=OPERATOR, count=len(page), **filters_of(request.query))
        return web.json_response(
            {"tasks": [task_row(t) for t in page], "more": len(found) > choice.limit}
        )

    async def show_task(self, request: web.Request) -> web.Response:
        task = await self.find_task(request.match_info["id"])
        audit(
            "admin_task_shown",
            actor=OPERATOR,
            route=task.route,
            task_id=task.task_id,
            principal=principal_of(task),
        )
        return web.json_response(task_detail(task))

    async def cancel(self, request: web.Request) -> web.Response:
        task = await self.find_task(request.match_info["id"])
        try:
            done = await self.cancel_task(task)
        except TaskError as exc:
            return _error(409, str(exc))
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
        choice = task_filter(request.query, self._clock(), purge=True)
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

    async def list_sessions(self, request: web.Request) -> web.Response:
        route, principal, limit = session_filter(request.query)
        found = await self._store.query_sessions(route, principal, limit + 1)
        page = found[:limit]
        audit("admin_sessions_listed", actor=OPERATOR, count=len(page), **filters_of(request.query))
        return web.json_response(
            {"sessions": [session_row(r) for r in page], "more": len(found) > limit}
        )

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


#: Connections the admin listener holds at once: a few operators and their scripts. At the cap
#: the oldest one idle or still sending its head makes room, so a flood cannot shut them out.
MAX_CONNECTIONS = 64


async def serve(
    app: web.Application, sockets: list[socket.socket], http: HttpConfig
) -> web.AppRunner:
    """Serves `app` (`AdminApi.app`) on the bound `sockets`, on the guarded server the
    gateway's port runs (a deadline per request head, caps per address and in all, bad
    requests answered without a traceback: `http.server`); the caller cleans the runner up."""
    guard = ConnectionGuard(http, MAX_CONNECTIONS)
    runner = GuardedRunner(app, guard, access_log=None)
    await runner.setup()
    try:
        for sock in sockets:
            await web.SockSite(runner, sock).start()
    except BaseException:
        await runner.cleanup()
        raise
    return runner
