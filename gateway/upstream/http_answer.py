"""An HTTP answer as the Streamable HTTP transport reads it, whichever client brought it:
`http1`'s (the POSTs) or aiohttp's (a redirected POST, a resumed SSE stream).

`HttpAnswer` gives both the same face, so that the transport reads a JSON body or an SSE
stream, and lets go of a stream once it has the answer, in one way for either.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass

import aiohttp

from gateway.upstream.http1_response import Http1Response


@dataclass(slots=True)
class HttpAnswer:
    """An HTTP answer as `StreamableHttpTransport._consume` reads it, from either client."""

    status: int
    #: Case-insensitive, as both clients give them.
    headers: Mapping[str, str]
    content_length: int | None
    chunks: AsyncIterator[bytes]
    #: Once the answer was read from a stream that has not ended: what lets go of the rest.
    answered: Callable[[], None]
    #: The whole body if it has all arrived (most JSON answers come with their head), read
    #: without running the chunk iterator; None if it has not.
    whole: Callable[[], bytes | None] | None = None

    @classmethod
    def of_aiohttp(cls, resp: aiohttp.ClientResponse) -> HttpAnswer:
        # Closing the connection is the only way out: aiohttp would wait for the body's end,
        # and a resumed stream may stay open after the answer.
        chunks = resp.content.iter_any()
        return cls(resp.status, resp.headers, resp.content_length, chunks, resp.close)

    @classmethod
    def of_http1(cls, resp: Http1Response) -> HttpAnswer:
        chunks = resp.iter_chunks()
        answered = resp.finish_soon
        return cls(resp.status, resp.headers, resp.content_length, chunks, answered, resp.whole)
