"""What a stdio child writes: its stdout line by line, as stdio framing has it (`lines`), and
the last lines of its stderr (`StderrTail`), which say why a child that exited at once did.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import AsyncIterator

from gateway.observability.logs import printable
from gateway.upstream.unreadable import Unreadable, unreadable

#: Lines of a child's stderr kept, and the characters kept of each: a child that writes
#: megabytes before it exits is shown by its last words, never all of them.
TAIL_LINES = 10
TAIL_LINE_CHARS = 300


async def lines(stream: asyncio.StreamReader, limit: int) -> AsyncIterator[bytes | Unreadable]:
    """The child's output, line by line; a line over the limit is skipped to its end.

    Skipping keeps the child usable: the next line starts a new message, as stdio framing
    promises, so one over-long answer fails one call rather than the whole session.
    """
    while True:
        try:
            line = await stream.readuntil(b"\n")
        except asyncio.IncompleteReadError as exc:
            if exc.partial:
                yield exc.partial  # the output ended without a final newline
            return
        except asyncio.LimitOverrunError as exc:
            head = await stream.readexactly(exc.consumed)
            size = len(head) + await skip_line(stream)
            reason = f"a message larger than {limit} bytes (routes[].max_result_bytes)"
            yield unreadable(head, reason, size, too_large=True)
            continue
        yield line


async def skip_line(stream: asyncio.StreamReader) -> int:
    """Drops the rest of the current line, its newline included; returns how many bytes."""
    skipped = 0
    while True:
        try:
            return skipped + len(await stream.readuntil(b"\n"))
        except asyncio.LimitOverrunError as exc:
            skipped += len(await stream.readexactly(exc.consumed))
        except asyncio.IncompleteReadError as exc:
            return skipped + len(exc.partial)


class StderrTail:
    """The last `TAIL_LINES` lines of one child's stderr, each cut to `TAIL_LINE_CHARS` and
    with control characters escaped, fit to print."""

    def __init__(self) -> None:
        self._lines: deque[str] = deque(maxlen=TAIL_LINES)
        self._ended = asyncio.Event()

    def add(self, text: str) -> None:
        text = text.rstrip("\r\n")
        if text.strip():
            self._lines.append(printable(text, TAIL_LINE_CHARS))

    def end(self) -> None:
        """The child closed its stderr (or the reader stopped): the tail is whole."""
        self._ended.set()

    async def ended(self, seconds: float) -> tuple[str, ...]:
        """The tail, once the child's stderr has ended within `seconds`; else nothing."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(seconds):
                await self._ended.wait()
                return tuple(self._lines)
        return ()
