"""The console's URL table, on one screen, and the application the admin listener mounts.

    GET  sign-in                 the form;  POST sign-in: the admin token, then a session
    POST sign-out                ends the session
    GET  tasks?route=&principal=&status=&older_than=&limit=     the tasks, refreshed live
    GET  tasks/{id}              one task: what `task_detail` shows
    GET  tasks/{id}/cancel       the confirmation;  POST: cancels it
    GET  purge?route=&...        the confirmation, naming the count;  POST purge: purges
    GET  sessions?route=&principal=&limit=
    GET  sessions/{id}/end       the confirmation;  POST: ends it
    GET  routes                  each route's upstreams, running tasks and policy
    GET  static/{name}           the stylesheet and the live refresh's script

All paths are below `admin.CONSOLE_PATH`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime
from functools import partial
from typing import TYPE_CHECKING

from aiohttp import web

from gateway.console.access import Access
from gateway.console.actions import Actions
from gateway.console.pages import Pages
from gateway.console.signin import Sessions
from gateway.console.views import Views
from gateway.http import forwarded
from gateway.http.admin import CONSOLE_PATH, AdminApi
from gateway.http.request_body import add_fallback, expect_continue
from gateway.observability.metrics import Metrics
from gateway.tasks.store import TaskStore

if TYPE_CHECKING:
    from gateway.route import Route


def console_app(
    api: AdminApi,
    store: TaskStore,
    token: str,
    *,
    routes: Callable[[], dict[str, Route]],
    metrics: Metrics,
    clock: Callable[[], datetime],
    proxies: Sequence[forwarded.Network],
    sessions: Sessions | None = None,
) -> web.Application:
    """The console over `api`'s parts, for `AdminApi.app(token, console=...)`; `sessions`
    replaces the sign-in sessions (tests pass ones with their own clock)."""
    pages = Pages(CONSOLE_PATH)
    access = Access(token, pages, sessions or Sessions(), api.refusals, proxies)
    views = Views(api, store, pages, routes, metrics, clock)
    actions = Actions(api, store, pages, clock)
    app = web.Application(middlewares=[access.middleware()])
    # No `100 Continue` before the sign-in and Origin checks: a form's reader sends it.
    get = partial(app.router.add_get, expect_handler=expect_continue)
    post = partial(app.router.add_post, expect_handler=expect_continue)
    get("/", views.home)
    get("/sign-in", access.sign_in_form)
    post("/sign-in", access.sign_in)
    post("/sign-out", access.sign_out)
    get("/tasks", views.tasks)
    get("/tasks/{id}", views.task)
    get("/tasks/{id}/cancel", actions.confirm_cancel)
    post("/tasks/{id}/cancel", actions.cancel)
    get("/purge", actions.confirm_purge)
    post("/purge", actions.purge)
    get("/sessions", views.sessions)
    get("/sessions/{id}/end", actions.confirm_end)
    post("/sessions/{id}/end", actions.end)
    get("/routes", views.routes)
    get("/static/{name}", pages.static)
    add_fallback(app.router)
    return app
