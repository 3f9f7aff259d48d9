"""The server span of each route request, when tracing is on (`observability.traces`).

Wrapped inside `middleware.guarded` (which may hand on a copy of the request, with the client
address a trusted proxy names): it notes when the request arrived, and ends its span with the
HTTP status the answer has, or the one the guard is about to give the exception. The endpoint
starts the span once the body is parsed, as its `_meta` may carry the client's trace context.
"""

from __future__ import annotations

import asyncio
import time

from aiohttp import web

from gateway.http.middleware import METHOD, ROUTE, Handler
from gateway.observability.traces import STARTED, Tracing
from gateway.protocol.errors import GatewayError


def spanned(tracing: Tracing, handler: Handler) -> Handler:
    """`handler`, its requests' server spans dated and ended in `tracing`."""

    async def serve(request: web.Request) -> web.StreamResponse:
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

    return serve
