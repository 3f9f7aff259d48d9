"""The 2026-07-28 path of a route's endpoint: session-less requests, each its own POST.

`endpoint.post` hands over a parsed message that `protocol.modern.wants_modern` claims (no
`Mcp-Session-Id`, the 2026-07-28 version in the header or the per-request `_meta`). Here the
envelope and headers are checked (`protocol.modern.classify`), the request is decided
(`protocol.modern.decide`), and `server/discover`, `tools/list` and `tools/call` are answered
through the upstream session the gateway holds for the caller (`session.held`). Answers are
JSON; an error's HTTP status follows its code (400 for malformed, mismatched or unsupported
requests, 404 for unknown methods).
"""

from __future__ import annotations

import logging

from aiohttp import web

from gateway.http import admission
from gateway.keys import HELD_SESSIONS
from gateway.protocol import jsonrpc, modern, rewrite
from gateway.protocol.errors import INTERNAL_ERROR, InvalidRequest, UpstreamError
from gateway.route import Route

log = logging.getLogger(__name__)


async def post(
    request: web.Request, route: Route, caller: admission.Caller, message: jsonrpc.Message
) -> web.Response:
    if isinstance(message, jsonrpc.Notification):
        return web.Response(status=202)  # nothing to relay: no upstream call is the client's
    if not isinstance(message, jsonrpc.Request):
        raise InvalidRequest("a 2026-07-28 client sends requests only: this server asks it nothing")
    headers = {name.lower(): value for name, value in request.headers.items()}
    checked = modern.classify(message, headers)
    if isinstance(checked, modern.Reject):
        return _refuse(message.id, checked)
    decision = modern.decide(checked, route.policy)
    if isinstance(decision, modern.Reject):
        return _refuse(message.id, decision)
    forwarded = {
        name: value
        for name in route.upstream.config.copied_headers
        if (value := request.headers.get(name)) is not None
    }
    async with request.app[HELD_SESSIONS].session(route, caller.principal, forwarded) as held:
        try:
            if isinstance(decision, modern.Discover):
                initialized = await held.open()
                return _json(modern.discover_result(message.id, initialized))
            answer = await held.call(decision.request)
        except UpstreamError as exc:
            error = jsonrpc.error_response(
                message.id, INTERNAL_ERROR, f"upstream unavailable: {exc.message}"
            )
            return _json(jsonrpc.dump(error))
    if isinstance(answer, jsonrpc.ErrorResponse):
        return _json(jsonrpc.dump(answer), modern.http_status(answer))
    if message.method == "tools/list":
        route.metrics.learn_tools(route.name, rewrite.tool_names(answer))
    return _json(jsonrpc.dump(modern.complete(answer, message.method)))


def _refuse(request_id: jsonrpc.RequestId, reject: modern.Reject) -> web.Response:
    error = jsonrpc.error_response(request_id, reject.code, reject.message, reject.data)
    return _json(jsonrpc.dump(error), modern.http_status(error))


def _json(body: str, status: int = 200) -> web.Response:
    return web.Response(text=body, status=status, content_type="application/json")
