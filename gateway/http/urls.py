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

Nothing under /admin/ is served here: the operators' API (`gateway.http.admin`) has an address
of its own (admin.listen), so this table answers it 404.

aiohttp's router is frozen once the app starts, and a reload (`gateway.http.reload`) changes the
routes' paths and their metadata paths: so one catch-all resource, registered last, looks each
such path up in the `RouteTable` in force (`configured`). The paths of the routes at start are
fixed resources too, to that same handler, so that aiohttp finds them sooner; what answers
there is still what the table in force says.

What happens to a request is decided next, in `gateway.protocol.dispatch`; when a task runs,
in `gateway.tasks.runner`.
"""

from __future__ import annotations

from collections.abc import Callable

from aiohttp import web

from gateway.config import Settings
from gateway.http import admission, cors, endpoint_session
from gateway.http import endpoint as mcp_endpoint
from gateway.http.health import Health
from gateway.http.keys import HEALTH, METRICS, ROUTE_TABLE, ROUTES, SESSIONS
from gateway.http.middleware import Handler
from gateway.http.request_body import expect_continue
from gateway.http.resource_metadata import metadata_response
from gateway.http.routing import RouteTable
from gateway.route import Route


async def healthz(request: web.Request) -> web.Response:
    """Serving, and the store takes durable writes: what a load balancer should ask."""
    return await request.app[HEALTH].handler(request)


async def readyz(request: web.Request) -> web.Response:
    """As /healthz, and 503 once a drain has begun: what a readiness probe should ask."""
    return await request.app[HEALTH].ready(request)


_ENDPOINTS = {
    "POST": mcp_endpoint.post,
    "GET": endpoint_session.get,
    "DELETE": endpoint_session.delete,
}


async def configured(request: web.Request) -> web.StreamResponse:
    """A path the fixed resources do not serve: a route's endpoint or metadata, as the table
    in force says (404 for anything else)."""
    table = request.app[ROUTE_TABLE]
    route = table.route(request.path) or _retiring(request, table)
    if request.method == "OPTIONS" and (route is not None or table.document(request.path)):
        return cors.preflight(request)
    if route is not None:
        endpoint = _ENDPOINTS.get(request.method)
        if endpoint is None:
            raise web.HTTPMethodNotAllowed(request.method, tuple(_ENDPOINTS))
        return await endpoint(route, request)
    document = table.document(request.path)
    if document is None:
        raise web.HTTPNotFound()
    if request.method not in ("GET", "HEAD"):
        raise web.HTTPMethodNotAllowed(request.method, ("GET", "HEAD"))
    return metadata_response(document)


def _retiring(request: web.Request, table: RouteTable) -> Route | None:
    """A route a reload removed, for a request in one of the sessions still open on it."""
    route = table.retiring(request.path)
    if route is None:
        return None
    if not request.app[SESSIONS].uses(route):
        table.retire(route)
        return None
    return route if request.headers.get(admission.SESSION_HEADER) else None


def add_routes(
    app: web.Application, settings: Settings, guarded: Callable[[Handler], Handler]
) -> None:
    """The table above, each handler served as `guarded` makes it (`middleware.guarded`)."""
    app[ROUTE_TABLE] = RouteTable(app[ROUTES])
    # No `100 Continue` before the guard and the endpoint have passed the request.
    app.router.add_get("/healthz", guarded(healthz), expect_handler=expect_continue)
    app.router.add_get("/readyz", guarded(readyz), expect_handler=expect_continue)
    app.router.add_get("/livez", guarded(Health.live), expect_handler=expect_continue)
    if settings.metrics.enabled and settings.metrics.listen is None:
        metrics = app[METRICS].handler(settings.metrics.bearer_token)
        app.router.add_get("/metrics", guarded(metrics), expect_handler=expect_continue)
    serve = guarded(configured)
    # aiohttp finds a fixed path by one lookup, where a route's path fell through each of its
    # prefixes to the catch-all's regular expression (10,000 instructions of a relayed call's
    # 722,000). A path aiohttp would read as a pattern is left to the catch-all.
    for route in app[ROUTES].values():
        if "{" not in route.path and "}" not in route.path:
            app.router.add_route("*", route.path, serve, expect_handler=expect_continue)
    # Last, and indexed under "/": aiohttp tries the fixed paths above first. Any method, so
    # that the router never answers itself: every answer passes the guard.
    app.router.add_route("*", "/{path:.*}", serve, expect_handler=expect_continue)
