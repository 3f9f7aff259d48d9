"""A minimal reader of text/event-stream bodies (WHATWG rules that MCP peers use)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass

from aiohttp import StreamReader


@dataclass(slots=True)
class Event:
    event: str = "message"
    data: str = ""
    id: str | None = None
    retry: int | None = None


async def _lines(body: StreamReader) -> AsyncIterator[str]:
    # Split chunks ourselves: aiohttp's readline caps line length, and one SSE data line
    # may carry a multi-megabyte tool result.
    pending: list[bytes] = []
    async for chunk in body.iter_any():
        pending.append(chunk)
        if b"\n" not in chunk:
            continue
        *complete, rest = b"".join(pending).split(b"\n")
        pending = [rest]
        for raw in complete:
            yield raw.rstrip(b"\r").decode("utf-8")
    rest = b"".join(pending)
    if rest:
        yield rest.rstrip(b"\r").decode("utf-8")


async def events(body: StreamReader) -> AsyncIterator[Event]:
    data: list[str] = []
    event = Event()
    async for line in _lines(body):
        if not line:
            if data or event.id is not None or event.retry is not None:
                event.data = "\n".join(data)
                yield event
            data, event = [], Event()
            continue
        if line.startswith(":"):
            continue
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
