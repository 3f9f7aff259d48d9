"""Prometheus metrics on a per-app registry, with bounded label values.

Labels only ever hold values from closed sets: route names from the configuration, JSON-RPC
methods from a fixed list and tool names the upstream listed, capped per route (`labels`), the
two protocol generations, task statuses, and short outcome words. Anything else is counted as
`other`. Never a task id, a session id or a principal: those would make every series unique
and the registry grow without bound.
"""

from __future__ import annotations

import hmac
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from aiohttp import web
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from gateway.observability import labels
from gateway.observability.tally import Tallies
from gateway.protocol.versions import GENERATIONS, LEGACY_GENERATION

PREFIX = "mcp_gateway"

M = TypeVar("M", Counter, Gauge, Histogram)

# Seconds: fast JSON-RPC answers up to tool calls that take many minutes.
_LATENCY = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 1800)
_STORE = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1)


class Metrics:
    def __init__(self, routes: list[str]) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        #: The labels whose values come from outside, each from a closed set (see `labels`).
        tools = self._tools = labels.ToolNames()
        self.method, self.learn_tools, self.tool = labels.method, tools.learn, tools.tool
        # Label values are bounded, so these caches are too.
        #: Labelled children by metric and label values (see `child`).
        self._children: dict[tuple[Any, ...], Any] = {}
        #: upstream_up by (route, upstream), as last set.
        self._up: dict[tuple[str, str], int] = {}
        #: Routes of several members: their members' health sets their upstream_up.
        self._member_routes: set[str] = set()
        r = self.registry
        p = PREFIX
        # The series every request and relayed call touches: plain numbers (see `tally`).
        tallies = Tallies()
        self.requests = tallies.counter(
            f"{p}_requests",
            "Client HTTP requests by route, protocol generation, MCP method and outcome.",
            ["route", "generation", "method", "outcome"],
        )
        self.request_seconds = tallies.histogram(
            f"{p}_request_duration_seconds",
            "Time to answer client requests (until the answer, or its stream, ends).",
            ["route", "generation", "method"],
            _LATENCY,
        )
        self.upstream_requests = tallies.counter(
            f"{p}_upstream_requests",
            "Requests to upstreams by route, tool and outcome "
            "(ok, tool_error, jsonrpc_error, timeout, connection, protocol).",
            ["route", "tool", "outcome"],
        )
        self.upstream_seconds = tallies.histogram(
            f"{p}_upstream_request_duration_seconds",
            "Upstream request latency.",
            ["route", "tool"],
            _LATENCY,
        )
        # ... and every task.
        self.tasks_created = tallies.counter(f"{p}_tasks_created", "Tasks created.", ["route"])
        self.tasks_finished = tallies.counter(
            f"{p}_tasks_finished", "Tasks that reached a terminal status.", ["route", "status"]
        )
        self.tasks_active = tallies.gauge(
            f"{p}_tasks_active",
            "Tasks now working or input_required in this process.",
            ["route", "status"],
        )
        self.task_seconds = tallies.histogram(
            f"{p}_task_duration_seconds",
            "Time from creation to the terminal status.",
            ["route", "status"],
            _LATENCY,
        )
        tallies.register(r)
        self.task_reruns = Counter(
            f"{p}_task_reruns",
            "Tasks of tools safe to repeat found running after a restart: run again, or failed "
            "(attempts, time limit or ttl used up).",
            ["route", "outcome"],
            registry=r,
        )
        self.tasks_expired = Counter(
            f"{p}_tasks_expired", "Tasks deleted by the sweeper after their ttl.", registry=r
        )
        self.input_waits = Counter(
            f"{p}_input_required", "Times a task moved to input_required.", ["route"], registry=r
        )
        self.input_wait_seconds = Histogram(
            f"{p}_input_required_duration_seconds",
            "How long tasks waited for client input.",
            ["route"],
            buckets=_LATENCY,
            registry=r,
        )
        self.result_waiters = Gauge(
            f"{p}_task_result_waiters",
            "tasks/result requests waiting for a task to end.",
            ["route"],
            registry=r,
        )
        self.wakeups_lost = Counter(
            f"{p}_task_wakeups_lost_total",
            "Waits for a task that its backstop poll ended with a change no wake-up reported.",
            ["route"],
            registry=r,
        )
        self.sessions = Gauge(
            f"{p}_sessions_active", "Live client sessions.", ["route"], registry=r
        )
        self.children = Gauge(
            f"{p}_stdio_children", "Running stdio upstream processes.", ["route"], registry=r
        )
        self.auth_failures = Counter(
            f"{p}_auth_failures", "Refused credentials.", ["route"], registry=r
        )
        self.limited = Counter(
            f"{p}_limited_requests",
            "Requests refused by a limit (requests, sessions, active_tasks).",
            ["route", "limit"],
            registry=r,
        )
        # What the alert rules (grafana/alerts.yml) need beside the rest.
        self.upstream_up = Gauge(
            f"{p}_upstream_up",
            "1 while the upstream answered its latest call (any answer, an error one too), 0 "
            "after it could not be reached; `upstream` is the member of a route of several, "
            "else the route's name.",
            ["route", "upstream"],
            registry=r,
        )
        self.child_exits = Counter(
            f"{p}_stdio_child_exits",
            "stdio upstream processes that exited by themselves (not stopped by the gateway).",
            ["route"],
            registry=r,
        )
        self.children_max = Gauge(
            f"{p}_stdio_children_max", "upstream.max_children of the route.", ["route"], registry=r
        )
        self.sessions_max = Gauge(f"{p}_sessions_max", "sessions.max_sessions.", registry=r)
        self.replicas_live = Gauge(
            f"{p}_replicas_live",
            "Live replicas this one's latest lease round counted (1 alone): each holds 1/N of "
            "every request rate.",
            registry=r,
        )
        self.task_time_limit = Gauge(
            f"{p}_task_time_limit_seconds",
            "tasks.time_limit_seconds of the route (+Inf without one).",
            ["route"],
            registry=r,
        )
        self.oldest_task = Gauge(
            f"{p}_task_oldest_running_seconds",
            "Age of the oldest task this process runs on the route (0 without one).",
            ["route"],
            registry=r,
        )
        #: The age of a route's oldest running task (the runner's telemetry sets it).
        self.oldest_running: Callable[[str], float] = lambda route: 0.0
        self.last_store_write = Gauge(
            f"{p}_store_last_write_timestamp_seconds",
            "When (Unix time) the task store last committed a write (0 before the first).",
            registry=r,
        )
        self.draining = Gauge(
            f"{p}_draining",
            "1 while the gateway drains before it stops (after SIGTERM or SIGINT), else 0.",
            registry=r,
        )
        self.store_seconds = Histogram(
            f"{p}_store_operation_duration_seconds",
            "Task store operation latency.",
            ["operation"],
            buckets=_STORE,
            registry=r,
        )
        self.config_reloads = Counter(
            f"{p}_config_reloads",
            "Configuration reloads (SIGHUP) by outcome: applied, or refused (the file was "
            "invalid and the running configuration stayed).",
            ["outcome"],
            registry=r,
        )
        for outcome in ("applied", "refused"):
            self.config_reloads.labels(outcome)
        for route in routes:
            self.add_route(route)

    def add_route(self, route: str) -> None:
        """A route's series, at zero so dashboards show zeros rather than gaps: at start, and
        for a route a reload adds (a removed route's series stay, as counters must)."""
        if not self._tools.add_route(route):
            return
        self.tasks_created.touch(route)
        self.auth_failures.labels(route)
        self.sessions.labels(route).set(0)
        self.children.labels(route).set(0)
        self.result_waiters.labels(route).set(0)
        self.wakeups_lost.labels(route)
        self.child_exits.labels(route)
        self.oldest_task.labels(route).set_function(lambda: self.oldest_running(route))
        self.input_waits.labels(route)
        for status in ("working", "input_required"):
            self.tasks_active.set(0, route, status)
        for status in ("completed", "failed", "cancelled"):
            self.tasks_finished.touch(route, status)
        for limit in ("requests", "sessions", "active_tasks", "stored_bytes"):
            self.limited.labels(route, limit)

    def request_done(
        self, route: str, generation: str, method: str, outcome: str, seconds: float
    ) -> None:
        """One client request: counted and timed. `generation` is one of `GENERATIONS`;
        anything else is counted as the session one."""
        generation = generation if generation in GENERATIONS else LEGACY_GENERATION
        self.requests.inc(route, generation, method, outcome)
        self.request_seconds.observe(seconds, route, generation, method)

    def upstream_reached(self, route: str, reached: bool, member: str | None = None) -> None:
        """Whether the route's upstream (or its `member`) answered its latest call."""
        if member is None:
            if route in self._member_routes:
                return  # (the member is not known here: `MemberHealth` tells)
            member = route
        up = 1 if reached else 0
        if self._up.get((route, member)) != up:  # (a gauge's set takes a lock; rarely changes)
            self._up[(route, member)] = up
            self.child(self.upstream_up, route, member).set(up)

    def upstream_state(self, route: str, upstream: str) -> bool | None:
        """Whether `upstream` of `route` answered its latest call, as `upstream_up` says;
        None before any call."""
        up = self._up.get((route, upstream))
        return None if up is None else up == 1

    def learn_members(self, route: str, members: list[str]) -> None:
        """A route of several `members`: each starts up, until its health says otherwise."""
        self._member_routes.add(route)
        for member in members:
            self.upstream_reached(route, True, member)

    def child(self, metric: M, *values: str) -> M:
        """`metric.labels(*values)`, cached: for the library's metrics that change often (a
        store write's latency, upstream_up); `labels` takes a lock and builds its key each
        time. Children are never removed. (What every request and task touches is a tally.)"""
        key = (metric, *values)
        found = self._children.get(key)
        if found is None:
            found = self._children[key] = metric.labels(*values)
        return found

    def observe_store(self, operation: str, seconds: float) -> None:
        self.child(self.store_seconds, operation).observe(seconds)

    def upstream_call(self, route: str, tool: object, outcome: str, seconds: float) -> None:
        name = self.tool(route, tool)
        self.upstream_requests.inc(route, name, outcome)
        self.upstream_seconds.observe(seconds, route, name)
        self.upstream_reached(route, outcome != "connection")

    def handler(self, bearer_token: str) -> Callable[[web.Request], Awaitable[web.Response]]:
        """The /metrics handler; with a token, only `Authorization: Bearer <token>` may read."""
        expected = f"Bearer {bearer_token}".encode()

        async def metrics(request: web.Request) -> web.Response:
            if bearer_token and not hmac.compare_digest(
                request.headers.get("Authorization", "").encode(), expected
            ):
                return web.Response(status=401, headers={"WWW-Authenticate": "Bearer"})
            body = generate_latest(self.registry)
            return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

        return metrics
