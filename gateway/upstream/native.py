"""The 2026-07-28 wire to an upstream that speaks it (`upstream.modern: native`).

No session and no handshake: each request is its own POST, carrying its envelope in `_meta`
and the headers the spec requires, answered with JSON or with an SSE stream of that
request's notifications ending in its answer. Closing the stream cancels the request, so
stopping a call is closing its connection.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator, Callable, Coroutine, Mapping
from functools import partial
from typing import TYPE_CHECKING, Any, NamedTuple

import aiohttp

from gateway.protocol import jsonrpc
from gateway.protocol.errors import (
    UNSUPPORTED_PROTOCOL_VERSION,
    InvalidRequest,
    ParseError,
    UpstreamNotModern,
    UpstreamProtocolError,
    UpstreamUnavailable,
)
from gateway.protocol.jsonrpc import Answer
from gateway.upstream import sse_reader, unreadable
from gateway.upstream.base import trace_context

if TYPE_CHECKING:
    from gateway.observability.traces import UpstreamSpans

log = logging.getLogger(__name__)

#: Client headers that describe the request on this wire, relayed as they came.
_REQUEST_HEADERS = ("mcp-protocol-version", "mcp-method", "mcp-name")
_PARAM_PREFIX = "mcp-param-"
#: What every Streamable HTTP POST (either generation) says of its body and the answers it takes.
POST_HEADERS = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}


def request_headers(client: Mapping[str, str]) -> dict[str, str]:
    """The 2026-07-28 request headers of a client's request (`client`: lower-case names)."""
    return {
        name: value
        for name, value in client.items()
        if name in _REQUEST_HEADERS or name.startswith(_PARAM_PREFIX)
    }


class Relayed(NamedTuple):
    """The upstream's response to a relayed request, as it streams."""

    status: int
    content_type: str
    chunks: AsyncIterator[bytes]


@contextlib.asynccontextmanager
async def relayed(
    http: aiohttp.ClientSession, url: str, request: jsonrpc.Request, headers: Mapping[str, str]
) -> AsyncIterator[Relayed]:
    """POST `request` as it is and hand back the upstream's response while it streams (a
    `subscriptions/listen` stream stays open until either side closes it; leaving the block
    closes it upstream).

    Raises:
        UpstreamUnavailable: the connection failed, before the answer or while it streamed.
    """
    body = jsonrpc.dump(request).encode()
    try:
        async with http.post(url, data=body, headers={**headers, **POST_HEADERS}) as upstream:
            content_type = upstream.headers.get("Content-Type", "application/json")
            yield Relayed(upstream.status, content_type, upstream.content.iter_any())
    except aiohttp.ClientError as exc:
        raise UpstreamUnavailable(f"cannot reach the upstream: {exc}") from exc


def exchange(
    http: aiohttp.ClientSession,
    url: str,
    request: jsonrpc.Request,
    headers: Mapping[str, str],
    on_note: Callable[[jsonrpc.Notification], None],
    spans: UpstreamSpans | None = None,
) -> Coroutine[Any, Any, Answer]:
    """POST `request`; its notifications go to `on_note`, its answer is returned. With
    `spans` (tracing on), under a span whose context goes in `_meta` and the headers.

    Raises:
        UpstreamNotModern: it refused the request as a 2025-11-25 server does.
        UpstreamUnavailable: the upstream could not be reached, or refused without an answer.
        UpstreamProtocolError: it answered with something that is not MCP.
    """
    if spans is not None:
        return spans.call(partial(_traced, http, url, headers=headers, on_note=on_note), request)
    return _exchange(http, url, request, headers, on_note)


def _traced(
    http: aiohttp.ClientSession,
    url: str,
    request: jsonrpc.Request,
    headers: Mapping[str, str],
    on_note: Callable[[jsonrpc.Notification], None],
) -> Coroutine[Any, Any, Answer]:
    return _exchange(http, url, request, {**headers, **trace_context(request)}, on_note)


async def _exchange(
    http: aiohttp.ClientSession,
    url: str,
    request: jsonrpc.Request,
    headers: Mapping[str, str],
    on_note: Callable[[jsonrpc.Notification], None],
) -> Answer:
    sent = {**headers, **POST_HEADERS}
    try:
        async with http.post(url, data=jsonrpc.dump(request).encode(), headers=sent) as resp:
            ctype = resp.headers.get("Content-Type", "").split(";")[0].strip().lower()
            if ctype == "text/event-stream" and resp.status == 200:
                return await _read_stream(resp, request.id, on_note)
            return _read_json(await resp.read(), resp.status, request.id)
    except aiohttp.ClientError as exc:
        raise UpstreamUnavailable(f"cannot reach the upstream: {exc}") from exc


def _read_json(body: bytes, status: int, request_id: jsonrpc.RequestId) -> Answer:
    try:
        message = jsonrpc.parse(body)
    except (ParseError, InvalidRequest) as exc:
        if status >= 400:
            raise UpstreamUnavailable(f"the upstream answered HTTP {status}") from exc
        raise UpstreamProtocolError(f"the upstream sent an invalid answer: {exc.message}") from exc
    if isinstance(message, jsonrpc.ErrorResponse) and status >= 400 and _older(message.error):
        raise UpstreamNotModern(f"the upstream refused the request: {message.error.message}")
    if isinstance(message, jsonrpc.ErrorResponse) and message.id is None:
        # An HTTP-level refusal with a JSON-RPC body but no id still answers this request.
        return jsonrpc.with_id(message, request_id)
    if isinstance(message, jsonrpc.Response | jsonrpc.ErrorResponse):
        return message
    raise UpstreamProtocolError("the upstream answered a request with something else")


def _older(error: jsonrpc.ErrorObject) -> bool:
    """An HTTP refusal as a 2025-11-25 server gives a session-less request: it wants a
    session (no 2026-07-28 server does), or names the version unsupported."""
    return error.code == UNSUPPORTED_PROTOCOL_VERSION or "session" in error.message.lower()


async def _read_stream(
    resp: aiohttp.ClientResponse,
    request_id: jsonrpc.RequestId,
    on_note: Callable[[jsonrpc.Notification], None],
) -> Answer:
    async with contextlib.aclosing(sse_reader.events(resp.content.iter_any())) as events:
        async for event in events:
            if event.event != "message" or not event.data:
                continue
            message = unreadable.read(event.data, event.broken)
            if isinstance(message, unreadable.Unreadable):
                raise UpstreamProtocolError(f"the upstream sent an invalid event: {message.reason}")
            if isinstance(message, jsonrpc.Notification):
                on_note(message)
            elif isinstance(message, jsonrpc.Response | jsonrpc.ErrorResponse):
                if message.id == request_id:
                    return message
            else:
                # 2026-07-28 has no server-to-client requests: MRTR carries those.
                log.warning("the upstream sent a request on a 2026-07-28 stream; ignored")
    raise UpstreamUnavailable("the upstream closed the response stream before answering")
