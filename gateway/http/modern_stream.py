"""What a 2026-07-28 request hears while it waits: its own progress and log notifications.

2026-07-28 has no back-channel: a response's SSE stream carries only that request's
notifications. Progress goes out under the request's own `progressToken`, log messages at or
above the `_meta` `logLevel` the request set (none without one). The response becomes an SSE
stream at the first notification and the answer ends it; with none it is plain JSON.
"""

from __future__ import annotations

import asyncio

from aiohttp import web

from gateway.http.sse import SSE_HEADERS, STARTED, encode
from gateway.protocol import jsonrpc
from gateway.protocol.modern import LOG_LEVEL_META
from gateway.upstream import Answer

#: RFC 5424 severities, as MCP names them, least severe first.
LOG_LEVELS = ("debug", "info", "notice", "warning", "error", "critical", "alert", "emergency")


class CallStream:
    def __init__(self, request: web.Request, message: jsonrpc.Request) -> None:
        self._request = request
        self.token = jsonrpc.progress_token(message)
        level = message.meta.get(LOG_LEVEL_META)
        self.log_level = LOG_LEVELS.index(level) if level in LOG_LEVELS else None
        self._heard: asyncio.Queue[jsonrpc.Notification] = asyncio.Queue()
        self._stream: web.StreamResponse | None = None

    def progress(self, params: jsonrpc.JsonObject) -> None:
        params = {**params, "progressToken": self.token}
        self._heard.put_nowait(
            jsonrpc.Notification(jsonrpc="2.0", method="notifications/progress", params=params)
        )

    def logged(self, params: jsonrpc.JsonObject) -> None:
        level = params.get("level")
        if self.log_level is None or level not in LOG_LEVELS:
            return
        if LOG_LEVELS.index(level) >= self.log_level:
            self._heard.put_nowait(
                jsonrpc.Notification(jsonrpc="2.0", method="notifications/message", params=params)
            )

    async def relay(self) -> None:
        while True:
            await self._send(await self._heard.get())

    async def _send(self, note: jsonrpc.Notification) -> None:
        if self._stream is None:
            self._stream = web.StreamResponse(status=200, headers=SSE_HEADERS)
            await self._stream.prepare(self._request)
            self._request[STARTED] = True
        await self._stream.write(encode(None, jsonrpc.dump(note)))

    async def finish(self, answer: Answer) -> Answer | web.StreamResponse:
        """The answer: as JSON if nothing went out before it, else at the stream's end."""
        try:
            while not self._heard.empty():
                await self._send(self._heard.get_nowait())
            if self._stream is None:
                return answer
            await self._stream.write(encode(None, jsonrpc.dump(answer)))
            await self._stream.write_eof()
        except ConnectionError:
            pass  # the client left after its answer was ready: nothing more to do
        return self._stream if self._stream is not None else answer
