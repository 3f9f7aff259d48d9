"""The URL table: every path the gateway serves, on one screen."""

from __future__ import annotations

import asyncio
from functools import partial

from aiohttp import web

from . import mcp_endpoint
from .config import Settings
from .keys import METRICS, STORE


async def healthz(request: web.Request) -> web.Response:
    """Serving, and the store takes a durable write: what a load balancer should ask."""
    try:
        # Within the Docker HEALTHCHECK's 4 s, so a slow store shows as a 503 with a reason.
        async with asyncio.timeout(3):
            await request.app[STORE].check_writable()
    except Exception as exc:  # any failure means "do not send traffic here"
        return web.json_response({"status": "unavailable", "reason": str(exc)}, status=503)
    return web.json_response({"status": "ok"})


def add_routes(app: web.Application, settings: Settings) -> None:
    for route in settings.routes:
        resource = app.router.add_resource(route.http_path, name=f"mcp:{route.name}")
        resource.add_route("POST", partial(mcp_endpoint.post, route.name))
        resource.add_route("GET", partial(mcp_endpoint.get, route.name))
        resource.add_route("DELETE", partial(mcp_endpoint.delete, route.name))
    app.router.add_get("/healthz", healthz)
    if settings.metrics.enabled and settings.metrics.listen is None:
        app.router.add_get("/metrics", app[METRICS].handler(settings.metrics.bearer_token))
