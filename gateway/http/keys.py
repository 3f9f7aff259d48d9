"""Typed keys for what the application holds (no module-level state anywhere else).

The types are named for the type checker only: `app.py` wires what the keys hold, and every
part that reads one already imports its type, so importing the keys pulls in no part of the
gateway (they were a second wiring point, and a cycle with the reload).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from aiohttp import web

if TYPE_CHECKING:
    from ipaddress import IPv4Network, IPv6Network

    from gateway.calls.held import HeldSessions
    from gateway.calls.parked import ParkedCalls
    from gateway.calls.task_api import ModernTaskApi
    from gateway.config import ListenConfig, Settings
    from gateway.http.drain import Drain
    from gateway.http.health import Health
    from gateway.http.reload_state import Reloads
    from gateway.http.routing import RouteTable
    from gateway.observability.metrics import Metrics
    from gateway.observability.traces import Tracing
    from gateway.route import Route
    from gateway.security.limits import Share
    from gateway.session.registry import SessionRegistry
    from gateway.session.task_api import TaskApi
    from gateway.tasks.inputs import TaskInputs
    from gateway.tasks.runner import TaskRunner
    from gateway.tasks.store import TaskStore

#: The settings the gateway started with; the routes, auth and limits in force since the last
#: reload are `RELOADS`' (the rest, read once at start, stays as it was).
SETTINGS: web.AppKey[Settings] = web.AppKey("settings")
SESSIONS: web.AppKey[SessionRegistry] = web.AppKey("sessions")
#: The upstream sessions held for 2026-07-28 callers, who have no session of their own.
HELD_SESSIONS: web.AppKey[HeldSessions] = web.AppKey("held_sessions")
#: The routes in force, by name (a reload updates this dict in place).
ROUTES: web.AppKey[dict[str, Route]] = web.AppKey("routes")
#: Where each route is served: the URL table a reload swaps.
ROUTE_TABLE: web.AppKey[RouteTable] = web.AppKey("route_table")
#: What reloads share: the settings in force, the routes they replaced.
RELOADS: web.AppKey[Reloads] = web.AppKey("reloads")
STORE: web.AppKey[TaskStore] = web.AppKey("store")
#: This replica's share of the request rates, by the live replicas its lease rounds count.
SHARE: web.AppKey[Share] = web.AppKey("share")
RUNNER: web.AppKey[TaskRunner] = web.AppKey("runner")
TASK_API: web.AppKey[TaskApi] = web.AppKey("task_api")
#: Tasks' stored questions, and the calls running here that await their answers.
TASK_INPUTS: web.AppKey[TaskInputs] = web.AppKey("task_inputs")
#: The tasks extension's API (2026-07-28), over the same store and runner.
MODERN_TASK_API: web.AppKey[ModernTaskApi] = web.AppKey("modern_task_api")
#: 2026-07-28 calls waiting between MRTR rounds for the client's retry.
PARKED_CALLS: web.AppKey[ParkedCalls] = web.AppKey("parked_calls")
METRICS: web.AppKey[Metrics] = web.AppKey("metrics")
HEALTH: web.AppKey[Health] = web.AppKey("health")
#: Whether the gateway drains before it stops (the first SIGTERM or SIGINT).
DRAIN: web.AppKey[Drain] = web.AppKey("drain")
#: Host header names served (None: any), from http.allowed_hosts and the listen address.
ALLOWED_HOSTS: web.AppKey[tuple[str, ...] | None] = web.AppKey("allowed_hosts")
#: http.trusted_proxies, parsed: whose Forwarded / X-Forwarded-* headers are believed.
TRUSTED_PROXIES: web.AppKey[tuple[IPv4Network | IPv6Network, ...]] = web.AppKey("trusted_proxies")
#: The tracer (None: the `tracing` section is absent, and nothing traces).
TRACING: web.AppKey[Tracing | None] = web.AppKey("tracing")
#: Where each listener is bound ("listen"; "metrics" and "admin" with addresses of their own),
#: its port the one the OS chose for port 0: what the log gives as their URLs.
BOUND: web.AppKey[dict[str, ListenConfig]] = web.AppKey("bound")
