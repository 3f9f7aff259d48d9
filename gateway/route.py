"""Route: what every request to one configured route shares at run time.

Its settings slice (task policy, limits), its authenticator and rate limiter, and its
upstream (a connection pool or the stdio child cap). Built once per route at start-up.
"""

from __future__ import annotations

from gateway.config import RouteConfig, Settings, route_auth, route_limits
from gateway.observability.metrics import Metrics
from gateway.security.auth import Authenticator
from gateway.security.limits import RateLimiter
from gateway.upstream import UpstreamRoute


class Route:
    def __init__(self, settings: Settings, config: RouteConfig, metrics: Metrics) -> None:
        self.name = config.name
        self.metrics = metrics
        self.policy = config.tasks
        self.limits = route_limits(settings, config)
        auth = route_auth(settings, config)
        self.authenticator = Authenticator(auth)
        #: Without authentication callers cannot be told apart: tasks/list is offered only
        #: when the operator opts in (the spec's SHOULD NOT otherwise).
        self.lists_tasks = self.authenticator.required or auth.list_tasks_without_auth
        self.rate = RateLimiter(self.limits.requests_per_second, self.limits.burst)
        self.upstream = UpstreamRoute(config)
        metrics.learn_tools(config.name, list(config.tasks.tools))
        metrics.children.labels(config.name).set_function(lambda: self.upstream.slots.running)

    async def close(self) -> None:
        await self.upstream.close()
