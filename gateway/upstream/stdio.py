"""stdio upstream: one child process per downstream session.

A stdio server is a single MCP session, so children are never shared between clients. The
child's stderr goes to the gateway log, its last lines kept (`last_stderr`: what a reachability
probe shows of a child that exited at once); its exit fails whatever was in flight. A child that
nothing waits on is stopped after `upstream.child_idle_seconds`, or at once when the route's
cap (`child_slots`) is reached and another session needs a child; the session stays, and its
next message starts a new child with the handshake replayed (`UpstreamClient`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from asyncio.subprocess import PIPE, Process
from typing import Protocol

from gateway.aio import TaskSet
from gateway.config import UpstreamConfig
from gateway.protocol import jsonrpc
from gateway.protocol.errors import UpstreamUnavailable
from gateway.upstream.base import DETACHED, Sink, Transport
from gateway.upstream.child_output import StderrTail, lines
from gateway.upstream.child_slots import ChildSlots
from gateway.upstream.unreadable import Unreadable

log = logging.getLogger(__name__)


class ChildOwner(Sink, Protocol):
    """The stdio transport's sink, which says whether its child may be stopped."""

    @property
    def busy(self) -> bool:
        """True while a call, a task or a question needs the child that runs now."""
        ...

    @property
    def listening(self) -> bool:
        """True while a client is connected to hear what the child sends on its own."""
        ...

    def on_stopped(self, reason: str) -> None:
        """The idle child was stopped; the next use starts another, handshake replayed."""


async def _stop(proc: Process) -> None:
    """End a child: stdin closed (the stdio spec's polite shutdown), then SIGTERM, SIGKILL."""
    try:
        if proc.returncode is None and proc.stdin is not None:
            proc.stdin.close()
        for step in (proc.terminate, proc.kill):
            try:
                async with asyncio.timeout(2):
                    await proc.wait()
                return
            except TimeoutError:
                with contextlib.suppress(ProcessLookupError):
                    step()
        await proc.wait()
    finally:
        if proc.returncode is None:  # cancelled on the way: never leave a child behind
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            # Reaped even so (a killed child exits at once): an unreaped one would keep its
            # pipes open until the interpreter collects the transport.
            await proc.wait()


class StdioTransport(Transport):
    def __init__(self, sink: ChildOwner, config: UpstreamConfig, slots: ChildSlots) -> None:
        super().__init__(sink)
        self._owner = sink
        self._config = config
        self._slots = slots
        #: The child that serves this session now; None while there is none.
        self._proc: Process | None = None
        #: A child taken out of service and not yet exited.
        self._exiting: Process | None = None
        self._tasks = TaskSet(f"stdio[{slots.route}]")
        self.last_used = 0.0
        #: The end of what the latest child wrote to stderr; None before the first starts.
        self._stderr: StderrTail | None = None

    @property
    def idle(self) -> bool:
        """A running child nothing waits on: it may be stopped and started again later."""
        return self._proc is not None and not self._owner.busy

    @property
    def listening(self) -> bool:
        return self._owner.listening

    @property
    def stopping(self) -> bool:
        return self._exiting is not None

    def _touch(self) -> None:
        self.last_used = asyncio.get_running_loop().time()

    async def start(self) -> None:
        await self._slots.acquire(self)
        try:
            proc = await asyncio.create_subprocess_exec(
                *self._config.argv(),
                stdin=PIPE,
                stdout=PIPE,
                stderr=PIPE,
                env=self._config.child_env(),
                cwd=self._config.cwd,
                limit=self.max_message_bytes,
            )
        except OSError as exc:
            self._slots.release(self)
            raise UpstreamUnavailable(
                f"cannot start stdio upstream {self._config.argv()[0]!r}: {exc.strerror or exc}"
            ) from exc
        except BaseException:
            self._slots.release(self)
            raise
        self._proc = proc
        self._touch()
        log.info("route %s: started stdio child pid %d", self._slots.route, proc.pid)
        self._tasks.spawn(self._read_stdout(proc), name="stdio-stdout")
        self._stderr = StderrTail()
        self._tasks.spawn(self._read_stderr(proc, self._stderr), name="stdio-stderr")
        idle = self._config.child_idle_seconds
        if idle is not None:
            self._tasks.spawn(self._stop_when_idle(proc, idle), name="stdio-idle")

    async def _read_stdout(self, proc: Process) -> None:
        assert proc.stdout is not None
        source = f"route {self._slots.route}: the stdio child"
        try:
            async for line in lines(proc.stdout, self.max_message_bytes):
                if self._owner.busy:
                    # Answers and progress count as use; what a child says unasked while
                    # idle (logs, list changes) must not keep it from being stopped.
                    self._touch()
                if isinstance(line, Unreadable):
                    log.warning("%s wrote a line the gateway cannot read: %s", source, line)
                    self.sink.on_unreadable(line)
                elif line.strip():
                    self._deliver(line, source)
        except ConnectionError as exc:
            log.warning("%s: its output is unreadable: %s", source, exc)
        code = await proc.wait()
        if self._proc is proc:  # it exited by itself, not stopped by the gateway
            self._proc = None
            self._slots.release(self)
            if self._slots.on_exit is not None:
                self._slots.on_exit()
            self.sink.on_lost(f"the stdio upstream process exited with code {code}")

    async def _read_stderr(self, proc: Process, tail: StderrTail) -> None:
        assert proc.stderr is not None
        try:
            async for line in lines(proc.stderr, self.max_message_bytes):
                text = str(line) if isinstance(line, Unreadable) else line.decode(errors="replace")
                log.info("route %s [pid %d] %s", self._slots.route, proc.pid, text.rstrip())
                tail.add(text)
        finally:
            tail.end()

    async def last_stderr(self, seconds: float) -> tuple[str, ...]:
        """The last lines the latest child wrote to stderr, once it has closed it (waiting up
        to `seconds` for that): what a child that exited at once said of why. Nothing while
        it runs on."""
        return () if self._stderr is None else await self._stderr.ended(seconds)

    async def _stop_when_idle(self, proc: Process, idle: float) -> None:
        loop = asyncio.get_running_loop()
        while self._proc is proc:
            left = self.last_used + idle - loop.time()
            if left > 0 or self._owner.busy or self._owner.listening:
                # A busy child's idle time starts when its last call or question ends. A
                # connected client would silently lose what the child sends on its own
                # (resource updates, list changes, logs): its child stays.
                await asyncio.sleep(left if left > 0 else idle)
                continue
            log.info(
                "route %s: stopping stdio child pid %d, idle for %g s "
                "(upstream.child_idle_seconds); its session keeps going",
                self._slots.route,
                proc.pid,
                idle,
            )
            self._owner.on_stopped(f"the stdio child was stopped after {idle:g} s idle")
            await self._stop_child()
            self._slots.release(self)

    async def give_way(self) -> None:
        """Stop this idle child so another session's child can have its slot."""
        proc = self._proc
        if proc is None:
            return
        log.info(
            "route %s: stopping idle stdio child pid %d for a new one "
            "(upstream.max_children); its session keeps going",
            self._slots.route,
            proc.pid,
        )
        self._owner.on_stopped("the idle stdio child gave its slot to another session")
        await self._stop_child()

    async def _stop_child(self) -> None:
        # Taken out of service before the first await: nothing is sent to it any more, and
        # its exit is not reported as a loss.
        proc, self._proc = self._proc, None
        if proc is None:
            return
        self._exiting = proc
        try:
            await _stop(proc)
        finally:
            if self._exiting is proc:
                self._exiting = None

    async def send(self, message: jsonrpc.Message) -> None:
        proc = self._proc
        if proc is None or proc.stdin is None or proc.returncode is not None:
            raise UpstreamUnavailable("the stdio upstream process is not running")
        self._touch()
        try:
            proc.stdin.write(jsonrpc.dump(message).encode() + b"\n")
            await proc.stdin.drain()
        except (BrokenPipeError, ConnectionResetError) as exc:
            raise UpstreamUnavailable("the stdio upstream process closed its input") from exc

    async def close(self) -> None:
        await self._stop_child()
        exiting = self._exiting
        if exiting is not None:  # stopped by an idle timer or for another session
            await exiting.wait()
        await self._tasks.close()
        self._slots.release(self)

    def detach(self) -> None:
        super().detach()
        self._owner = DETACHED
