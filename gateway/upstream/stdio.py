"""stdio upstream: one child process per downstream session.

A stdio server is a single MCP session, so children are never shared between clients. The
child's stderr goes to the gateway log; its exit fails whatever was in flight.
"""

from __future__ import annotations

import asyncio
import logging
import os
from asyncio.subprocess import PIPE, Process

from .. import jsonrpc
from ..aio import TaskSet
from ..config import UpstreamConfig
from ..errors import CapacityExceeded, InvalidRequest, ParseError, UpstreamUnavailable
from .base import Sink, Transport

log = logging.getLogger(__name__)

# Large enough for multi-megabyte tool results on one line.
_LINE_LIMIT = 64 * 1024 * 1024


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
        env = {**os.environ, **self._config.env} if self._config.env else None
        try:
            self._proc = await asyncio.create_subprocess_exec(
                *self._config.argv(),
                stdin=PIPE,
                stdout=PIPE,
                stderr=PIPE,
                env=env,
                cwd=self._config.cwd,
                limit=_LINE_LIMIT,
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
        try:
            while line := await proc.stdout.readline():
                if not line.strip():
                    continue
                try:
                    message = jsonrpc.parse(line)
                except (ParseError, InvalidRequest) as exc:
                    log.warning(
                        "route %s: stdio child wrote a non-MCP line: %s",
                        self._slots.route,
                        exc.message,
                    )
                    continue
                self.sink.on_message(message, None)
        except (ValueError, ConnectionError) as exc:
            log.warning("route %s: stdio child output unreadable: %s", self._slots.route, exc)
        code = await proc.wait()
        self._release_slot()
        self._proc = None
        if not self._closing:
            self.sink.on_lost(f"the stdio upstream process exited with code {code}")

    async def _read_stderr(self, proc: Process) -> None:
        assert proc.stderr is not None
        while line := await proc.stderr.readline():
            log.info(
                "route %s [pid %d] %s",
                self._slots.route,
                proc.pid,
                line.decode(errors="replace").rstrip(),
            )

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
