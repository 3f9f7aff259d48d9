"""Browser clients: CORS for the origins `http.allowed_origins` lets in.

A page on another origin may call a route once the browser's preflight (OPTIONS) is answered
for the MCP headers, and may read `Mcp-Session-Id` (and the protocol version) only if the
answer exposes them. Origins outside the list never get here: the Origin check answers them 403
first (`middleware.guarded`), preflight included.
"""

from __future__ import annotations

from aiohttp import web

from gateway.http.keys import SETTINGS
from gateway.http.middleware import origin_allowed

#: The request headers an MCP client sends besides the CORS-safelisted ones.
ALLOWED_HEADERS = (
    "Authorization",
    "Content-Type",
    "Last-Event-ID",
    "Mcp-Method",
    "Mcp-Name",
    "MCP-Protocol-Version",
    "Mcp-Session-Id",
)
_ALLOWED = {name.lower() for name in ALLOWED_HEADERS}
#: What a page's script may read of an answer: the session to send back, the version, and
#: where to find authorization (on a 401).
EXPOSED_HEADERS = "Mcp-Session-Id, MCP-Protocol-Version, WWW-Authenticate"
METHODS = "GET, POST, DELETE, OPTIONS"
#: How long a browser may reuse a preflight's answer.
MAX_AGE_SECONDS = 600


def preflight(request: web.Request) -> web.Response:
    """The answer to a route's OPTIONS: 204 with what a cross-origin MCP client may send."""
    response = web.Response(status=204)
    response.headers["Access-Control-Allow-Methods"] = METHODS
    asked = request.headers.get("Access-Control-Request-Headers", "")
    extra = [h.strip() for h in asked.split(",") if h.strip().lower() in _ALLOWED]
    response.headers["Access-Control-Allow-Headers"] = ", ".join(
        dict.fromkeys([*ALLOWED_HEADERS, *extra])
    )
    response.headers["Access-Control-Max-Age"] = str(MAX_AGE_SECONDS)
    return response


async def on_prepare(request: web.Request, response: web.StreamResponse) -> None:
    """Every answer to a request with an Origin (one the Origin check let in) says that
    origin may read it, and which headers. Runs before the headers are sent, streams too."""
    origin = request.headers.get("Origin")
    if origin is None or not origin_allowed(origin, request.app[SETTINGS].http.allowed_origins):
        return  # a refused origin's 403 says nothing a script may read
    response.headers["Access-Control-Allow-Origin"] = origin
    response.headers["Access-Control-Expose-Headers"] = EXPOSED_HEADERS
    vary = response.headers.get("Vary")
    if vary is None or "origin" not in vary.lower():
        response.headers["Vary"] = f"{vary}, Origin" if vary else "Origin"
