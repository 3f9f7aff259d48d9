"""Route: what every request to one configured route shares at run time.

Its settings slice (task policy, limits), its authenticator and rate limiter, with auth mode
oauth the protected resource it is (metadata, scopes), and its upstream (a connection pool or
the stdio child cap). Built once per route at start-up.
"""

from __future__ import annotations

import logging

from gateway.config import RouteConfig, Settings, route_auth, route_limits
from gateway.observability.metrics import Metrics
from gateway.protocol import jsonrpc, rewrite
from gateway.protocol.modern_headers import ToolHeaders
from gateway.security.auth import Authenticator
from gateway.security.limits import RateLimiter
from gateway.security.oauth import ProtectedResource
from gateway.upstream import UpstreamRoute

log = logging.getLogger(__name__)


class Route:
    def __init__(self, settings: Settings, config: RouteConfig, metrics: Metrics) -> None:
        self.name = config.name
        self.metrics = metrics
        self.policy = config.tasks
        #: The protocol generations this route serves (2025-11-25, 2026-07-28).
        self.generations = config.generations
        self.limits = route_limits(settings, config)
        auth = route_auth(settings, config)
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
        self.authenticator = Authenticator(auth, self.resource)
        #: Without authentication callers cannot be told apart: tasks/list is offered only
        #: when the operator opts in (the spec's SHOULD NOT otherwise).
        self.lists_tasks = self.authenticator.required or auth.list_tasks_without_auth
        self.rate = RateLimiter(self.limits.requests_per_second, self.limits.burst)
        #: The `Mcp-Param-*` headers each tool declares, from the tools/list answers relayed.
        self.tool_headers = ToolHeaders()
        self.upstream = UpstreamRoute(config)
        if any(name.lower() == "authorization" for name in config.upstream.copied_headers):
            log.warning(
                "route %s passes each client's Authorization header to its upstream "
                "(upstream.identity.mode: passthrough or forward_headers): the upstream sees "
                "credentials meant for this gateway; prefer identity modes signed_assertion or "
                "client_credentials",
                config.name,
            )
        metrics.learn_tools(config.name, list(config.tasks.tools))
        metrics.children.labels(config.name).set_function(lambda: self.upstream.slots.running)

    def learn_tools(self, answer: jsonrpc.Response) -> None:
        """What a tools/list answer (either generation's) teaches: tool names as metric
        labels, and the headers 2026-07-28 callers must mirror for each tool."""
        self.metrics.learn_tools(self.name, rewrite.tool_names(answer))
        self.tool_headers.learn(answer)

    async def close(self) -> None:
        await self.upstream.close()
