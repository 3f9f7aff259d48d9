"""Request middlewares: metrics, Origin validation, and the one place exceptions become
responses."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable

from aiohttp import web

from . import jsonrpc
from .errors import ForbiddenOrigin, GatewayError
from .keys import METRICS, SETTINGS

log = logging.getLogger(__name__)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def origin_allowed(origin: str, allowed: tuple[str, ...]) -> bool:
    """Exact origins, or patterns such as `http://localhost:*` (port wildcard)."""
    origin = origin.lower().rstrip("/")
    for pattern in allowed:
        pattern = pattern.lower().rstrip("/")
        if origin == pattern:
            return True
        if pattern.endswith(":*"):
            host = pattern[:-2]
            port = origin.removeprefix(host + ":") if origin.startswith(host + ":") else None
            if origin == host or (port is not None and port.isdigit()):
                return True
    return False


@web.middleware
async def errors(request: web.Request, handler: Handler) -> web.StreamResponse:
    try:
        return await handler(request)
    except GatewayError as exc:
        if exc.http_status >= 500:
            log.warning("%s %s: %s", request.method, request.path, exc.message)
        body = jsonrpc.error_response(None, exc.code, exc.message, exc.data)
        return web.Response(
            text=jsonrpc.dump(body),
            status=exc.http_status,
            content_type="application/json",
            headers=exc.headers,
        )


@web.middleware
async def check_origin(request: web.Request, handler: Handler) -> web.StreamResponse:
    # Browsers send Origin; a page on another site reaching a loopback gateway through DNS
    # rebinding is exactly what the transports spec's MUST on Origin validation stops.
    origin = request.headers.get("Origin")
    if origin is not None and not origin_allowed(
        origin, request.app[SETTINGS].http.allowed_origins
    ):
        raise ForbiddenOrigin(f"Forbidden: Origin {origin!r} is not allowed (http.allowed_origins)")
    return await handler(request)


#: Where handlers note which route and MCP method a request was, for the metrics.
ROUTE = web.RequestKey("route", str)
METHOD = web.RequestKey("method", str)


@web.middleware
async def observe(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Count and time every request; outermost, so it sees the status errors became."""
    started = time.perf_counter()
    status = 500
    try:
        response = await handler(request)
        status = response.status
        return response
    except asyncio.CancelledError:
        status = 0  # the client went away mid-answer (a closed stream): not a server error
        raise
    finally:
        route = request.get(ROUTE)
        if route is not None:
            metrics = request.app[METRICS]
            method = metrics.method(request.get(METHOD, request.method))
            outcome = (
                "disconnected"
                if status == 0
                else "ok"
                if status < 400
                else ("rejected" if status < 500 else "error")
            )
            metrics.request_done(route, method, outcome, time.perf_counter() - started)
