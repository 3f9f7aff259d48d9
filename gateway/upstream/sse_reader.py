"""A minimal reader of text/event-stream bodies (WHATWG rules that MCP peers use).

Lines end with CRLF, LF or a lone CR, as the spec allows. A line longer than `MAX_LINE_BYTES`
ends the stream with UpstreamProtocolError, so an upstream that never sends a line end cannot
grow the buffer without bound. An event whose bytes are not UTF-8 is still delivered, marked
`broken`: the spec would replace them with U+FFFD, but a message altered that way must not
pass as the upstream's own answer.

A reader that stops before the stream's end (the answer came) closes `events` (`aclosing`),
which closes what it reads in turn. An async generator left suspended is closed by the event
loop's finalizer hook instead: a thread-safe call, and so a write to the loop's wake-up
descriptor, and a task, for each generator of each such answer.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import AsyncGenerator, AsyncIterable
from dataclasses import dataclass

from gateway.protocol.errors import ResultTooLarge, UpstreamProtocolError
from gateway.upstream.unreadable import MAX_LINE_BYTES

_LINE_END = re.compile(rb"\r\n?|\n")


@dataclass(slots=True)
class Event:
    event: str = "message"
    data: str = ""
    id: str | None = None
    retry: int | None = None
    #: Why the event cannot be trusted (its bytes were not UTF-8), if it cannot.
    broken: str | None = None


def _too_long(limit: int) -> UpstreamProtocolError:
    return ResultTooLarge.past("the upstream sent an SSE line longer", limit)


async def _lines(chunks: AsyncIterable[bytes], limit: int) -> AsyncGenerator[bytes, None]:
    # Split chunks ourselves: aiohttp's readline caps line length, and one SSE data line
    # may carry a multi-megabyte tool result.
    partial: list[bytes] = []  # the current line so far (no line end in it)
    size = 0
    skip_lf = False  # the last chunk ended in CR: an LF starting this one belongs to it
    try:
        async for chunk in chunks:
            if not chunk:
                continue
            if skip_lf and chunk.startswith(b"\n"):
                chunk = chunk[1:]
            # A CR ends its line at once (a server may wait after it), even if an LF follows.
            skip_lf = chunk.endswith(b"\r")
            pieces = _LINE_END.split(chunk) if b"\r" in chunk else chunk.split(b"\n")
            if len(pieces) > 1:
                pieces[0] = b"".join((*partial, pieces[0]))
                partial, size = [], 0
                for line in pieces[:-1]:
                    if len(line) > limit:
                        raise _too_long(limit)
                    yield line
            if pieces[-1]:
                partial.append(pieces[-1])
                size += len(pieces[-1])
                if size > limit:
                    raise _too_long(limit)
        # Anything left is a line without its end: an event cut off, never dispatched.
    finally:
        if isinstance(chunks, AsyncGenerator):  # (a body's own chunk generator)
            await chunks.aclose()


async def events(
    chunks: AsyncIterable[bytes], limit: int = MAX_LINE_BYTES
) -> AsyncGenerator[Event, None]:
    """The events of a stream read as `chunks` (an aiohttp body's `iter_any()`).

    Raises:
        UpstreamProtocolError: a line was longer than `limit` bytes.
    """
    data: list[str] = []
    event = Event()
    async with contextlib.aclosing(_lines(chunks, limit)) as lines:
        async for raw in lines:
            if not raw:
                if data or event.id is not None or event.retry is not None:
                    event.data = "\n".join(data)
                    yield event
                data, event = [], Event()
                continue
            if raw.startswith(b":"):
                continue
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                line = raw.decode("utf-8", "replace")
                event.broken = f"the SSE event is not valid UTF-8 ({exc.reason})"
            name, _, value = line.partition(":")
            value = value.removeprefix(" ")
            if name == "data":
                data.append(value)
            elif name == "event":
                event.event = value
            elif name == "id":
                event.id = value
            elif name == "retry" and value.isdigit():
                event.retry = int(value)
