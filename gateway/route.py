"""Route: what every request to one configured route shares at run time.

Its settings slice (task policy, limits), its authenticator and rate limiter, with auth mode
oauth the protected resource it is (metadata, scopes), and its upstream (a connection pool or
the stdio child cap). Built once per route at start-up, and again by a reload that changes
what it is built from (`RouteInputs`); sessions keep the `Route` they were opened on.
"""

from __future__ import annotations

import hashlib
import logging
import math
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING

from gateway.config import (
    AuthConfig,
    Limits,
    RouteConfig,
    Settings,
    route_auth,
    route_auth_key,
    route_key,
    route_limits,
)
from gateway.config.base import read_regular_file
from gateway.observability.audit import audit
from gateway.observability.logs import printable
from gateway.observability.metrics import Metrics
from gateway.protocol import jsonrpc, rewrite
from gateway.protocol.curation import Curation
from gateway.protocol.decisions import Reject
from gateway.protocol.modern_headers import ToolHeaders
from gateway.security.auth import Authenticator
from gateway.security.jwt_keys import MAX_KEY_FILE_BYTES
from gateway.security.limits import RateLimiter, Share
from gateway.security.oauth import ProtectedResource
from gateway.upstream import MemberRoutes, UpstreamRoute, upstreams_of

if TYPE_CHECKING:
    from gateway.observability.traces import Tracing

log = logging.getLogger(__name__)

#: Tools whose annotations a route keeps (an upstream listing more is not remembered past it).
_MAX_TOOLS = 1000


@dataclass(frozen=True, eq=True)
class RouteInputs:
    """Everything a `Route` is built from. Secrets compare too (an API key's digest, a
    `${VAR}` value, the contents of the key files the auth section names), so two equal
    inputs build the same route and a rotated secret makes them differ."""

    config: RouteConfig
    auth: AuthConfig
    limits: Limits
    #: (path, SHA-256 of its contents) of each key file the route's auth reads.
    key_files: tuple[tuple[str, str], ...]

    @classmethod
    def of(cls, settings: Settings, config: RouteConfig) -> RouteInputs:
        auth = route_auth(settings, config)
        files = () if auth.jwt is None else (auth.jwt.public_key_file, auth.jwt.jwks_file)
        key_files = tuple((path, _digest(path)) for path in files if path is not None)
        return cls(config, auth, route_limits(settings, config), key_files)


def _digest(path: str) -> str:
    # Read as the verifier reads it, bounded and never waiting on a FIFO: this read comes
    # first, at start and in every reload.
    try:
        return hashlib.sha256(read_regular_file(path, MAX_KEY_FILE_BYTES)).hexdigest()
    except OSError as exc:
        return f"unreadable: {exc.strerror}"  # the verifier refuses it, naming the key
    except ValueError as exc:
        return f"unreadable: {exc}"


class Route:
    def __init__(
        self,
        settings: Settings,
        config: RouteConfig,
        metrics: Metrics,
        previous: Route | None = None,
        tracing: Tracing | None = None,
        share: Share | None = None,
    ) -> None:
        """The route `config` describes, under the gateway-wide `settings` it inherits.
        `previous` is the route of that name a reload replaces: when the upstream section is
        the same, its upstream (connection pool, child cap) and what it learned of the
        upstream's tools are shared, so rotating a client key costs no upstream state.
        `tracing` is the gateway's tracer, None when traces are off. `share` is this
        replica's share of the request rates (None: the whole of them, one process).

        Raises:
            ValueError: a key file the auth section names, or an upstream signing key, is
                missing or unusable (the message names the key).
        """
        self.name = config.name
        #: The URL path it is served at (routes[].path, default /NAME/mcp).
        self.path = config.http_path
        self.inputs = RouteInputs.of(settings, config)
        self.metrics = metrics
        self.tracing = tracing
        self.policy = config.tasks
        #: Which tools clients see and under what names (`routes[].tools`).
        self.curation = Curation(config.tools)
        if self.curation.hides_everything():
            log.warning("route %s: its tools.allow and tools.deny hide every tool", config.name)
        self._shadowed: set[str] = set()
        #: The protocol generations this route serves (2025-11-25, 2026-07-28).
        self.generations = config.generations
        self.limits = self.inputs.limits
        auth = self.inputs.auth
        #: With auth mode oauth: the resource this route is, its metadata and scope rules.
        self.resource: ProtectedResource | None = None
        if auth.oauth is not None:
            self.resource = ProtectedResource(
                auth.oauth,
                config.http_path,
                config.name,
                config.required_scopes,
                config.tool_scopes,
            )
        self.authenticator = Authenticator(auth, self.resource, route_auth_key(settings, config))
        #: Without authentication callers cannot be told apart: tasks/list is offered only
        #: when the operator opts in (the spec's SHOULD NOT otherwise).
        self.lists_tasks = self.authenticator.required or auth.list_tasks_without_auth
        self.rate = RateLimiter(self.limits.requests_per_second, self.limits.burst, share=share)
        #: The `Mcp-Param-*` headers each tool declares, from the tools/list answers relayed.
        self.tool_headers = ToolHeaders()
        #: Each tool's `annotations` from the latest tools/list answer relayed (for
        #: `tasks.repeatable: annotated`), at most `_MAX_TOOLS` of them.
        self.tool_annotations: dict[str, dict[str, object]] = {}
        self.upstream: UpstreamRoute | MemberRoutes
        if (
            previous is not None
            and previous.inputs.config.members == config.members
            and previous.inputs.config.max_result_bytes == config.max_result_bytes
        ):
            self.tool_headers, self.upstream = previous.tool_headers, previous.upstream
            self.tool_annotations = previous.tool_annotations
        else:
            place = route_key(settings.routes, config)
            self.upstream = upstreams_of(
                config, place, partial(_member_state, metrics, config.name)
            )
            if tracing is not None:
                self.upstream.trace(tracing)
        if config.upstreams is not None:
            metrics.learn_members(config.name, [m.name for m in config.upstreams])
        if any(name.lower() == "authorization" for name in self.upstream.copied_headers):
            log.warning(
                "route %s passes each client's Authorization header to its upstream "
                "(upstream.identity.mode: passthrough or forward_headers): the upstream sees "
                "credentials meant for this gateway; prefer identity modes signed_assertion or "
                "client_credentials",
                config.name,
            )
        metrics.learn_tools(config.name, list(config.tasks.tools))
        metrics.children.labels(config.name).set_function(lambda: self.upstream.children_running)
        metrics.children_max.labels(config.name).set(self.upstream.children_max)
        limit = config.tasks.time_limit_seconds
        metrics.task_time_limit.labels(config.name).set(math.inf if limit is None else limit)
        self.upstream.on_child_exit(metrics.child_exits.labels(config.name).inc)

    def listed(self, answer: jsonrpc.Response) -> jsonrpc.Response:
        """A tools/list page from the upstream as clients see it (`routes[].tools`), learnt
        from under the names clients call."""
        if not self.curation.active:  # (most routes: one lesson, the names are the same)
            self.learn_tools(answer)
            return answer
        for name in self.curation.shadowed(answer):
            if name in self._shadowed:
                continue
            self._shadowed.add(name)  # at most one per rename target
            log.warning(
                "route %s: the upstream's tool %s is hidden: tools.rename gives its name to "
                "another tool",
                self.name,
                printable(name, 200),
            )
        curated = self.curation.tools_list(answer)
        self.learn_tools(curated)
        # Upstream calls are counted under the name they are made with: the upstream's.
        shown = [u for u in rewrite.tool_names(answer) if self.curation.client_name(u) is not None]
        self.metrics.learn_tools(self.name, shown)
        return curated

    def upstream_call(
        self, request: jsonrpc.Request, principal: str | None, generation: str
    ) -> jsonrpc.Request | Reject:
        """A client's tools/call under the upstream's tool name, or the refusal of a tool
        this route does not show (audited; it never reaches the upstream)."""
        curated = self.curation.call(request)
        if isinstance(curated, Reject):
            name = jsonrpc.param(request, "name")
            tool = printable(name, 200) if isinstance(name, str) else None
            who = {"principal": principal, "generation": generation}
            audit("tool_hidden", route=self.name, tool=tool, **who)
        return curated

    def learn_tools(self, answer: jsonrpc.Response) -> None:
        """What a tools/list answer (either generation's) teaches: tool names as metric
        labels, and the headers 2026-07-28 callers must mirror for each tool."""
        self.metrics.learn_tools(self.name, rewrite.tool_names(answer))
        self.tool_headers.learn(answer)
        tools = answer.result.get("tools")
        for tool in tools if isinstance(tools, list) else ():
            if isinstance(tool, dict) and isinstance(name := tool.get("name"), str):
                annotations = tool.get("annotations")
                if isinstance(annotations, dict):
                    if name in self.tool_annotations or len(self.tool_annotations) < _MAX_TOOLS:
                        self.tool_annotations[name] = annotations
                else:
                    self.tool_annotations.pop(name, None)

    def repeats(self, tool: str) -> bool:
        """Whether a task of `tool` is run again after a restart (`tasks.repeatable`), as
        its annotations are known now (the answer is kept with the task)."""
        return self.policy.repeats(tool, self.tool_annotations.get(tool))

    async def close(self) -> None:
        await self.upstream.close()


def _member_state(metrics: Metrics, route: str, member: str, up: bool) -> None:
    metrics.upstream_reached(route, up, member)
