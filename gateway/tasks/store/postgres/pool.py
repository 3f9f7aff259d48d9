"""The PostgreSQL store's way to its database: a pool of connections, each write one
transaction, durable on return (a caller cancelled before the commit has written nothing).

A server that cannot be used just now is the client's to retry, not a failure of its request:
every read and write then raises `StoreUnreachable` (503 with Retry-After), and no commit
before it counts for the health check any more.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable, Iterator
from typing import TYPE_CHECKING, Any, TypeVar

import asyncpg
from asyncpg import Record

from gateway.protocol.errors import StoreUnreachable
from gateway.tasks.store.postgres.schema import REPLICA_SETTING, Connection

if TYPE_CHECKING:
    from asyncpg.pool import PoolAcquireContext

T = TypeVar("T")

#: How long `close` waits for the writes under way before it drops their connections.
_CLOSE_SECONDS = 10.0

#: Errors that say the server cannot be used now, not that a statement is wrong.
_UNREACHABLE = (
    OSError,
    asyncpg.PostgresConnectionError,
    asyncpg.InterfaceError,
    asyncpg.exceptions.OperatorInterventionError,
)


async def _keep_session(_conn: object) -> None:
    """A connection's reset on its way back to the pool: none beyond asyncpg's own (which
    rolls back a transaction left open). The default reset is a statement of its own, a
    round trip after every read and write, to undo what the store never does on a pooled
    connection: LISTEN (the listener has its own), session settings (but the replica's name,
    set once at connect, which is to stay), cursors, session-level advisory locks (the
    store's locks are the transaction's)."""


def application_name(replica: str) -> str:
    """What the server shows for this replica's connections (pg_stat_activity)."""
    return f"mcp-task-gateway {replica}"


class Pool:
    """Reads and writes on the connections of `pool`. `on_timing(operation, seconds)` hears
    how long each read and each commit took."""

    def __init__(
        self,
        pool: asyncpg.Pool[Record],
        on_timing: Callable[[str, float], None] | None,
        size: int,
    ) -> None:
        self._pool = pool
        self._on_timing = on_timing
        #: Turns at the pool's connections, first come first served. asyncpg's own queue is
        #: not fair: a connection given back goes to whoever asks next in that turn of the
        #: loop, ahead of the waiter it woke, which then queues again at the back. Under
        #: load some reads and writes lost every time (at c=192, waits of seconds).
        self._turns = asyncio.Semaphore(size)
        self._refused = False
        #: `time.monotonic()` of the latest commit (0.0 before the first; -inf after the
        #: server was found unreachable, until the next commit).
        self.last_commit = 0.0

    @classmethod
    async def connect(
        cls,
        url: str,
        replica: str,
        on_timing: Callable[[str, float], None] | None,
        size: int,
    ) -> Pool:
        """Raises: what asyncpg raises when the database cannot be reached."""

        async def named(conn: asyncpg.Connection[Record]) -> None:
            # The triggers tell a replica's own writes from others' by this setting. Set once a
            # connection, not in the startup packet, which poolers such as PgBouncer refuse
            # for any setting they do not know.
            await conn.execute("SELECT set_config($1, $2, false)", REPLICA_SETTING, replica)

        pool = await asyncpg.create_pool(
            url,
            min_size=1,
            max_size=size,
            reset=_keep_session,
            init=named,
            server_settings={"application_name": application_name(replica)},
        )
        return cls(pool, on_timing, size)

    async def read(self, sql: str, *params: Any) -> list[Record]:
        self._check_open()
        started = time.perf_counter()
        rows = await self._fetch(sql, *params)
        if self._on_timing is not None:
            self._on_timing("read", time.perf_counter() - started)
        return rows

    async def write(self, run: Callable[[Connection], Awaitable[T]]) -> T:
        """`run(db)` in a transaction of its own; its value once that has committed."""
        self._check_open()
        started = time.perf_counter()
        with self._unreachable_as_503():
            async with self._turns, self._pool.acquire() as db, db.transaction():
                value = await run(db)
        self._committed(started)
        return value

    async def commit(self, sql: str, *params: Any) -> list[Record]:
        """One statement, a transaction of its own (no BEGIN and COMMIT to wait for); the
        rows it returns once it has committed."""
        self._check_open()
        started = time.perf_counter()
        rows = await self._fetch(sql, *params)
        self._committed(started)
        return rows

    async def ahead(self, sql: str, *params: Any) -> Any:
        """One statement, its first value once committed, ahead of the reads and writes
        waiting their turn: the lease's renewal, which a replica's queue of requests must not
        hold past the lease (the others would then fail this replica's running tasks)."""
        self._check_open()
        started = time.perf_counter()
        with self._unreachable_as_503():
            value = await self._pool.fetchval(sql, *params)
        self._committed(started)
        return value

    async def _fetch(self, sql: str, *params: Any) -> list[Record]:
        with self._unreachable_as_503():
            async with self._turns:
                return await self._pool.fetch(sql, *params)

    def _committed(self, started: float) -> None:
        self.last_commit = time.monotonic()
        if self._on_timing is not None:
            self._on_timing("commit", time.perf_counter() - started)

    def acquire(self) -> PoolAcquireContext[Record]:
        """A connection of the pool, whether reads and writes are refused or not."""
        return self._pool.acquire()

    def refuse(self) -> bool:
        """Refuses every later read and write; False if it did already."""
        refused, self._refused = self._refused, True
        return not refused

    async def close(self) -> None:
        """Closes the pool once the writes under way have ended, or after `_CLOSE_SECONDS`
        drops the connections still in use."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(_CLOSE_SECONDS):
                await self._pool.close()

    def terminate(self) -> None:
        self._pool.terminate()

    def _check_open(self) -> None:
        if self._refused:
            raise RuntimeError("the task store is closed")

    @contextlib.contextmanager
    def _unreachable_as_503(self) -> Iterator[None]:
        # OSError is a ConnectionError too, which the HTTP layer would take for a client that
        # went away: the client would get a bare 500 instead of being told to retry.
        try:
            yield
        except _UNREACHABLE as exc:
            # No commit before this one proves the store takes writes now: the health check
            # asks again (a load balancer stops sending what would get 503 within seconds).
            self.last_commit = float("-inf")
            raise StoreUnreachable(
                "the task store is unreachable just now; send the request again shortly",
                headers={"Retry-After": "1"},
            ) from exc
