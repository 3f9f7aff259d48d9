"""create_app(settings): the composition root, the only place parts are wired together.

Data flow for one client message (package by package, in the order a request meets them):

    client --HTTP--> http.listen/server (connection rules) --> http.middleware (Host, Origin,
        errors -> JSON-RPC error bodies) --> http.urls (one endpoint per configured route)
        --> http.admission (credentials, rate, headers, body, session lookup)
        --> protocol.dispatch.decide(message, route policy, negotiated version)
              Initialize -> session.registry opens (and records) a session and its upstream
              RunAsTask  -> tasks.runner.submit -> tasks.store create -> CreateTaskResult now;
                            (background) upstream tools/call -> one terminal write
              Local      -> session.task_api -> tasks.store (never the runner's memory)
              Forward    -> session -> upstream client -> answer on the request's stream
              Deliver    -> session -> upstream (ids mapped back to the upstream's)
        --> or, for a session-less 2026-07-28 request, http.endpoint_modern: protocol.modern
            checks and decides, calls.held forwards over an upstream session held for the caller
    upstream --server messages--> session -> the right downstream stream (POST or GET)

Everything long-lived (the store, the runner, upstream connection pools, sessions and their
children) is created in one cleanup context here and released in reverse order when the app
stops: runs first (their tasks are failed as interrupted at the next start), then sessions
(their records stay, so clients carry on after a restart), then connections and the store.
Before that, `http.shutdown.drain` (the first SIGTERM or SIGINT) lets running tasks end by
themselves while new sessions and tasks are refused, for up to shutdown.drain_seconds. Traces,
when configured, are flushed last, so the spans of everything above reach the collector.
"""

from __future__ import annotations

import socket
import time
from collections.abc import AsyncIterator, Callable
from datetime import datetime
from functools import partial
from typing import TYPE_CHECKING

from aiohttp import web

from gateway.aio import TaskSet
from gateway.calls.held import HeldSessions
from gateway.calls.parked import ParkedCalls
from gateway.calls.task_api import ModernTaskApi
from gateway.config import Settings
from gateway.http import cors, listen, middleware, request_body
from gateway.http.admin import AdminApi
from gateway.http.drain import Drain
from gateway.http.health import Health
from gateway.http.keys import (
    ALLOWED_HOSTS,
    BOUND,
    DRAIN,
    HEALTH,
    HELD_SESSIONS,
    METRICS,
    MODERN_TASK_API,
    PARKED_CALLS,
    RELOADS,
    ROUTES,
    RUNNER,
    SESSIONS,
    SETTINGS,
    SHARE,
    STORE,
    TASK_API,
    TASK_INPUTS,
    TRACING,
    TRUSTED_PROXIES,
)
from gateway.http.middleware import Handler
from gateway.http.reload_state import Reloads
from gateway.http.shutdown import interrupt
from gateway.http.urls import add_routes
from gateway.observability.metrics import Metrics
from gateway.recovery import replicas, reruns
from gateway.route import Route
from gateway.security.limits import Share
from gateway.session.registry import SessionRegistry
from gateway.session.task_api import TaskApi
from gateway.tasks.inputs import TaskInputs
from gateway.tasks.models import utcnow
from gateway.tasks.notifier import Notifier
from gateway.tasks.runner import TaskRunner
from gateway.tasks.store import TaskStore
from gateway.tasks.store.opening import open_configured

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import SpanProcessor

    from gateway.observability.traces import Tracing

#: What start-up says when the `tracing` section is set and the extra is not installed.
TRACING_MISSING = (
    "tracing: OpenTelemetry is not installed; install the extra: "
    "pip install 'mcp-task-gateway[otel]'"
)


def create_app(
    settings: Settings,
    clock: Callable[[], datetime] = utcnow,
    *,
    span_processor: SpanProcessor | None = None,
) -> web.Application:
    """The gateway for `settings`; `clock` is the wall clock of task times, ttls and cursor
    ages (tests pass a fake one, so nothing waits for time to pass). With a `tracing`
    section, spans go to `span_processor` when given (tests), else over OTLP.

    Raises:
        ValueError: a key file the settings name is unusable, or the `tracing` section is
            set without the OpenTelemetry packages.
    """
    app = web.Application(
        # The endpoint enforces each route's limits.max_body_bytes itself, with a JSON-RPC
        # error body; aiohttp's own cap only has to stay out of its way.
        client_max_size=max(
            [settings.limits.max_body_bytes]
            + [r.limits.max_body_bytes or 0 for r in settings.routes]
        )
        + 1,
    )
    app[SETTINGS] = settings
    app[ALLOWED_HOSTS] = middleware.allowed_hosts(settings.http, settings.listen.host)
    app[TRUSTED_PROXIES] = settings.http.proxy_networks
    app.on_response_prepare.append(cors.on_prepare)
    metrics = app[METRICS] = Metrics([route.name for route in settings.routes])
    tracing = app[TRACING] = _tracing(app, metrics, span_processor)
    app[DRAIN] = Drain(settings.shutdown, metrics)
    share = app[SHARE] = Share()
    metrics.replicas_live.set_function(lambda: share.replicas)
    # Built here, not at start-up, so a bad key file stops the gateway before it listens.
    app[ROUTES] = {
        route.name: Route(settings, route, metrics, tracing=tracing, share=share)
        for route in settings.routes
    }
    app[RELOADS] = Reloads(settings)
    app[BOUND] = {}  # filled as the listeners bind
    add_routes(app, settings, partial(_guarded, app=app, tracing=tracing))
    if tracing is not None:
        app.cleanup_ctx.append(partial(_traces, tracing=tracing))  # its cleanup runs last
    own: dict[str, list[socket.socket]] = {"admin": [], "metrics": []}
    app.cleanup_ctx.append(partial(_own_addresses, sockets=own))
    app.cleanup_ctx.append(partial(_components, clock=clock, sockets=own))
    app.on_shutdown.append(interrupt)
    app.on_shutdown.append(app[RELOADS].probes.close)  # a reload's probes still running
    return app


async def _own_addresses(
    app: web.Application, sockets: dict[str, list[socket.socket]]
) -> AsyncIterator[None]:
    """admin.listen and metrics.listen bound before the store is opened, as the gateway's
    own port is, so that a taken one stops the start first, in one line (once, a taken
    metrics port was a traceback after the store had opened, and a process that no signal
    stopped); `_components` serves on them once all they use exists."""
    settings = app[SETTINGS]
    try:
        if settings.admin is not None:
            sockets["admin"] += listen.bind(settings.admin.listen, "admin.listen")
            app[BOUND]["admin"] = listen.bound(settings.admin.listen, sockets["admin"])
        if settings.metrics.enabled and settings.metrics.listen is not None:
            sockets["metrics"] += listen.bind(settings.metrics.listen, "metrics.listen")
            app[BOUND]["metrics"] = listen.bound(settings.metrics.listen, sockets["metrics"])
        yield
    finally:
        for sock in (*sockets["admin"], *sockets["metrics"]):
            sock.close()


async def _components(
    app: web.Application, clock: Callable[[], datetime], sockets: dict[str, list[socket.socket]]
) -> AsyncIterator[None]:
    settings = app[SETTINGS]
    metrics = app[METRICS]
    store = await open_configured(settings.store, on_timing=metrics.observe_store)
    notifier = Notifier()
    replica_tasks = TaskSet("replica")
    runner = TaskRunner(
        store,
        notifier,
        metrics,
        clock=clock,
        audit_arguments=settings.audit.include_arguments,
        tracing=app[TRACING],
    )
    app[STORE] = store
    app[HEALTH] = Health(store, app[DRAIN])
    metrics.sessions_max.set(settings.sessions.max_sessions)
    metrics.last_store_write.set_function(partial(_last_write, store))
    app[RUNNER] = runner
    secret = await store.secret()
    inputs = app[TASK_INPUTS] = TaskInputs(store, clock)
    app[MODERN_TASK_API] = ModernTaskApi(store, runner, inputs, clock)
    app[TASK_API] = TaskApi(store, runner, notifier, secret, clock, inputs)
    app[PARKED_CALLS] = ParkedCalls(secret)
    # With one process (SQLite), a session's questions need no row: its streams carry them.
    shared = inputs if settings.store.shared else None
    app[SESSIONS] = SessionRegistry(settings.sessions, settings.http, store, shared)
    app[HELD_SESSIONS] = HeldSessions(settings.sessions)
    # The port is bound already (listen.start binds first), so a second process on it never
    # gets this far: tasks it would fail or run again are this process's alone (on a shared
    # store, those of replicas whose lease has expired, each claimed by one survivor only).
    await reruns.start(app, await runner.recover(reruns.bounds_of(app), replicas.lost_message(app)))
    await replicas.start(app, notifier, replica_tasks)
    runner.start_sweeper(settings.store.sweep_interval_seconds, app[SESSIONS].prune_records)
    for name in app[ROUTES]:
        metrics.sessions.labels(name).set_function(partial(app[SESSIONS].count, name))
    app[SESSIONS].start_reaper()
    metrics_site = await _metrics_listener(settings, metrics, sockets["metrics"])
    admin_site = None
    if settings.admin is not None:
        # Here, not at the top: the console's templates and signing keys are a tenth of the
        # gateway's import time, which a gateway without an admin port need not pay.
        from gateway.console.site import console_app

        shows = settings.admin.console_shows_results
        api = AdminApi(store, runner, app[SESSIONS], clock, shows)
        console = console_app(
            api,
            store,
            settings.admin.token,
            routes=lambda: app[ROUTES],
            metrics=metrics,
            clock=clock,
            proxies=settings.http.proxy_networks,
        )
        admin_app = api.app(settings.admin.token, console)
        admin_site = await listen.serve_side(admin_app, sockets["admin"], settings.http)
    try:
        yield
    finally:
        if admin_site is not None:
            await admin_site.cleanup()
        if metrics_site is not None:
            await metrics_site.cleanup()
        await replica_tasks.close()
        await runner.close()
        await app[SESSIONS].close()
        await app[PARKED_CALLS].close()
        await app[HELD_SESSIONS].close()
        for route in app[ROUTES].values():
            await route.close()
        await app[RELOADS].close()
        await store.close()


def _tracing(
    app: web.Application, metrics: Metrics, processor: SpanProcessor | None
) -> Tracing | None:
    """The tracer when `tracing` is configured (imported only then: OpenTelemetry is an
    optional extra)."""
    config = app[SETTINGS].tracing
    if config is None:
        return None
    try:
        from gateway.observability.traces import Tracing
    except ImportError as exc:
        raise ValueError(TRACING_MISSING) from exc
    return Tracing(config, metrics, processor)


def _guarded(handler: Handler, app: web.Application, tracing: Tracing | None) -> Handler:
    """How each handler of the URL table is served: behind the guard, and with tracing on,
    its server span inside that (the guard may hand on a copy of the request)."""
    if tracing is not None:
        from gateway.http.traced import spanned

        handler = spanned(tracing, handler)
    return middleware.guarded(app, handler)


async def _traces(app: web.Application, tracing: Tracing) -> AsyncIterator[None]:
    try:
        yield
    finally:
        await tracing.close()


async def _metrics_listener(
    settings: Settings, metrics: Metrics, sockets: list[socket.socket]
) -> web.AppRunner | None:
    """/metrics on its own address (bound as `sockets`), when configured (e.g. reachable only
    by Prometheus), on the guarded server the admin API has."""
    if not sockets:
        return None
    app = web.Application()
    # No `100 Continue` before the token check (the handler reads no body), and the answer to
    # a client still holding its body back closes the connection, as on the admin listener.
    handler = metrics.handler(settings.metrics.bearer_token)
    app.router.add_get("/metrics", handler, expect_handler=request_body.expect_continue)
    request_body.asks_no_body_first(app)
    return await listen.serve_side(app, sockets, settings.http)


def _last_write(store: TaskStore) -> float:
    """The store's latest commit as Unix time (its own clock is monotonic); 0 before one."""
    if not store.last_commit:
        return 0.0
    return time.time() - (time.monotonic() - store.last_commit)
