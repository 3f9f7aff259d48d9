"""Server-sent events out: one session's `EventStream` written to one HTTP connection.

The priming event gives the client an id to resume from before any message came; idle
streams get keep-alive comments so intermediaries keep them open; a client that leaves
detaches at once and the stream stays resumable with `Last-Event-ID`.
"""

from __future__ import annotations

import contextlib
import logging

from aiohttp import web

from gateway.config import HttpConfig
from gateway.session.streams import EventStream

log = logging.getLogger(__name__)

SSE_HEADERS = {
    "Content-Type": "text/event-stream",
    "Cache-Control": "no-cache, no-transform",
    # Tells nginx and similar buffering proxies to pass events through at once.
    "X-Accel-Buffering": "no",
}


def encode(event_id: str | None, data: str, retry_ms: int | None = None) -> bytes:
    lines = []
    if event_id is not None:
        lines.append(f"id: {event_id}")
    if retry_ms is not None:
        lines.append(f"retry: {retry_ms}")
    lines.append("event: message" if data else "data: ")
    if data:
        lines.extend(f"data: {line}" for line in data.split("\n"))
    return ("\n".join(lines) + "\n\n").encode()


KEEPALIVE = b": keep-alive\n\n"

#: Set once a request's SSE answer has begun: after that no error response can replace it.
STARTED = web.RequestKey("sse_started", bool)


async def serve(
    request: web.Request,
    stream: EventStream,
    *,
    after: int,
    prime: bool,
    config: HttpConfig,
) -> web.StreamResponse:
    """Write `stream` to the client from event `after` on, with keep-alive comments."""
    rest = stream.take_rest(after)
    if rest is not None:
        # All of it is here (an upstream's SSE answer, come within the JSON window): one
        # response with a length, written at once, where a stream is a write per event.
        first = [encode(stream.event_id(after), "", config.sse_retry_ms)] if prime else []
        body = b"".join(first + [encode(stream.event_id(seq), data) for seq, data in rest])
        return web.Response(status=200, headers=SSE_HEADERS, body=body)
    response = web.StreamResponse(status=200, headers=SSE_HEADERS)
    await response.prepare(request)
    request[STARTED] = True
    try:
        if prime:
            # The priming event: an id the client can resume from before any message came.
            await response.write(encode(stream.event_id(after), "", config.sse_retry_ms))
        # aclosing: the reader is detached the moment the connection goes, not at some
        # later garbage collection, so `attached` is true only while someone reads.
        async with contextlib.aclosing(stream.follow(after, config.keepalive_seconds)) as events:
            async for item in events:
                if item is None:
                    await response.write(KEEPALIVE)
                else:
                    seq, data = item
                    await response.write(encode(stream.event_id(seq), data))
    except ConnectionResetError:
        # The client went away; the stream stays resumable with Last-Event-ID.
        log.debug("client left SSE stream %s", stream.key)
    return response
