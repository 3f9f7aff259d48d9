"""The 2026-07-28 path of a route's endpoint: session-less requests, each its own POST.

`endpoint.post` hands over a parsed message that `protocol.modern.wants_modern` claims (no
`Mcp-Session-Id`, the 2026-07-28 version in the header or the per-request `_meta`). Here the
envelope and headers are checked (`protocol.modern.classify`), the request is decided
(`protocol.modern.decide`), and answered: `tools/call` by `http.modern_tools` (MRTR rounds
and tasks), the tasks extension's methods by `calls.task_api` from the store, anything
else through an upstream session the gateway holds for the caller (`calls.held`). Answers
are JSON; an error's HTTP status follows its code (400 for malformed, mismatched or
unsupported requests, 404 for unknown methods).
"""

from __future__ import annotations

import contextlib
import logging
from dataclasses import replace

from aiohttp import web

from gateway.http import admission, modern_tools
from gateway.http.keys import HELD_SESSIONS, MODERN_TASK_API
from gateway.http.modern_tools import (
    forwarded_headers,
    holder_of,
    modern_owner,
    native_headers,
    upstream_failed,
)
from gateway.http.sse import SSE_HEADERS, STARTED
from gateway.protocol import curation, jsonrpc, modern, modern_results
from gateway.protocol.decisions import Forward, Local, Reject
from gateway.protocol.errors import (
    HEADER_MISMATCH,
    METHOD_NOT_FOUND,
    InvalidRequest,
    UpstreamError,
    UpstreamNotModern,
    UpstreamUnavailable,
)
from gateway.protocol.versions import MODERN_PROTOCOL_VERSION
from gateway.route import Route
from gateway.upstream import Answer, native

log = logging.getLogger(__name__)

_ROUTING = (modern.METHOD_HEADER, modern.NAME_HEADER)


async def post(
    request: web.Request, route: Route, caller: admission.Caller, message: jsonrpc.Message
) -> web.StreamResponse:
    headers = {name.lower(): value for name, value in request.headers.items()}
    if len(headers) < len(request.headers):
        # A name came twice. The envelope check reads one value of each: two of `Mcp-Method`
        # or `Mcp-Name` are refused as `admission.admit` refuses two session ids (only here,
        # where they are read, whichever way the request was known as 2026-07-28).
        admission.refuse_repeated(request, _ROUTING)
    if isinstance(message, jsonrpc.Notification):
        return web.Response(status=202)  # nothing to relay: no upstream call is the client's
    if not isinstance(message, jsonrpc.Request):
        raise InvalidRequest("a 2026-07-28 client sends requests only: this server asks it nothing")
    checked = modern.classify(message, headers)
    if isinstance(checked, Reject):
        return refuse(message.id, checked)
    mismatch = route.tool_headers.check(message, request.headers.items())
    if mismatch is not None:
        return refuse(message.id, Reject(HEADER_MISMATCH, mismatch))
    upstream_name: str | None = None
    if message.method == "tools/call":
        curated = route.upstream_call(message, caller.principal, MODERN_PROTOCOL_VERSION)
        if isinstance(curated, Reject):
            return refuse(message.id, curated)
        if curated is not message:  # renamed (most routes rename nothing: no copy then)
            upstream_name = str(jsonrpc.param(curated, "name"))
    decision = modern.decide(checked, route.policy)
    if isinstance(decision, modern.Call):
        # Decided under the client's name (policies name tools as clients see them), sent
        # under the upstream's.
        decision = replace(decision, request=curation.named(decision.request, upstream_name))
    native_wire = await route.upstream.wire.native()
    if isinstance(decision, Reject):
        if (
            native_wire
            and decision.code == METHOD_NOT_FOUND
            and not message.method.startswith("tasks/")
        ):
            # The upstream's own methods (subscriptions/listen above all): relayed as they are.
            return await _relay(request, route, caller, message)
        return refuse(message.id, decision)
    if isinstance(decision, Local):
        owner = modern_owner(route, caller)
        answer = await request.app[MODERN_TASK_API].answer(message, owner, caller.principal)
        return reply(answer)
    if isinstance(decision, modern.Call):
        answered = await modern_tools.call(request, route, caller, checked, decision, native_wire)
        return answered if isinstance(answered, web.StreamResponse) else reply(answered)
    if native_wire:
        return await _native(request, route, caller, message, decision)
    return await _bridged(request, route, caller, message, decision)


async def _bridged(
    request: web.Request,
    route: Route,
    caller: admission.Caller,
    message: jsonrpc.Request,
    decision: modern.Discover | Forward,
) -> web.StreamResponse:
    """A request answered over a 2025-11-25 session the gateway holds for the caller."""
    lease = await request.app[HELD_SESSIONS].lease(
        route,
        caller.principal,
        {},
        forwarded_headers(request, route),
        holder=holder_of(route, caller),  # an anonymous caller's calls take a child each
    )
    try:
        if isinstance(decision, modern.Discover):
            initialized = await lease.held.open()
            return _json(
                modern_results.discover_result(message.id, initialized, route.policy.enabled)
            )
        answer = await lease.held.call(decision.request)
    except UpstreamError as exc:
        return reply(upstream_failed(message.id, exc))
    finally:
        await lease.release()
    if isinstance(answer, jsonrpc.Response) and message.method == "tools/list":
        answer = route.listed(answer)
    return reply(answer, message.method)


async def _native(
    request: web.Request,
    route: Route,
    caller: admission.Caller,
    message: jsonrpc.Request,
    decision: modern.Discover | Forward,
) -> web.StreamResponse:
    """A request relayed on the 2026-07-28 wire, as it came (less the tasks extension)."""
    upstream = route.upstream.single()  # (a route of members is bridged)
    url = upstream.config.url
    assert url is not None
    headers = await native_headers(request, route, caller)
    try:
        answer = await native.exchange(
            upstream.http(),
            url,
            modern.native_request(message),
            headers,
            lambda _: None,
            upstream.spans,
        )
    except UpstreamNotModern:
        # Refused unrun, as a 2025-11-25 server refuses it: that is what the upstream is now.
        route.upstream.wire.refused()
        return await _bridged(request, route, caller, message, decision)
    except UpstreamError as exc:
        return reply(upstream_failed(message.id, exc))
    if isinstance(answer, jsonrpc.Response):
        if isinstance(decision, modern.Discover):
            answer = modern_results.native_discover(answer, route.policy.enabled)
        elif message.method == "tools/list":
            answer = route.listed(answer)
    return reply(answer, message.method)


async def _relay(
    request: web.Request, route: Route, caller: admission.Caller, message: jsonrpc.Request
) -> web.StreamResponse:
    """A request the gateway has nothing to add to, on the 2026-07-28 wire: the upstream's
    response streamed back as it comes (a `subscriptions/listen` stream stays open until
    either side closes it; closing it here closes it upstream)."""
    url = route.upstream.single().config.url
    assert url is not None
    headers = await native_headers(request, route, caller)
    outgoing = modern.native_request(message)
    response: web.StreamResponse | None = None
    try:
        async with native.relayed(
            route.upstream.single().http(), url, outgoing, headers
        ) as upstream:
            response = web.StreamResponse(
                status=upstream.status,
                headers={**SSE_HEADERS, "Content-Type": upstream.content_type},
            )
            await response.prepare(request)
            request[STARTED] = True
            with contextlib.suppress(ConnectionError):
                async for chunk in upstream.chunks:
                    await response.write(chunk)
                await response.write_eof()
    except UpstreamUnavailable as exc:
        if response is None:
            return reply(upstream_failed(message.id, exc))
        # The answer had begun: ending the stream is the only way left to tell the client.
    assert response is not None
    return response


def reply(answer: Answer, method: str | None = None) -> web.Response:
    """An answer as JSON: an error with the status its code has on this path, a relayed
    upstream result made a 2026-07-28 result (`method` given)."""
    if isinstance(answer, jsonrpc.ErrorResponse):
        answer = modern_results.renumbered(answer)
        return _json(jsonrpc.dump(answer), modern.http_status(answer))
    if method is not None:
        answer = modern_results.complete(answer, method)
    return _json(jsonrpc.dump(answer))


def refuse(request_id: jsonrpc.RequestId, reject: Reject) -> web.Response:
    error = jsonrpc.error_response(request_id, reject.code, reject.message, reject.data)
    return _json(jsonrpc.dump(error), modern.http_status(error))


def _json(body: str, status: int = 200) -> web.Response:
    return web.Response(text=body, status=status, content_type="application/json")
