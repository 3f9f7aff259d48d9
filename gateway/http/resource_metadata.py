"""OAuth 2.0 Protected Resource Metadata (RFC 9728): the document a client reads after a 401
to learn which authorization server issues tokens for a route. Public and the same for
everyone, so it needs no credentials and may be cached."""

from __future__ import annotations

from aiohttp import web


def metadata_response(document: bytes) -> web.Response:
    """The answer to GET (or HEAD) at a route's metadata path."""
    return web.Response(
        body=document,
        content_type="application/json",
        headers={"Cache-Control": "public, max-age=300"},
    )
