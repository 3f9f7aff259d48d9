"""OAuth 2.0 Protected Resource Metadata (RFC 9728): the document a client reads after a 401
to learn which authorization server issues tokens for a route. Public and the same for
everyone, so it needs no credentials and may be cached."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from aiohttp import web


def metadata_handler(document: bytes) -> Callable[[web.Request], Awaitable[web.Response]]:
    async def metadata(request: web.Request) -> web.Response:
        return web.Response(
            body=document,
            content_type="application/json",
            headers={"Cache-Control": "public, max-age=300"},
        )

    return metadata
