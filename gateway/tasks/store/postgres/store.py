"""The PostgreSQL backend of `TaskStore`: the database several replicas share (DESIGN.md,
"Several replicas"). The reads are here; the writes it delegates, by the rows they change, to
`tasks`, `inputs`, `attempts` and `sessions`.

Each write is one transaction on a pooled connection, durable on return (a caller cancelled
before the commit has written nothing). A task's runner is the replica that created or
claimed it, and the runner's writes are fenced on it: a replica taken for dead can no longer
write to the tasks a survivor took over, while a client's cancel or answer lands on any
replica. `schema` keeps the schema current, `listener` hears the wake-ups.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable, Collection, Iterator
from datetime import datetime
from typing import Any, TypeVar

import asyncpg
from asyncpg import Record

from gateway.protocol.errors import StoreUnreachable
from gateway.protocol.jsonrpc import JsonObject, RequestId
from gateway.protocol.outcome import Outcome
from gateway.tasks.models import (
    TERMINAL,
    InputRequest,
    SessionRecord,
    Task,
    TaskFilter,
    TaskStatus,
    epoch_us,
)
from gateway.tasks.store.filters import tasks_where
from gateway.tasks.store.postgres import attempts, inputs, sessions
from gateway.tasks.store.postgres import tasks as task_rows
from gateway.tasks.store.postgres.listener import Listener
from gateway.tasks.store.postgres.schema import SQL, Connection, cursor_secret, migrate
from gateway.tasks.store.reads import SharedReads
from gateway.tasks.store.writes import check_request, failure, finish_sources, update_sources

T = TypeVar("T")

_POOL_SIZE = 10
#: How long `close` waits for the writes under way before it drops their connections.
_CLOSE_SECONDS = 10.0


_STORED_BYTES = (
    "SELECT coalesce(sum(octet_length(o.body)), 0) + coalesce(sum(octet_length(c.request)), 0)"
    " FROM tasks t LEFT JOIN outcomes o USING (task_id) LEFT JOIN task_calls c USING (task_id)"
    " WHERE t.owner = $1"
)


class PostgresTaskStore(SharedReads):
    """`TaskStore` on a PostgreSQL database, as the replica `replica`. `commits` counts the
    transactions its writes committed."""

    _sql = SQL

    def __init__(
        self,
        pool: asyncpg.Pool[Record],
        url: str,
        replica: str,
        lease_seconds: float,
        secret: bytes,
        on_timing: Callable[[str, float], None] | None = None,
    ) -> None:
        self._pool = pool
        self._url = url
        self._replica = replica
        self._lease_seconds = lease_seconds
        self._secret = secret
        self._on_timing = on_timing
        self._listener: Listener | None = None
        self._closed = False
        self.commits = 0
        self._last_commit = 0.0

    async def create_task(
        self, task: Task, max_active: int | None = None, request: JsonObject | None = None
    ) -> bool:
        check_request(task, request)
        return await self._write(
            lambda db: task_rows.create(db, task, max_active, request, self._replica)
        )

    async def purge_tasks(self, choice: TaskFilter) -> list[str]:
        where, params = tasks_where(choice, SQL.mark, TERMINAL)
        # SKIP LOCKED: a row another replica is writing just now waits for the next purge.
        sql = (
            f"DELETE FROM tasks WHERE task_id IN (SELECT task_id FROM tasks WHERE {where}"
            f" ORDER BY created_at, task_id LIMIT {SQL.mark(len(params) + 1)}"
            " FOR UPDATE SKIP LOCKED) RETURNING task_id"
        )
        rows = await self._write(lambda db: db.fetch(sql, *params, choice.limit))
        return [row["task_id"] for row in rows]

    async def update_task(
        self, task_id: str, status: TaskStatus, status_message: str | None, now: datetime
    ) -> Task | None:
        sources = update_sources(status)
        move = task_rows.transition(task_id, sources, status, status_message, now, self._replica)
        return next(iter(await self._write(move)), None)

    async def note_task(self, task_id: str, status_message: str, now: datetime) -> Task | None:
        return await self._write(
            lambda db: task_rows.note(db, task_id, status_message, now, self._replica)
        )

    async def finish_task(
        self,
        task_id: str,
        status: TaskStatus,
        status_message: str | None,
        outcome: Outcome | None,
        now: datetime,
    ) -> Task | None:
        sources = finish_sources(status)
        # A client's cancel lands on whichever replica it reached, not only on the runner.
        runner = None if status == TaskStatus.CANCELLED else self._replica
        move = task_rows.transition(task_id, sources, status, status_message, now, runner)
        return next(iter(await self._write(task_rows.ending(move, outcome, now))), None)

    async def erase_principal(self, principal: str) -> tuple[int, int]:
        async def erase(db: Connection) -> tuple[int, int]:
            tasks = await db.fetch(SQL.erase_tasks, principal)
            status: str = await db.execute(SQL.erase_sessions, principal)
            return len(tasks), int(status.split()[-1])

        return await self._write(erase)

    async def stored_bytes(self, owner: str) -> int:
        rows = await self._read(_STORED_BYTES, owner)
        return int(rows[0][0])

    async def add_input(self, request: InputRequest) -> bool:
        return await self._write(lambda db: inputs.add(db, request, self._replica))

    async def answer_input(
        self, task_id: str, key: str, response: JsonObject, now: datetime
    ) -> InputRequest | None:
        return await self._write(lambda db: inputs.answer(db, task_id, key, response, now))

    async def withdraw_inputs(
        self, task_id: str, now: datetime, keys: Collection[str] | None = None
    ) -> list[InputRequest]:
        return await self._write(lambda db: inputs.withdraw(db, task_id, now, keys, self._replica))

    async def delete_expired(self, now: datetime) -> list[str]:
        rows = await self._write(lambda db: db.fetch(SQL.delete_expired, epoch_us(now)))
        return [row["task_id"] for row in rows]

    async def fail_running(
        self, task_ids: Collection[str], message: str, now: datetime
    ) -> list[Task]:
        failed = TaskStatus.FAILED
        sources = finish_sources(failed)
        move = task_rows.transition(list(task_ids), sources, failed, message, now, self._replica)
        return await self._write(task_rows.ending(move, failure(message), now))

    async def begin_attempt(
        self, task_id: str, attempt: int, status_message: str, now: datetime
    ) -> Task | None:
        return await self._write(
            lambda db: attempts.begin(db, task_id, attempt, status_message, now, self._replica)
        )

    async def note_upstream_call(
        self, task_id: str, session_id: str | None, request_id: RequestId
    ) -> None:
        await self._write(
            lambda db: attempts.note(db, task_id, session_id, request_id, self._replica)
        )

    async def claim_orphans(self) -> list[Task]:
        return await self._write(lambda db: attempts.claim(db, self._replica))

    async def renew_lease(self) -> None:
        sql, lease = attempts.RENEW, self._lease_seconds
        await self._write(lambda db: db.execute(sql, self._replica, lease))

    async def watch(self, changed: Callable[[str | None], None]) -> None:
        """Raises: RuntimeError if this store is watched already; what asyncpg raises if the
        listener's connection cannot be made."""
        if self._listener is not None:
            raise RuntimeError("the task store is watched already")
        listener = Listener(self._url, _application_name(self._replica), changed)
        await listener.start()
        self._listener = listener

    async def save_session(self, record: SessionRecord) -> None:
        await self._write(lambda db: sessions.save(db, record))

    async def update_session(self, record: SessionRecord) -> bool:
        return await self._write(lambda db: sessions.update(db, record))

    async def delete_session(self, session_id: str) -> None:
        await self._write(lambda db: db.execute(SQL.delete_session, session_id))

    async def prune_sessions(
        self, live: Collection[str], now: datetime, idle_before: datetime
    ) -> list[str]:
        return await self._write(lambda db: sessions.prune(db, live, now, idle_before))

    @property
    def last_commit(self) -> float:
        return self._last_commit

    async def check_writable(self) -> None:
        sql = (
            "INSERT INTO meta VALUES ('health_check', $1)"
            " ON CONFLICT (key) DO UPDATE SET value = excluded.value"
        )
        await self._write(lambda db: db.execute(sql, str(time.time()).encode()))

    async def secret(self) -> bytes:
        return self._secret

    async def close(self) -> None:
        """Stops listening, gives up this replica's lease (its live tasks are the others' to
        claim at once), then closes the pool once the writes under way have ended; later
        calls are refused."""
        if self._closed:
            return
        self._closed = True
        try:
            if self._listener is not None:
                await self._listener.close()
            async with self._pool.acquire() as db:
                await db.execute(attempts.RELEASE, self._replica)
        finally:
            # On timeout the pool terminates the connections still in use.
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(_CLOSE_SECONDS):
                    await self._pool.close()

    async def _read(self, sql: str, *params: Any) -> list[Record]:
        self._check_open()
        started = time.perf_counter()
        with self._unreachable_as_503():
            rows = await self._pool.fetch(sql, *params)
        if self._on_timing is not None:
            self._on_timing("read", time.perf_counter() - started)
        return rows

    async def _write(self, run: Callable[[Connection], Awaitable[T]]) -> T:
        self._check_open()
        started = time.perf_counter()
        with self._unreachable_as_503():
            async with self._pool.acquire() as db, db.transaction():
                value = await run(db)
        self.commits += 1
        self._last_commit = time.monotonic()
        if self._on_timing is not None:
            self._on_timing("commit", time.perf_counter() - started)
        return value

    def _check_open(self) -> None:
        if self._closed:
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
            self._last_commit = float("-inf")
            raise StoreUnreachable(
                "the task store is unreachable just now; send the request again shortly",
                headers={"Retry-After": "1"},
            ) from exc


#: Errors that say the server cannot be used now, not that a statement is wrong.
_UNREACHABLE = (
    OSError,
    asyncpg.PostgresConnectionError,
    asyncpg.InterfaceError,
    asyncpg.exceptions.OperatorInterventionError,
)


def _application_name(replica: str) -> str:
    """What the server shows for this replica's connections (pg_stat_activity)."""
    return f"mcp-task-gateway {replica}"


async def open_postgres_store(
    url: str,
    replica: str,
    lease_seconds: float = 15.0,
    on_timing: Callable[[str, float], None] | None = None,
) -> PostgresTaskStore:
    """Connects to the database at `url` (the password from PGPASSWORD), brings its schema up
    to date and takes the lease of `replica`, this process's name among the replicas. Give a
    new name at each start: the live tasks of an earlier process of the same name would pass
    for this one's, and no replica would ever claim them.

    `on_timing(operation, seconds)` hears how long each read and each commit took.

    Raises: what asyncpg raises when the database cannot be reached or used (OSError,
    asyncpg.PostgresError, ...); RuntimeError if its schema is newer than this gateway knows.
    """
    pool = await asyncpg.create_pool(
        url,
        min_size=1,
        max_size=_POOL_SIZE,
        server_settings={"application_name": _application_name(replica)},
    )
    try:
        async with pool.acquire() as db:
            await migrate(db)
            secret = await cursor_secret(db)
        store = PostgresTaskStore(pool, url, replica, lease_seconds, secret, on_timing)
        await store.renew_lease()
    except BaseException:
        pool.terminate()
        raise
    return store
