"""The URL table: every path the gateway serves, on one screen. This is where a request goes.

    POST|GET|DELETE  /{route}/mcp (or routes[].path)   one Streamable HTTP endpoint per route
    GET              /.well-known/oauth-protected-resource/{route}/mcp
                                                        auth mode oauth: the route's RFC 9728
                                                        metadata (and the bare path for the
                                                        gateway, with oauth.shared_resource)
    GET              /healthz                           cheap health for load balancers
    GET              /readyz                            readiness: /healthz, and not draining
    GET              /livez                             liveness: the process answers
    GET              /metrics                           Prometheus (unless metrics.listen
                                                        gives it its own address)

What happens to a request is decided next, in `gateway.protocol.dispatch`; when a task runs,
in `gateway.tasks.runner`.
"""

from __future__ import annotations

from functools import partial

from aiohttp import web

from gateway.config import Settings
from gateway.http import endpoint as mcp_endpoint
from gateway.http.health import Health
from gateway.http.resource_metadata import metadata_handler
from gateway.keys import HEALTH, METRICS, ROUTES
from gateway.security.oauth import shared_metadata


async def healthz(request: web.Request) -> web.Response:
    """Serving, and the store takes durable writes: what a load balancer should ask."""
    return await request.app[HEALTH].handler(request)


async def readyz(request: web.Request) -> web.Response:
    """As /healthz, and 503 once a drain has begun: what a readiness probe should ask."""
    return await request.app[HEALTH].ready(request)


def add_routes(app: web.Application, settings: Settings) -> None:
    for route in settings.routes:
        resource = app.router.add_resource(route.http_path, name=f"mcp:{route.name}")
        resource.add_route("POST", partial(mcp_endpoint.post, route.name))
        resource.add_route("GET", partial(mcp_endpoint.get, route.name))
        resource.add_route("DELETE", partial(mcp_endpoint.delete, route.name))
    protected = [r.resource for r in app[ROUTES].values() if r.resource is not None]
    for entry in protected:
        app.router.add_get(entry.metadata_path, metadata_handler(entry.metadata))
    if (shared := shared_metadata(protected)) is not None:
        app.router.add_get(shared[0], metadata_handler(shared[1]))
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    app.router.add_get("/livez", Health.live)
    if settings.metrics.enabled and settings.metrics.listen is None:
        app.router.add_get("/metrics", app[METRICS].handler(settings.metrics.bearer_token))
