"""A request's body, read whole however it is chunked, within the route's size limit (413
beyond it, announced or sent) and `http.body_timeout_seconds` (408 for a sender that slow).
The endpoint reads it once the request's credentials and headers pass, and parses it only
whole.
"""

from __future__ import annotations

import asyncio

from aiohttp import web

from gateway.protocol.errors import PayloadTooLarge, RequestTimeout


async def read_body(request: web.Request, limit: int, seconds: float) -> bytes:
    """The whole body, however it is chunked, within `seconds` and `limit` bytes.

    Raises:
        PayloadTooLarge: the body is (or announces itself as) longer than `limit`.
        RequestTimeout: it did not arrive in time (a slow sender holds no connection long).
    """
    if request.content_length is not None and request.content_length > limit:
        raise PayloadTooLarge(
            f"request body of {request.content_length} bytes exceeds the "
            f"limit of {limit} bytes (limits.max_body_bytes)"
        )
    content = request.content
    if content.is_eof():
        # All of it came with the head (most bodies do): nothing to wait for, no timer.
        whole = content.read_nowait()
        if len(whole) > limit:
            raise PayloadTooLarge(
                f"request body exceeds the limit of {limit} bytes (limits.max_body_bytes)"
            )
        return whole
    body = bytearray()
    try:
        async with asyncio.timeout(seconds):
            async for chunk in request.content.iter_any():
                body += chunk
                if len(body) > limit:
                    raise PayloadTooLarge(
                        f"request body exceeds the limit of {limit} bytes (limits.max_body_bytes)"
                    )
    except TimeoutError:
        raise RequestTimeout(
            f"the request body did not arrive within {seconds:g} s (http.body_timeout_seconds)"
        ) from None
    return bytes(body)
