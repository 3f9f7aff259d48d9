"""The server span of each route request, when tracing is on (`observability.traces`).

Installed after `middleware.guard` (which may hand on a copy of the request, with the client
address a trusted proxy names): it notes when the request arrived, and ends its span with the
HTTP status the answer has, or the one `guard` is about to give the exception. The endpoint
starts the span once the body is parsed, as its `_meta` may carry the client's trace context.
"""

from __future__ import annotations

import asyncio
import time

from aiohttp import web
from aiohttp.typedefs import Middleware

from gateway.http.middleware import METHOD, ROUTE, Handler
from gateway.observability.traces import STARTED, Tracing
from gateway.protocol.errors import GatewayError


def middleware(tracing: Tracing) -> Middleware:
    """The middleware that dates and ends the server spans of `tracing`."""

    @web.middleware
    async def traced(request: web.Request, handler: Handler) -> web.StreamResponse:
        request[STARTED] = time.time_ns()
        status = 500
        try:
            response = await handler(request)
            status = response.status
            return response
        except web.HTTPException as exc:
            status = exc.status
            raise
        except GatewayError as exc:
            status = exc.http_status
            raise
        except (asyncio.CancelledError, ConnectionError):
            status = 0  # the client went away
            raise
        finally:
            route = request.get(ROUTE)
            if route is not None:
                tracing.end_request(request, route, request.get(METHOD, request.method), status)

    return traced
