"""The PostgreSQL store's wake-ups: a connection of its own that LISTENs for the task ids the
triggers (`schema`) send when a row changes or goes, on whichever replica changed it, and for
the session ids whose records changed or went (for `kept`).

Its own connection, never one of the pool's: a LISTEN lasts as long as its session, and a
pooled connection is handed to every caller in turn. Notifications sent while it is down are
lost for good, so after reconnecting it says so (`changed(None)`: re-scan), and a waiter
always re-reads the row and polls slowly as well (DESIGN.md, "Several replicas"). A quiet
connection is pinged now and then, since a peer that vanished without closing it (a network
partition) would otherwise never be noticed.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import Any

import asyncpg

from gateway.aio import TaskSet

log = logging.getLogger(__name__)

_PING_SECONDS = 10.0
_FIRST_RETRY_SECONDS = 0.1
_LAST_RETRY_SECONDS = 5.0

#: What a lost or unreachable server raises.
_LOST = (OSError, TimeoutError, asyncpg.PostgresError, asyncpg.InterfaceError)


class Listener:
    """Calls `heard[channel](payload)` per notification on each channel of `heard` (a task id
    on CHANNEL and DELETED_CHANNEL, a session id on SESSION_CHANNEL), and each of them with
    None after each reconnection, in the order given, until `close()`."""

    def __init__(self, url: str, name: str, heard: dict[str, Callable[[str | None], None]]) -> None:
        self._url = url
        self._name = name
        self._heard = heard
        self._conn: asyncpg.Connection[Any] | None = None
        self._lost = asyncio.Event()
        self._tasks = TaskSet("task store listener")

    async def start(self) -> None:
        """Listens from now on, reconnecting whenever the connection is lost.

        Raises: what asyncpg raises when the first connection cannot be made.
        """
        await self._connect()
        self._tasks.spawn(self._keep(), name="task-store-listener")

    @property
    def connected(self) -> bool:
        """Whether notifications reach this listener now."""
        return self._conn is not None and not self._lost.is_set()

    async def close(self) -> None:
        await self._tasks.close()
        if self._conn is not None:
            # Nothing to say goodbye for: the server forgets a LISTEN with its session.
            self._conn.terminate()
            self._conn = None

    async def _connect(self) -> None:
        # The server shows which replica's listener this is (pg_stat_activity).
        conn = await asyncpg.connect(
            self._url, server_settings={"application_name": f"{self._name} listener"}
        )
        lost = asyncio.Event()
        try:
            conn.add_termination_listener(lambda _: lost.set())
            for channel in self._heard:
                await conn.add_listener(channel, self._notified)
        except BaseException:
            conn.terminate()
            raise
        self._conn, self._lost = conn, lost

    def _notified(self, _conn: object, _pid: int, channel: str, payload: object) -> None:
        self._heard[channel](str(payload))

    async def _keep(self) -> None:
        while True:
            await self._until_lost()
            delay = _FIRST_RETRY_SECONDS
            while True:
                try:
                    await self._connect()
                    break
                except _LOST as exc:
                    log.warning("task store listener: reconnecting in %.1f s: %s", delay, exc)
                    await asyncio.sleep(delay)
                    delay = min(2 * delay, _LAST_RETRY_SECONDS)
            log.info("task store listener: reconnected; re-reading every task waited on")
            for heard in self._heard.values():
                heard(None)

    async def _until_lost(self) -> None:
        """Returns once the connection is gone: closed under it, or silent to a ping."""
        conn, lost = self._conn, self._lost
        assert conn is not None  # `_connect` set it before `_keep` began
        while not lost.is_set():
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(_PING_SECONDS):
                    await lost.wait()
            if lost.is_set():
                break
            try:
                async with asyncio.timeout(_PING_SECONDS):
                    await conn.execute("SELECT 1")
            except _LOST as exc:
                log.warning("task store listener: no answer to a ping: %s", exc)
                break
        conn.terminate()
        self._conn = None
