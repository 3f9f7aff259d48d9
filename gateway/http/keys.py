"""Typed keys for what the application holds (no module-level state anywhere else)."""

from __future__ import annotations

from ipaddress import IPv4Network, IPv6Network
from typing import TYPE_CHECKING

from aiohttp import web

from gateway.config import Settings
from gateway.http.drain import Drain
from gateway.http.health import Health
from gateway.http.routing import RouteTable
from gateway.observability.metrics import Metrics
from gateway.route import Route
from gateway.session.held import HeldSessions
from gateway.session.mrtr import ParkedCalls
from gateway.session.registry import SessionRegistry
from gateway.tasks.api_2025 import TaskApi
from gateway.tasks.api_modern import ModernTaskApi
from gateway.tasks.runner import TaskRunner
from gateway.tasks.store import TaskStore

if TYPE_CHECKING:  # gateway.http.reload reads these keys; traces import an optional extra
    from gateway.http.reload import Reloads
    from gateway.observability.traces import Tracing

#: The settings the gateway started with; the routes, auth and limits in force since the last
#: reload are `RELOADS`' (the rest, read once at start, stays as it was).
SETTINGS = web.AppKey("settings", Settings)
SESSIONS = web.AppKey("sessions", SessionRegistry)
#: The upstream sessions held for 2026-07-28 callers, who have no session of their own.
HELD_SESSIONS = web.AppKey("held_sessions", HeldSessions)
#: The routes in force, by name (a reload updates this dict in place).
ROUTES = web.AppKey("routes", dict[str, Route])
#: Where each route is served: the URL table a reload swaps.
ROUTE_TABLE = web.AppKey("route_table", RouteTable)
#: What reloads share: the settings in force, the routes they replaced.
RELOADS: web.AppKey[Reloads] = web.AppKey("reloads")
STORE = web.AppKey("store", TaskStore)
RUNNER = web.AppKey("runner", TaskRunner)
TASK_API = web.AppKey("task_api", TaskApi)
#: The tasks extension's API (2026-07-28), over the same store and runner.
MODERN_TASK_API = web.AppKey("modern_task_api", ModernTaskApi)
#: 2026-07-28 calls waiting between MRTR rounds for the client's retry.
PARKED_CALLS = web.AppKey("parked_calls", ParkedCalls)
METRICS = web.AppKey("metrics", Metrics)
HEALTH = web.AppKey("health", Health)
#: Whether the gateway drains before it stops (the first SIGTERM or SIGINT).
DRAIN = web.AppKey("drain", Drain)
#: Host header names served (None: any), from http.allowed_hosts and the listen address.
ALLOWED_HOSTS: web.AppKey[tuple[str, ...] | None] = web.AppKey("allowed_hosts")
#: http.trusted_proxies, parsed: whose Forwarded / X-Forwarded-* headers are believed.
TRUSTED_PROXIES: web.AppKey[tuple[IPv4Network | IPv6Network, ...]] = web.AppKey("trusted_proxies")
#: The tracer (None: the `tracing` section is absent, and nothing traces).
TRACING: web.AppKey[Tracing | None] = web.AppKey("tracing")
