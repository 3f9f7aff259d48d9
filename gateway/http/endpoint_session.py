"""A session's own requests to a route's endpoint (transports spec, 2025-11-25): GET opens
the session's standalone stream, or with Last-Event-ID resumes one it still holds, and DELETE
ends the session. Messages go by POST (`endpoint`); a session-less 2026-07-28 client has no
session to ask for, and gets 405 here.
"""

from __future__ import annotations

import logging

from aiohttp import web

from gateway.http import admission, sse
from gateway.http.keys import SESSIONS, SETTINGS
from gateway.http.middleware import ROUTE as ROUTE_KEY
from gateway.observability.logs import printable
from gateway.protocol.errors import InvalidRequest, MethodNotAllowed, NotAcceptable
from gateway.protocol.versions import LEGACY_GENERATION, MODERN_PROTOCOL_VERSION
from gateway.route import Route

# The endpoint's logger, POST's too: operators filter their logs on one name per endpoint.
log = logging.getLogger("gateway.http.endpoint")


def _refuse_modern_without_session(request: web.Request, route: Route) -> None:
    """GET and DELETE belong to sessions; the 2026-07-28 generation has none (405)."""
    if request.headers.get(admission.SESSION_HEADER) or (
        MODERN_PROTOCOL_VERSION not in route.generations
    ):
        return
    version = request.headers.get(admission.VERSION_HEADER)
    if version == MODERN_PROTOCOL_VERSION or LEGACY_GENERATION not in route.generations:
        raise MethodNotAllowed(
            f"{request.method} needs a session, and the 2026-07-28 generation has none: "
            "send each request as its own POST",
            headers={"Allow": "POST"},
        )


async def get(route: Route, request: web.Request) -> web.StreamResponse:
    request[ROUTE_KEY] = route.name
    http = request.app[SETTINGS].http
    caller = await admission.admit(request, route)
    _refuse_modern_without_session(request, route)
    if not admission.accepts(request, "text/event-stream"):
        raise NotAcceptable("Not Acceptable: the Accept header must list text/event-stream")
    session = await admission.session_for(request, route, caller)
    last_event_id = request.headers.get("Last-Event-ID")
    if last_event_id is None:
        stream = session.standalone
        after, prime = stream.sent, True
    else:
        key, _, seq = last_event_id.rpartition(":")
        # isdecimal is not enough: int() refuses '²', and 10**5000 is no event number.
        numeric = seq.isascii() and seq.isdecimal() and len(seq) <= 18
        found = session.stream(key) if numeric else None
        if found is None:
            raise InvalidRequest(
                f"Last-Event-ID {printable(last_event_id, 80)!r} names no stream this "
                "session still holds"
            )
        stream, after, prime = found, int(seq), False
    return await sse.serve(request, stream, after=after, prime=prime, config=http)


async def delete(route: Route, request: web.Request) -> web.Response:
    request[ROUTE_KEY] = route.name
    caller = await admission.admit(request, route)
    _refuse_modern_without_session(request, route)
    session = await admission.session_for(request, route, caller)
    await request.app[SESSIONS].end(session)
    log.info("route %s: session %s ended by the client", route.name, session.tag)
    return web.Response(status=200)
