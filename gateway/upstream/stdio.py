"""stdio upstream: one child process per downstream session.

A stdio server is a single MCP session, so children are never shared between clients. The
child's stderr goes to the gateway log; its exit fails whatever was in flight.
"""

from __future__ import annotations

import asyncio
import logging
from asyncio.subprocess import PIPE, Process
from collections.abc import AsyncIterator

from .. import jsonrpc
from ..aio import TaskSet
from ..config import UpstreamConfig
from ..errors import CapacityExceeded, UpstreamUnavailable
from .base import Sink, Transport
from .unreadable import MAX_LINE_BYTES, Unreadable, unreadable

log = logging.getLogger(__name__)


async def _lines(stream: asyncio.StreamReader) -> AsyncIterator[bytes | Unreadable]:
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
            size = len(head) + await _skip_line(stream)
            yield unreadable(head, f"a line longer than {MAX_LINE_BYTES} bytes", size)
            continue
        yield line


async def _skip_line(stream: asyncio.StreamReader) -> int:
    """Drops the rest of the current line, its newline included; returns how many bytes."""
    skipped = 0
    while True:
        try:
            return skipped + len(await stream.readuntil(b"\n"))
        except asyncio.LimitOverrunError as exc:
            skipped += len(await stream.readexactly(exc.consumed))
        except asyncio.IncompleteReadError as exc:
            return skipped + len(exc.partial)


class ChildSlots:
    """The per-route cap on running stdio children."""

    def __init__(self, route: str, limit: int) -> None:
        self.route = route
        self.limit = limit
        self.running = 0

    def acquire(self) -> None:
        if self.running >= self.limit:
            raise CapacityExceeded(
                f"route {self.route!r} already runs its maximum of {self.limit} stdio children "
                "(upstream.max_children); end an idle session or raise the cap"
            )
        self.running += 1

    def release(self) -> None:
        self.running -= 1


class StdioTransport(Transport):
    def __init__(self, sink: Sink, config: UpstreamConfig, slots: ChildSlots) -> None:
        super().__init__(sink)
        self._config = config
        self._slots = slots
        self._proc: Process | None = None
        self._tasks = TaskSet(f"stdio[{slots.route}]")
        self._closing = False
        self._holds_slot = False

    def _release_slot(self) -> None:
        if self._holds_slot:
            self._holds_slot = False
            self._slots.release()

    async def start(self) -> None:
        self._slots.acquire()
        self._holds_slot = True
        try:
            self._proc = await asyncio.create_subprocess_exec(
                *self._config.argv(),
                stdin=PIPE,
                stdout=PIPE,
                stderr=PIPE,
                env=self._config.child_env(),
                cwd=self._config.cwd,
                limit=MAX_LINE_BYTES,
            )
        except OSError as exc:
            self._release_slot()
            raise UpstreamUnavailable(
                f"cannot start stdio upstream {self._config.argv()[0]!r}: {exc.strerror or exc}"
            ) from exc
        log.info("route %s: started stdio child pid %d", self._slots.route, self._proc.pid)
        self._tasks.spawn(self._read_stdout(self._proc), name="stdio-stdout")
        self._tasks.spawn(self._read_stderr(self._proc), name="stdio-stderr")

    async def _read_stdout(self, proc: Process) -> None:
        assert proc.stdout is not None
        source = f"route {self._slots.route}: the stdio child"
        try:
            async for line in _lines(proc.stdout):
                if isinstance(line, Unreadable):
                    log.warning("%s wrote a line the gateway cannot read: %s", source, line)
                    self.sink.on_unreadable(line)
                elif line.strip():
                    self._deliver(line, source)
        except ConnectionError as exc:
            log.warning("%s: its output is unreadable: %s", source, exc)
        code = await proc.wait()
        self._release_slot()
        self._proc = None
        if not self._closing:
            self.sink.on_lost(f"the stdio upstream process exited with code {code}")

    async def _read_stderr(self, proc: Process) -> None:
        assert proc.stderr is not None
        async for line in _lines(proc.stderr):
            text = str(line) if isinstance(line, Unreadable) else line.decode(errors="replace")
            log.info("route %s [pid %d] %s", self._slots.route, proc.pid, text.rstrip())

    async def send(self, message: jsonrpc.Message) -> None:
        proc = self._proc
        if proc is None or proc.stdin is None or proc.returncode is not None:
            raise UpstreamUnavailable("the stdio upstream process is not running")
        try:
            proc.stdin.write(jsonrpc.dump(message).encode() + b"\n")
            await proc.stdin.drain()
        except (BrokenPipeError, ConnectionResetError) as exc:
            raise UpstreamUnavailable("the stdio upstream process closed its input") from exc

    async def close(self) -> None:
        self._closing = True
        proc = self._proc
        if proc is not None and proc.returncode is None:
            # Closing stdin is the stdio spec's polite shutdown; escalate if ignored.
            if proc.stdin is not None:
                proc.stdin.close()
            for step in (proc.terminate, proc.kill):
                try:
                    async with asyncio.timeout(2):
                        await proc.wait()
                    break
                except TimeoutError:
                    step()
            else:
                await proc.wait()
        await self._tasks.close()
        self._release_slot()
