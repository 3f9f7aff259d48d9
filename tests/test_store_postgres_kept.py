"""What replicas keep in memory (`postgres.kept`): a replica that hears the database's news
reads a session record once, and a record ended, pruned or rewritten on another replica is
gone or new here within a notification, long before the copies' own backstop; a task it has
just finished is read back with its outcome without the database, until any replica deletes
it; news that may have been lost (the listener's connection dropped) empties it all. On a
real PostgreSQL server, each test with a database of its own."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import timedelta

from gateway.tasks.models import SessionRecord, TaskStatus
from gateway.tasks.store.postgres import PostgresTaskStore, open_postgres_store
from gateway.tasks.store.postgres.kept import KEPT_SECONDS

from .test_store_attempts import RESULT, T0, make_task
from .test_store_postgres import query, schema_of

RECORD = SessionRecord(
    session_id="s",
    route="files",
    protocol_version="2025-11-25",
    initialize={"method": "initialize"},
    created_at=T0,
    upstream_session_id="upstream-1",
)
#: Well within the cache's backstop: what is seen by then came by notification.
NEWS_SECONDS = KEPT_SECONDS / 2


class Counted:
    """A store whose reads of the database are counted."""

    def __init__(self) -> None:
        self.reads = 0
        self.store: PostgresTaskStore
        #: The wake-ups the store passed on.
        self.heard: asyncio.Queue[str | None] = asyncio.Queue()

    def timed(self, operation: str, _seconds: float) -> None:
        self.reads += operation == "read"


@asynccontextmanager
async def watched_and_other(url: str) -> AsyncIterator[tuple[Counted, PostgresTaskStore]]:
    """Replica `a`, watched (as a gateway with replicas watches its store), and replica `b`."""
    a = Counted()
    a.store = await open_postgres_store(url, "a", on_timing=a.timed)
    b = await open_postgres_store(url, "b")
    try:
        await a.store.watch(a.heard.put_nowait)
        yield a, b
    finally:
        await a.store.close()
        await b.close()


async def until_read(store: PostgresTaskStore, wanted: SessionRecord | None) -> None:
    async with asyncio.timeout(NEWS_SECONDS):
        while await store.get_session(RECORD.session_id) != wanted:  # noqa: ASYNC110
            await asyncio.sleep(0.01)


async def test_a_watched_replica_reads_a_record_once_and_hears_its_end_on_another(
    pg_url: str,
) -> None:
    async with watched_and_other(pg_url) as (a, b):
        await b.save_session(RECORD)
        assert [await a.store.get_session("s") for _ in range(5)] == [RECORD] * 5
        assert a.reads == 1

        # Spec: once a session is terminated, requests with its id MUST get 404, on A too.
        await b.delete_session("s")

        await until_read(a.store, None)


async def test_a_fresh_read_of_a_record_asks_the_database_and_drops_a_copy_it_finds_gone(
    pg_url: str,
) -> None:
    async with watched_and_other(pg_url) as (a, b):
        await b.save_session(RECORD)
        assert await a.store.get_session("s") == RECORD
        # Deleted with no news (the triggers off), as in the moment before a notification lands.
        await query(pg_url, "ALTER TABLE sessions DISABLE TRIGGER USER")
        await query(pg_url, "DELETE FROM sessions WHERE session_id = 's'")
        assert await a.store.get_session("s") == RECORD  # the copy, as trusted until news

        assert await a.store.get_session("s", fresh=True) is None
        assert await a.store.get_session("s") is None


async def test_a_record_pruned_or_rewritten_on_another_replica_is_news_here(pg_url: str) -> None:
    async with watched_and_other(pg_url) as (a, b):
        await b.save_session(RECORD)
        assert await a.store.get_session("s") == RECORD
        moved = RECORD.model_copy(update={"upstream_session_id": "upstream-2"})

        assert await b.update_session(moved)
        await until_read(a.store, moved)

        await b.prune_sessions([], T0, T0 + timedelta(days=365 * 100))
        await until_read(a.store, None)


async def test_a_lost_listener_empties_the_cache_and_a_store_not_watched_keeps_none(
    pg_url: str,
) -> None:
    async with watched_and_other(pg_url) as (a, b):
        await b.save_session(RECORD)
        await a.store.get_session("s")
        await a.store.get_session("s")
        listener = "SELECT pid FROM pg_stat_activity WHERE application_name = $1"
        name = "mcp-task-gateway a listener"
        (before,) = await query(pg_url, listener, name)

        await query(pg_url, "SELECT pg_terminate_backend($1)", before["pid"])
        async with asyncio.timeout(5):  # until it has reconnected
            while not await query(pg_url, f"{listener} AND pid <> $2", name, before["pid"]):  # noqa: ASYNC110
                await asyncio.sleep(0.05)
        reads = a.reads
        await a.store.get_session("s")

        assert a.reads == reads + 1
        # Nobody tells an unwatched store of changes: it asks the database every time.
        assert [await b.get_session("s") for _ in range(2)] == [RECORD] * 2
        await b.delete_session("s")
        assert await b.get_session("s") is None


async def test_a_task_finished_here_reads_back_without_the_database_until_deleted_anywhere(
    pg_url: str,
) -> None:
    async with watched_and_other(pg_url) as (a, b):
        await a.store.create_task(make_task("t"))
        await b.heed_task("t")  # so its terminal write sends a wake-up, which reaches a too
        done = await a.store.finish_task("t", TaskStatus.COMPLETED, None, RESULT, T0)
        async with asyncio.timeout(1):  # its own wake-up comes back, and changes nothing
            assert await a.heard.get() == "t"
        reads = a.reads

        assert done is not None and await a.store.get_task("t") == done
        assert await a.store.find_task("t", done.owner) == done
        assert await a.store.find_task("t", "someone else") is None
        assert await a.store.get_outcome("t") == RESULT
        assert a.reads == reads

        # An expiry (or a purge) on any replica: the task is gone here too, at once.
        assert await b.delete_expired(T0 + timedelta(days=365)) == ["t"]
        async with asyncio.timeout(NEWS_SECONDS):
            while await a.store.get_task("t") is not None:  # noqa: ASYNC110
                await asyncio.sleep(0.01)
        assert await a.store.get_outcome("t") is None


async def test_a_database_of_schema_4_is_upgraded_and_its_deletions_and_sessions_are_news(
    pg_url: str,
) -> None:
    # The schema before replicas kept copies: its triggers sent deletions on the tasks' channel.
    await schema_of(pg_url, 4)

    async with watched_and_other(pg_url) as (a, b):
        await a.store.create_task(make_task("t"))
        await a.store.finish_task("t", TaskStatus.COMPLETED, None, RESULT, T0)
        await b.save_session(RECORD)
        assert await a.store.get_session("s") == RECORD

        assert await b.delete_expired(T0 + timedelta(days=365)) == ["t"]
        await b.delete_session("s")

        async with asyncio.timeout(NEWS_SECONDS):  # the kept copy went with the news
            while await a.store.get_task("t") is not None:  # noqa: ASYNC110
                await asyncio.sleep(0.01)
        await until_read(a.store, None)
