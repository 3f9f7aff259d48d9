"""Streamable HTTP upstream (2025-03-26 and later): POST per message, optional GET stream.

The upstream's `Mcp-Session-Id` is kept per downstream session. A POST may be answered with
JSON or an SSE stream; everything on that stream is related to the request that opened it.
A stream that ends before the answer is resumed with `Last-Event-ID`, as the spec allows.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

import aiohttp

from gateway.aio import TaskSet
from gateway.config import UpstreamConfig
from gateway.protocol import jsonrpc
from gateway.protocol.errors import (
    InvalidRequest,
    ParseError,
    ResultTooLarge,
    UpstreamProtocolError,
    UpstreamRefused,
    UpstreamTimeout,
    UpstreamUnavailable,
)
from gateway.upstream import sse_reader, unreadable
from gateway.upstream.base import Headers, Sink, Transport, trace_context
from gateway.upstream.http1_pool import Http1Pool
from gateway.upstream.http1_response import Http1Error
from gateway.upstream.http_answer import HttpAnswer

log = logging.getLogger(__name__)

_RESUME_ATTEMPTS = 3
_LARGER = "the upstream's answer is larger"


class UpstreamSessionExpired(UpstreamUnavailable):
    """The upstream answered 404 for our session id: it no longer knows the session."""


class StreamableHttpTransport(Transport):
    answers_inline = True

    def __init__(
        self,
        sink: Sink,
        config: UpstreamConfig,
        http: aiohttp.ClientSession,
        headers: Headers,
        pool: Http1Pool | None = None,
    ) -> None:
        super().__init__(sink)
        assert config.url is not None
        self._url = config.url
        self._base_headers = headers
        self._http = http
        #: The POSTs' own client (`http1`); aiohttp's sends everything else.
        self._pool = pool
        self._session_id: str | None = None
        self._version: str | None = None
        self._tasks = TaskSet("streamable_http")
        self._listener: asyncio.Task[None] | None = None
        #: Set once the GET stream answered (open, or refused: then there is none to wait for).
        self._listening = asyncio.Event()
        #: Closing sends no DELETE: the upstream session is not this process's to end.
        self._keep_session = False

    async def _headers(self, accept: str) -> dict[str, str]:
        headers = {**await self._base_headers(), "Accept": accept}
        if self._session_id is not None:
            headers["Mcp-Session-Id"] = self._session_id
        if self._version is not None:
            headers["Mcp-Protocol-Version"] = self._version
        return headers

    async def start(self) -> None:
        self._session_id = None
        self._version = None
        self._listening.clear()

    def initialized(self, protocol_version: str) -> None:
        self._version = protocol_version
        # A client that repeats notifications/initialized must not open a second GET stream.
        if self.listens and (self._listener is None or self._listener.done()):
            self._listener = self._tasks.spawn(self._listen(), name="upstream-get-stream")

    @property
    def session_id(self) -> str | None:
        return self._session_id

    def adopt(self, session_id: str, protocol_version: str) -> bool:
        self._session_id = session_id
        self._version = protocol_version
        return True

    def keep_session(self) -> None:
        self._keep_session = True

    async def stream_open(self) -> None:
        await self._listening.wait()

    async def send(self, message: jsonrpc.Message) -> None:
        headers = await self._headers("application/json, text/event-stream")
        headers["Content-Type"] = "application/json"
        if self.trace_headers:
            headers.update(trace_context(message))
        body = jsonrpc.dump(message).encode()
        try:
            if self._pool is not None:
                resp = await self._pool.post(headers, body)
                try:
                    if not 300 <= resp.status < 400:
                        await self._consume(HttpAnswer.of_http1(resp), message)
                        return
                finally:
                    resp.close()
            # A redirect (or no pool of our own): aiohttp's client follows it.
            async with self._http.post(self._url, data=body, headers=headers) as redirected:
                await self._consume(HttpAnswer.of_aiohttp(redirected), message)
        except TimeoutError as exc:
            raise UpstreamTimeout("the upstream did not accept the connection in time") from exc
        except (aiohttp.ClientError, Http1Error) as exc:
            raise UpstreamUnavailable(f"cannot reach the upstream: {exc}") from exc

    async def _consume(self, resp: HttpAnswer, sent: jsonrpc.Message) -> None:
        related = sent.id if isinstance(sent, jsonrpc.Request) else None
        if isinstance(sent, jsonrpc.Request) and sent.method == "initialize":
            self._session_id = resp.headers.get("Mcp-Session-Id", self._session_id)
        if resp.status == 404 and self._session_id is not None:
            raise UpstreamSessionExpired("the upstream no longer knows this session (HTTP 404)")
        if related is None:
            # A notification or our answer to a server request: nothing comes back but a status.
            if resp.status >= 400 and isinstance(sent, jsonrpc.Response | jsonrpc.ErrorResponse):
                # The client's answer to the upstream's question did not land: say so, so the
                # client hears it (502) and the question stays open, rather than a lost answer.
                raise UpstreamUnavailable(f"the upstream refused the answer: HTTP {resp.status}")
            if resp.status >= 400:
                log.warning("the upstream refused a message: HTTP %d", resp.status)
            return
        if resp.status == 202:
            return
        ctype = resp.headers.get("Content-Type", "").split(";")[0].strip().lower()
        if ctype == "text/event-stream":
            if related is not None:
                self.sink.on_stream(related, interrupted=False)
            await self._read_stream(resp, related)
            return
        body = await self._read_body(resp)
        if ctype == "application/json" or resp.status >= 400:
            try:
                message = jsonrpc.parse(body)
            except (ParseError, InvalidRequest) as exc:
                if resp.status >= 400:
                    raise UpstreamRefused(f"the upstream answered HTTP {resp.status}") from exc
                raise UpstreamProtocolError(
                    f"the upstream sent an invalid answer: {exc.message}"
                ) from exc
            if (
                resp.status >= 400
                and isinstance(message, jsonrpc.ErrorResponse)
                and message.id is None
            ):
                # An HTTP-level rejection with a JSON-RPC body but no id still answers our request.
                message = jsonrpc.with_id(message, related) if related is not None else message
            self.sink.on_message(message, related)
            return
        raise UpstreamProtocolError(f"the upstream answered with unexpected content type {ctype!r}")

    async def _read_body(self, resp: HttpAnswer) -> bytes:
        """The answer's body, refused past the route's max_result_bytes before it is all read."""
        limit = self.max_message_bytes
        if (size := resp.content_length) is not None and size > limit:
            raise ResultTooLarge.past(f"the upstream's answer of {size} bytes is larger", limit)
        whole = resp.whole() if resp.whole is not None else None
        if whole is not None:
            if len(whole) > limit:
                raise ResultTooLarge.past(_LARGER, limit)
            return whole
        body = bytearray()
        async for chunk in resp.chunks:
            body += chunk
            if len(body) > limit:
                raise ResultTooLarge.past(_LARGER, limit)
        return bytes(body)

    async def _read_stream(self, resp: HttpAnswer, related: jsonrpc.RequestId | None) -> None:
        last_id, retry_ms, answered = await self._relay_events(resp, related)
        attempts = 0
        while not answered and last_id is not None and attempts < _RESUME_ATTEMPTS:
            if related is not None and attempts == 0:
                self.sink.on_stream(related, interrupted=True)
            attempts += 1
            await asyncio.sleep((retry_ms or 1000) / 1000)
            headers = await self._headers("text/event-stream")
            headers["Last-Event-ID"] = last_id
            async with self._http.get(self._url, headers=headers) as again:
                if again.status != 200:
                    break
                new_last, new_retry, answered = await self._relay_events(
                    HttpAnswer.of_aiohttp(again), related
                )
                if new_last is not None and new_last != last_id:
                    attempts = 0
                last_id = new_last or last_id
                retry_ms = new_retry or retry_ms

    async def _relay_events(
        self, resp: HttpAnswer, related: jsonrpc.RequestId | None
    ) -> tuple[str | None, int | None, bool]:
        last_id: str | None = None
        retry_ms: int | None = None
        reading = sse_reader.events(resp.chunks, self.max_message_bytes)
        async with contextlib.aclosing(reading) as events:
            async for event in events:
                last_id = event.id or last_id
                retry_ms = event.retry or retry_ms
                if event.event != "message" or not event.data:
                    continue
                message = unreadable.read(event.data, event.broken)
                if isinstance(message, unreadable.Unreadable):
                    # Everything on this stream belongs to `related`, so that call fails now.
                    invalid = f"the upstream sent an invalid event: {message.reason}"
                    raise UpstreamProtocolError(invalid)
                self.sink.on_message(message, related)
                if (
                    related is not None
                    and isinstance(message, jsonrpc.Response | jsonrpc.ErrorResponse)
                    and message.id == related
                ):
                    resp.answered()
                    return last_id, retry_ms, True
        return last_id, retry_ms, False

    async def _listen(self) -> None:
        """The upstream's GET stream: messages not tied to any request."""
        delay = 1.0
        last_id: str | None = None
        while True:
            try:
                headers = await self._headers("text/event-stream")
                if last_id is not None:
                    headers["Last-Event-ID"] = last_id
                async with self._http.get(self._url, headers=headers) as resp:
                    self._listening.set()
                    if resp.status == 405:
                        return  # the upstream offers no GET stream; that is allowed
                    if resp.status == 200:
                        delay = 1.0
                        async for event in sse_reader.events(
                            resp.content.iter_any(), self.max_message_bytes
                        ):
                            last_id = event.id or last_id
                            if event.retry:
                                delay = event.retry / 1000
                            if event.event == "message" and event.data:
                                self._deliver(event.data, "the upstream's GET stream", event.broken)
                    elif resp.status in (400, 404):
                        return
            except (aiohttp.ClientError, TimeoutError) as exc:
                log.debug("upstream GET stream interrupted: %s", exc)
            except (UpstreamProtocolError, UpstreamUnavailable) as exc:
                # Unavailable: no identity for the upstream now (its token endpoint is down).
                log.warning("upstream GET stream dropped, to be opened again: %s", exc.message)
            await asyncio.sleep(delay)
            delay = min(delay * 2, 30.0)

    async def close(self) -> None:
        await self._tasks.close()
        self._listener = None
        if self._session_id is None or self._keep_session:
            return
        try:
            async with asyncio.timeout(2):
                headers = await self._headers("application/json")
                if self._pool is None:
                    async with self._http.delete(self._url, headers=headers):
                        pass
                else:  # (its connection kept if the answer ends at once)
                    (await self._pool.post(headers, b"", "DELETE")).finish_soon()
        except (aiohttp.ClientError, Http1Error, TimeoutError, UpstreamUnavailable) as exc:
            log.debug("upstream DELETE failed: %s", exc)
        self._session_id = None
