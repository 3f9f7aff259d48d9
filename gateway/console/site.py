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
from typing import TYPE_CHECKING

from aiohttp import web

from gateway.console.access import Access
from gateway.console.actions import Actions
from gateway.console.pages import Pages
from gateway.console.signin import Sessions
from gateway.console.views import Views
from gateway.http import forwarded
from gateway.http.admin import CONSOLE_PATH, AdminApi
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
    add = app.router
    add.add_get("/", views.home)
    add.add_get("/sign-in", access.sign_in_form)
    add.add_post("/sign-in", access.sign_in)
    add.add_post("/sign-out", access.sign_out)
    add.add_get("/tasks", views.tasks)
    add.add_get("/tasks/{id}", views.task)
    add.add_get("/tasks/{id}/cancel", actions.confirm_cancel)
    add.add_post("/tasks/{id}/cancel", actions.cancel)
    add.add_get("/purge", actions.confirm_purge)
    add.add_post("/purge", actions.purge)
    add.add_get("/sessions", views.sessions)
    add.add_get("/sessions/{id}/end", actions.confirm_end)
    add.add_post("/sessions/{id}/end", actions.end)
    add.add_get("/routes", views.routes)
    add.add_get("/static/{name}", pages.static)
    return app
