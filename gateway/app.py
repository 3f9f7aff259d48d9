"""create_app(settings): the composition root, the only place parts are wired together.

Data flow for one client message:

    client --HTTP--> middleware (Origin check, errors -> JSON-RPC error bodies)
        --> routes (one Streamable HTTP endpoint per configured route)
        --> mcp_endpoint (headers, body, session lookup)
        --> dispatch.decide(message)
              Initialize -> session registry opens a session and its upstream client
              Forward    -> session.forward -> upstream client -> answer on the request's stream
              Deliver    -> session.deliver -> upstream (ids mapped back to the upstream's)
    upstream --server messages--> session -> the right downstream stream (POST or GET)

Everything long-lived (upstream connection pools, sessions and their children) is created in
a cleanup context here and released when the app stops.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

from aiohttp import web

from . import middleware
from .config import Settings
from .keys import SESSIONS, SETTINGS, UPSTREAMS
from .routes import add_routes
from .session import SessionRegistry
from .upstream import UpstreamRoute


def create_app(settings: Settings) -> web.Application:
    app = web.Application(
        middlewares=[middleware.errors, middleware.check_origin],
        # The endpoint enforces http.max_body_bytes itself, with a JSON-RPC error body.
        client_max_size=settings.http.max_body_bytes + 1,
    )
    app[SETTINGS] = settings
    add_routes(app, settings)
    app.cleanup_ctx.append(_upstreams_and_sessions)
    return app


async def _upstreams_and_sessions(app: web.Application) -> AsyncIterator[None]:
    settings = app[SETTINGS]
    app[UPSTREAMS] = {route.name: UpstreamRoute(route) for route in settings.routes}
    app[SESSIONS] = SessionRegistry(settings.sessions, settings.http)
    app[SESSIONS].start_reaper()
    yield
    await app[SESSIONS].close()
    for upstream in app[UPSTREAMS].values():
        await upstream.close()
