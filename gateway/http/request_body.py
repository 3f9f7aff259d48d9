"""A request's body, read whole however it is chunked, within the route's size limit (413
beyond it, announced or sent) and `http.body_timeout_seconds` (408 for a sender that slow).
The endpoint reads it once the request's credentials and headers pass, and parses it only
whole.

A client that sends `Expect: 100-continue` waits for a `100 Continue` before its body. aiohttp
sends it from the route's expect handler, before the guard and the endpoint have checked
anything: a foreign Origin or missing credentials were refused only once the body had been
sent. `expect_continue`, every route's expect handler, leaves the go-ahead to `read_body`
instead (to `go_ahead` for a reader of its own, the admin console's forms), so a request
refused before its body is read gets the refusal and no `100 Continue` (RFC 9110 section
10.1.1 lets a server answer without one). aiohttp's router answers a path or method it has no
route for itself, with a `100 Continue` first: `add_fallback` gives an application's table a
last route that answers as the router would, behind the application's middleware.
"""

from __future__ import annotations

import asyncio

from aiohttp import hdrs, web
from aiohttp.http import HttpVersion11

from gateway.protocol.errors import PayloadTooLarge, RequestTimeout

#: The request waits for a `100 Continue` (its `Expect` asked for one).
_CONTINUE = web.RequestKey("continue", bool)


async def expect_continue(request: web.Request) -> None:
    """aiohttp's expect handler, but the `100 Continue` is `read_body`'s to send.

    Raises:
        web.HTTPExpectationFailed: an expectation other than 100-continue (417, as aiohttp's).
    """
    if request.version != HttpVersion11:
        return  # an HTTP/1.0 client is never sent a 100 Continue
    if request.headers.get(hdrs.EXPECT, "").lower() != "100-continue":
        raise web.HTTPExpectationFailed(text="Unknown Expect: only 100-continue is understood")
    request[_CONTINUE] = True


def close_unread(request: web.Request, response: web.StreamResponse) -> None:
    """An answer to a request still waiting for its `100 Continue` closes the connection
    (`Connection: close`): its client may never send the body, which the connection would
    otherwise wait for before the next request (RFC 9110 section 10.1.1: such an answer
    SHOULD say whether the server will go on reading). A body that came anyway, unasked,
    leaves the connection open. `GuardedHandler` closes it once the answer is written."""
    if request.get(_CONTINUE) and not request.content.is_eof():
        response.force_close()
        # (For a response being prepared too, whose headers aiohttp has filled in by then.)
        response.headers[hdrs.CONNECTION] = "close"


def asks_no_body_first(app: web.Application) -> None:
    """What a side listener's application (the admin API's, `/metrics` on its own address),
    whose routes all take `expect_continue`, needs besides: the router's own 404 and 405 that
    ask for no body either (`add_fallback`: call this once the routes are in), and
    `close_unread` for every answer, as a response hook (a coroutine per answer is nothing off
    the gateway's port, and the console answers in several places)."""
    app.on_response_prepare.append(_close_unread_hook)
    add_fallback(app.router)


async def _close_unread_hook(request: web.Request, response: web.StreamResponse) -> None:
    close_unread(request, response)


async def go_ahead(request: web.Request) -> None:
    """The `100 Continue` the request waits for, if it asked for one and has not had it: for
    whoever reads the body, once the request has passed its checks."""
    if request.pop(_CONTINUE, False):
        await request.writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
        request.writer.output_size = 0  # what aiohttp counts as the response's size starts after


def add_fallback(router: web.UrlDispatcher) -> None:
    """Last routes, for any method and path, that answer what the router would (404, or 405
    for a method the path has no route for), with `expect_continue`: the router's own answer
    comes after aiohttp's `100 Continue`, sent before any middleware has refused the request.
    The empty path is a mounted application's prefix itself (the console's `/admin/console`)."""
    routed = [resource for resource in router.resources() if isinstance(resource, web.Resource)]

    async def unrouted(request: web.Request) -> web.StreamResponse:
        allowed: set[str] = set()
        for resource in routed:
            allowed |= (await resource.resolve(request))[1]
        if allowed:
            raise web.HTTPMethodNotAllowed(request.method, allowed)
        raise web.HTTPNotFound()

    for path in ("", "/{path:.*}"):
        router.add_route("*", path, unrouted, expect_handler=expect_continue)


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
    await go_ahead(request)
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
