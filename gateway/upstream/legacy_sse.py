"""HTTP+SSE upstream (the 2024-11-05 transport many legacy servers still speak).

A GET opens an event stream whose first `endpoint` event names the URL to POST messages to;
every answer, notification and server request then arrives on that one stream.
"""

from __future__ import annotations

import asyncio
import logging
from urllib.parse import urljoin, urlsplit

import aiohttp

from gateway.aio import TaskSet
from gateway.config import UpstreamConfig
from gateway.protocol import jsonrpc
from gateway.protocol.errors import (
    UpstreamError,
    UpstreamRefused,
    UpstreamTimeout,
    UpstreamUnavailable,
)
from gateway.upstream import sse_reader
from gateway.upstream.base import Headers, Sink, Transport, trace_context

log = logging.getLogger(__name__)


class SseTransport(Transport):
    def __init__(
        self,
        sink: Sink,
        config: UpstreamConfig,
        http: aiohttp.ClientSession,
        headers: Headers,
    ) -> None:
        super().__init__(sink)
        assert config.url is not None
        self._url = config.url
        self._headers = headers
        self._connect_timeout = config.connect_timeout_seconds
        self._http = http
        self._endpoint: str | None = None
        self._tasks = TaskSet("sse")
        self._closing = False

    async def start(self) -> None:
        self._closing = False
        endpoint_known: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        self._tasks.spawn(self._run(endpoint_known), name="upstream-sse-stream")
        try:
            async with asyncio.timeout(self._connect_timeout):
                self._endpoint = await asyncio.shield(endpoint_known)
        except TimeoutError as exc:
            await self._tasks.close()
            raise UpstreamTimeout("the SSE upstream sent no endpoint event in time") from exc

    async def _run(self, endpoint_known: asyncio.Future[str]) -> None:
        reason = "the upstream closed its SSE stream"
        refused = False
        try:
            async with self._http.get(
                self._url, headers={**await self._headers(), "Accept": "text/event-stream"}
            ) as resp:
                if resp.status >= 400:
                    raise UpstreamRefused(f"the SSE upstream answered HTTP {resp.status}")
                if resp.status != 200:
                    raise UpstreamUnavailable(f"the SSE upstream answered HTTP {resp.status}")
                async for event in sse_reader.events(
                    resp.content.iter_any(), self.max_message_bytes
                ):
                    if event.event == "endpoint" and not endpoint_known.done():
                        if event.broken is not None:
                            raise UpstreamUnavailable(f"the SSE endpoint event: {event.broken}")
                        endpoint_known.set_result(self._resolve(event.data))
                    elif event.event == "message" and event.data:
                        self._deliver(event.data, "the SSE upstream", event.broken)
        except UpstreamError as exc:
            # Unavailable, or a line beyond the cap: the stream cannot go on past either.
            reason = exc.message
            refused = isinstance(exc, UpstreamRefused)
        except (aiohttp.ClientError, TimeoutError) as exc:
            reason = f"cannot reach the SSE upstream: {exc}"
        if not endpoint_known.done():
            failure = UpstreamRefused if refused else UpstreamUnavailable
            endpoint_known.set_exception(failure(reason))
        elif not self._closing:
            self.sink.on_lost(reason)

    def _resolve(self, endpoint: str) -> str:
        url = urljoin(self._url, endpoint.strip())
        # Posting our messages anywhere else would leak them to a host the operator never named.
        if urlsplit(url)[:2] != urlsplit(self._url)[:2]:
            raise UpstreamUnavailable(f"the SSE upstream named a foreign endpoint {url!r}")
        return url

    async def send(self, message: jsonrpc.Message) -> None:
        if self._endpoint is None:
            raise UpstreamUnavailable("the SSE upstream is not connected")
        headers = {**await self._headers(), "Content-Type": "application/json"}
        if self.trace_headers:
            headers.update(trace_context(message))
        try:
            async with self._http.post(
                self._endpoint, data=jsonrpc.dump(message), headers=headers
            ) as resp:
                if resp.status >= 300:
                    failure = UpstreamRefused if resp.status >= 400 else UpstreamUnavailable
                    raise failure(f"the SSE upstream refused a message: HTTP {resp.status}")
        except aiohttp.ClientError as exc:
            raise UpstreamUnavailable(f"cannot reach the SSE upstream: {exc}") from exc

    async def close(self) -> None:
        self._closing = True
        await self._tasks.close()
        self._endpoint = None
