"""The PostgreSQL store as several replicas share it: a schema migrated once however many start
together, leases and takeovers, fenced writes, wake-ups over LISTEN/NOTIFY; on a real
PostgreSQL server, each test with a database of its own. (Everything one store does alone is
tested on every backend by test_store.py, test_store_inputs.py and test_store_attempts.py.)"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import timedelta
from typing import Any

import asyncpg
import pytest

from gateway.tasks.models import AttemptCall, SessionRecord, TaskStatus
from gateway.tasks.store.postgres import PostgresTaskStore, open_postgres_store, tasks
from gateway.tasks.store.postgres.schema import LOCKS, MIGRATIONS, OWNER_LOCK, SQL

from . import postgres
from .test_store_attempts import INPUT, RESULT, SECOND, T0, WORKING, ask, make_task

COMPLETED, CANCELLED = TaskStatus.COMPLETED, TaskStatus.CANCELLED


async def query(url: str, sql: str, *args: Any) -> list[asyncpg.Record]:
    """`sql` run past the stores, as an operator (or a dead replica's clock) would."""
    conn = await asyncpg.connect(url)
    try:
        return await conn.fetch(sql, *args)
    finally:
        await conn.close()


async def expire(url: str, replica: str, ago: str = "1 second") -> None:
    """The replica's lease ran out `ago`, as if it had stopped renewing it then."""
    sql = f"UPDATE replicas SET lease_until = now() - interval '{ago}' WHERE replica = $1"
    await query(url, sql, replica)


@asynccontextmanager
async def replicas(url: str, *names: str) -> AsyncIterator[list[PostgresTaskStore]]:
    stores = [await open_postgres_store(url, name) for name in names]
    try:
        yield stores
    finally:
        for store in stores:
            await store.close()


async def schema_of(url: str, version: int, *statements: str) -> None:
    """The database at `url` as a gateway of schema `version` left it, then `statements` run
    there (rows that gateway wrote)."""
    conn = await asyncpg.connect(url)
    try:
        await conn.execute("CREATE TABLE schema_versions (version INTEGER PRIMARY KEY)")
        for number, script in enumerate(MIGRATIONS[:version], start=1):
            await conn.execute(script)
            await conn.execute("INSERT INTO schema_versions VALUES ($1)", number)
        for statement in statements:
            await conn.execute(statement)
    finally:
        await conn.close()


@asynccontextmanager
async def b_listening(
    url: str,
) -> AsyncIterator[tuple[PostgresTaskStore, PostgresTaskStore, asyncio.Queue[str | None]]]:
    """Replicas a and b, and the news b's listener hears, in order."""
    async with replicas(url, "a", "b") as (a, b):
        heard: asyncio.Queue[str | None] = asyncio.Queue()
        await b.watch(heard.put_nowait)
        yield a, b, heard


async def test_replicas_starting_together_migrate_the_schema_exactly_once(pg_url: str) -> None:
    stores = await asyncio.gather(*(open_postgres_store(pg_url, f"r{n}") for n in range(3)))

    versions = await query(pg_url, "SELECT version FROM schema_versions ORDER BY version")
    assert [row["version"] for row in versions] == list(range(1, len(MIGRATIONS) + 1))
    await stores[0].create_task(make_task("t"))
    assert [await store.get_task("t") for store in stores] == [make_task("t")] * 3
    for store in stores:
        await store.close()


async def test_a_schema_newer_than_the_code_is_refused(pg_url: str) -> None:
    await (await open_postgres_store(pg_url, "old")).close()
    await query(pg_url, "INSERT INTO schema_versions VALUES (99)")

    with pytest.raises(RuntimeError):
        await open_postgres_store(pg_url, "new")


async def test_a_lease_runs_on_the_database_clock_and_is_renewed_in_place(pg_url: str) -> None:
    store = await open_postgres_store(pg_url, "a", lease_seconds=30)
    sql = "SELECT extract(epoch FROM lease_until - now()) AS left FROM replicas"
    await expire(pg_url, "a")

    await store.renew_lease()

    (row,) = await query(pg_url, sql)
    assert 29 < row["left"] <= 30
    await store.close()
    assert await query(pg_url, sql) == []  # closing gives the lease back


async def test_each_lease_round_counts_the_replicas_whose_lease_runs(pg_url: str) -> None:
    """What each replica's share of the request rates follows: itself, and the others whose
    lease has not run out by the database's clock; a replica that stopped counts no more."""
    async with replicas(pg_url, "a", "b", "c") as (a, b, c):
        assert [await s.renew_lease() for s in (a, b, c)] == [3, 3, 3]
        await expire(pg_url, "c")  # died: its lease ran out
        assert await a.renew_lease() == 2
        assert await c.renew_lease() == 3  # back before anyone claimed anything: live again
        await b.close()  # stopped: its lease given back
        assert await a.renew_lease() == 2
    alone = await open_postgres_store(pg_url, "d")
    assert await alone.renew_lease() == 1
    await alone.close()


async def test_a_callers_sessions_are_read_least_recently_seen_first(pg_url: str) -> None:
    def record(session_id: str, principal: str | None, route: str = "files") -> SessionRecord:
        return SessionRecord(
            session_id=session_id,
            route=route,
            principal=principal,
            protocol_version="2025-11-25",
            initialize={"method": "initialize"},
            created_at=T0,
        )

    async with replicas(pg_url, "a", "b") as (a, b):
        for store, session_id in [(a, "s1"), (b, "s2"), (a, "s3")]:
            await store.save_session(record(session_id, "alice"))
        await a.save_session(record("other-route", "alice", route="mail"))
        await a.save_session(record("other-caller", "bob"))
        await a.save_session(record("anonymous", None))
        await b.prune_sessions(["s1"], T0 + SECOND, T0 - SECOND)  # s1 seen since

        assert await b.caller_sessions("files", "alice", 10) == ["s2", "s3", "s1"]
        assert await a.caller_sessions("files", "alice", 2) == ["s2", "s3"]
        assert await a.caller_sessions("files", "carol", 10) == []


async def test_a_replica_whose_lease_ran_out_has_its_tasks_claimed_and_its_writes_refused(
    pg_url: str,
) -> None:
    async with replicas(pg_url, "a", "b") as (a, b):
        await a.create_task(make_task("t"), request={"method": "tools/call"})
        await a.add_input(ask("asked-by-a"))
        await a.note_upstream_call("t", "upstream-session", 1)
        await expire(pg_url, "a")

        assert await b.claim_orphans() == [make_task("t")]
        await b.add_input(ask("asked-by-b"))

        # Every write of a runner's is refused to the replica taken for dead...
        assert await a.update_task("t", INPUT, "which file?", T0) is None
        assert await a.note_task("t", "50%", T0) is None
        assert await a.add_input(ask("late")) is False
        assert await a.withdraw_inputs("t", T0) == []
        await a.note_upstream_call("t", "upstream-session", 2)
        assert await a.begin_attempt("t", 2, "again", T0) is None
        assert await a.finish_task("t", COMPLETED, None, RESULT, T0) is None
        assert await a.fail_running(["t"], "gateway shut down", T0) == []
        await a.renew_lease()  # back, too late: the tasks stay the survivor's
        assert await a.claim_orphans() == []

        # ...and nothing of them landed: the task is the survivor's to run again.
        assert await b.get_task("t") == make_task("t")
        assert [r.key for r in await b.pending_inputs("t")] == ["asked-by-a", "asked-by-b"]
        upstream = AttemptCall(task_id="t", session_id="upstream-session", request_id=1)
        assert await b.get_upstream_call("t") == upstream
        begun = await b.begin_attempt("t", 2, "restarted on b", T0 + SECOND)
        assert begun is not None and begun.attempt == 2
        done = await b.finish_task("t", COMPLETED, None, RESULT, T0 + 2 * SECOND)
        assert done is not None and done.status == COMPLETED


async def test_replicas_claiming_at_once_claim_each_orphan_exactly_once(pg_url: str) -> None:
    ids = [f"t{n:03}" for n in range(200)]
    dead = await open_postgres_store(pg_url, "dead")
    await asyncio.gather(*(dead.create_task(make_task(i)) for i in ids))
    await dead.close()

    async with replicas(pg_url, "b", "c") as (b, c):
        # A claim under way elsewhere holds the first half: those are skipped, not waited for.
        claiming = await asyncpg.connect(pg_url)
        async with claiming.transaction():
            await claiming.execute("SELECT 1 FROM tasks WHERE task_id < 't100' FOR UPDATE")
            async with asyncio.timeout(5):
                second_half = await b.claim_orphans()
        await claiming.close()
        by_b, by_c = await asyncio.gather(b.claim_orphans(), c.claim_orphans())

        assert [t.task_id for t in second_half] == ids[100:]
        assert sorted(t.task_id for t in by_b + by_c) == ids[:100]
        assert await b.claim_orphans() == await c.claim_orphans() == []
    runners = await query(pg_url, "SELECT runner, count(*) FROM tasks GROUP BY runner")
    claimed = {"b": len(second_half + by_b), "c": len(by_c)}
    assert {row["runner"]: row["count"] for row in runners} == {
        name: count for name, count in claimed.items() if count
    }


async def test_a_live_replicas_tasks_are_never_claimed_nor_failed_by_another(
    pg_url: str,
) -> None:
    async with replicas(pg_url, "a", "b") as (a, b):
        await a.create_task(make_task("a's"))
        await b.create_task(make_task("b's"))

        assert await b.claim_orphans() == []
        assert await a.claim_orphans() == []  # nor are its own, ever
        failed = await b.fail_running(["a's", "b's"], "gateway restarted", T0)

        assert [task.task_id for task in failed] == ["b's"]
        moved = await a.update_task("a's", INPUT, "which file?", T0 + SECOND)
        assert moved is not None and moved.status == INPUT


async def test_a_cancel_lands_on_any_replica_and_the_runners_later_finish_is_refused(
    pg_url: str,
) -> None:
    async with replicas(pg_url, "a", "b") as (a, b):
        await a.create_task(make_task("t"))
        await a.create_task(make_task("other"))
        await a.add_input(ask("k", task_id="other"))

        cancelled = await b.finish_task("t", CANCELLED, "cancelled by client", None, T0)
        late = await a.finish_task("t", COMPLETED, None, RESULT, T0 + SECOND)

        assert cancelled is not None and cancelled.status == CANCELLED
        assert late is None and await a.get_outcome("t") is None
        # Only a cancel: the other writes of a runner's stay the runner's.
        assert await b.finish_task("other", COMPLETED, None, RESULT, T0) is None
        assert await b.answer_input("other", "k", {"action": "accept"}, T0) == ask("k", "other")


async def test_active_task_caps_hold_across_replicas_creating_at_once(pg_url: str) -> None:
    async with replicas(pg_url, "a", "b") as (a, b):
        creating = [(a, b)[n % 2].create_task(make_task(f"t{n}"), max_active=3) for n in range(8)]

        created = await asyncio.gather(*creating)

        assert created.count(True) == 3


async def test_active_task_caps_hold_whichever_form_each_creation_takes(pg_url: str) -> None:
    """A creation with no request to keep is one statement (the lock and the count in the
    function `live_below`), one with a request a transaction; a replica of the code before
    schema 7 takes the same lock in five statements. Each counts the others' tasks, and
    racing, they never pass the cap."""
    cap = 5

    async def older(conn: asyncpg.Connection[Any], task_id: str) -> bool:
        async with conn.transaction():
            lock = "SELECT pg_advisory_xact_lock($1, hashtext($2))"
            await conn.execute(lock, LOCKS + OWNER_LOCK, "alice")
            if await conn.fetchval(SQL.count_live, "alice", cap) >= cap:
                return False
            sql, params = tasks.inserting(make_task(task_id), "c")
            await conn.execute(sql, *params)
            return True

    # Connected before the race, so that the older replica's creations race from its start.
    olds = [await asyncpg.connect(pg_url) for _ in range(4)]
    try:
        async with replicas(pg_url, "a", "b") as (a, b):
            assert await a.create_task(make_task("one", repeatable=False), cap)
            assert await b.create_task(make_task("kept"), cap, {"method": "x"})
            assert await older(olds[0], "old")
            creating = [
                *(a.create_task(make_task(f"one{n}", repeatable=False), cap) for n in range(3)),
                *(b.create_task(make_task(f"kept{n}"), cap, {"method": "x"}) for n in range(3)),
                *(older(conn, f"old{n}") for n, conn in enumerate(olds[1:])),
            ]

            created = await asyncio.gather(*creating)

            assert created.count(True) == cap - 3
            live = await query(pg_url, "SELECT count(*) AS n FROM tasks WHERE owner = 'alice'")
            assert live[0]["n"] == cap
            # Bob's count is his own; a task of Alice's cancelled (on any replica, whichever
            # ran it) makes room for one more.
            assert await a.create_task(make_task("bob1", owner="bob", repeatable=False), cap)
            cancelled = TaskStatus.CANCELLED
            assert await a.finish_task("old", cancelled, None, None, T0) is not None
            assert await a.create_task(make_task("again", repeatable=False), cap)
            assert not await a.create_task(make_task("over", repeatable=False), cap)
            assert not await older(olds[0], "over-old")
    finally:
        for conn in olds:
            await conn.close()


async def test_a_watching_replica_hears_the_writes_waited_for_and_not_progress(
    pg_url: str,
) -> None:
    async with b_listening(pg_url) as (a, b, heard):
        loud = ["finished", "moved", "answered", "withdrawn", "begun", "failed"]
        for task_id in ["quiet", *loud]:
            await a.create_task(make_task(task_id))
            # b waits for each of them; the sentinel below is news to a, its runner.
            assert await b.heed_task(task_id) == make_task(task_id)
        await a.note_task("quiet", "50%", T0)
        await a.update_task("quiet", WORKING, "60%", T0)
        await a.add_input(ask("k", "answered"))
        await a.add_input(ask("k", "withdrawn"))

        await a.finish_task("finished", COMPLETED, None, RESULT, T0)
        await a.update_task("moved", INPUT, "which file?", T0)
        await b.answer_input("answered", "k", {"action": "accept"}, T0)
        await a.withdraw_inputs("withdrawn", T0)
        await a.begin_attempt("begun", 2, "again", T0)
        await a.fail_running(["failed"], "gateway shut down", T0)
        live = ["quiet", "moved", "answered", "withdrawn", "begun"]
        interrupted = await a.fail_running(live, "gateway restarted", T0)
        await a.create_task(make_task("sentinel"))
        await b.finish_task("sentinel", CANCELLED, None, None, T0)

        # In commit order, each once: the writes without a wake-up send none.
        async with asyncio.timeout(1):
            assert [await heard.get() for _ in loud] == loud
            rest = {await heard.get() for _ in interrupted}
            assert rest == {task.task_id for task in interrupted} and "quiet" in rest
            assert await heard.get() == "sentinel"


async def test_a_runners_own_writes_are_news_only_where_they_are_waited_for(
    pg_url: str,
) -> None:
    # Every replica's listener reads every notification sent: one per write to every replica
    # cost a fifth of a lifecycle's gateway CPU with three replicas (docs/performance.md).
    async with b_listening(pg_url) as (a, b, heard):
        for task_id in ("unwatched", "watched", "cancelled", "operator", "older", "after"):
            await a.create_task(make_task(task_id))
        await b.heed_task("watched")
        assert await b.heed_task("nothing") is None
        # Marked once: asking again (a client's tasks/result after tasks/result) writes nothing.
        version = "SELECT xmin::text FROM tasks WHERE task_id = 'watched'"
        before = await query(pg_url, version)
        assert await b.heed_task("watched") == make_task("watched")
        assert await query(pg_url, version) == before

        await a.finish_task("unwatched", COMPLETED, None, RESULT, T0)
        await a.finish_task("watched", COMPLETED, None, RESULT, T0)
        await b.finish_task("cancelled", CANCELLED, None, None, T0)  # a's task, b's write
        # An operator's SQL names no replica: news to all.
        await query(pg_url, "UPDATE tasks SET status = 'failed' WHERE task_id = 'operator'")
        # A replica of an older gateway waits without marking: while its lease runs, every
        # write is news; once it has lapsed, no more.
        older = "INSERT INTO replicas (replica, lease_until) VALUES ('old', now() + interval '1 h')"
        await query(pg_url, older)
        await a.finish_task("older", COMPLETED, None, RESULT, T0)
        await expire(pg_url, "old")
        await a.finish_task("after", COMPLETED, None, RESULT, T0)
        await a.create_task(make_task("sentinel"))
        await b.finish_task("sentinel", CANCELLED, None, None, T0)

        async with asyncio.timeout(1):
            heard_ids = [await heard.get() for _ in range(5)]
        assert heard_ids == ["watched", "cancelled", "operator", "older", "sentinel"]


async def test_a_mark_and_a_write_to_the_task_take_turns_so_no_wake_up_is_lost(
    pg_url: str,
) -> None:
    async with b_listening(pg_url) as (a, b, heard):
        await a.create_task(make_task("t"))
        await a.create_task(make_task("u"))
        # The runner's terminal write holds the row when b marks it: the mark waits for the
        # write, and returns the task as it left it, though no wake-up was sent.
        runner = await asyncpg.connect(pg_url, server_settings={"mcp_gateway.replica": "a"})
        try:
            async with runner.transaction():
                await runner.execute("UPDATE tasks SET status = 'completed' WHERE task_id = 't'")
                marking = asyncio.ensure_future(b.heed_task("t"))
                await asyncio.sleep(0.2)
                assert not marking.done()
            assert (await marking).status is COMPLETED  # type: ignore[union-attr]
            # Marked first: the runner's write then waits for the mark, and is news to b.
            assert (await b.heed_task("u")).status is WORKING  # type: ignore[union-attr]
            await runner.execute("UPDATE tasks SET status = 'completed' WHERE task_id = 'u'")
        finally:
            await runner.close()
        async with asyncio.timeout(1):
            assert await heard.get() == "u"
        assert heard.empty()


async def test_a_schema_7_database_with_an_older_replica_live_is_upgraded_and_all_is_news(
    pg_url: str,
) -> None:
    # A rolling upgrade: a replica of the code before schema 8 runs a task and holds a lease
    # when the first new one migrates; it waits without marking, so every write is news.
    await schema_of(pg_url, 7, "INSERT INTO replicas VALUES ('old', now() + interval '1 hour')")
    sql, params = tasks.inserting(make_task("theirs"), "old")
    await query(pg_url, sql, *params)

    async with b_listening(pg_url) as (a, b, heard):
        assert await a.get_task("theirs") == make_task("theirs")
        await a.create_task(make_task("mine"))
        await a.finish_task("mine", COMPLETED, None, RESULT, T0)
        async with asyncio.timeout(1):
            assert await heard.get() == "mine"
        await expire(pg_url, "old")  # replaced: a's own writes are its own business again
        await a.create_task(make_task("later"))
        await a.finish_task("later", COMPLETED, None, RESULT, T0)
        await b.finish_task("theirs", CANCELLED, None, None, T0)  # news for its runner
        async with asyncio.timeout(1):
            assert await heard.get() == "theirs"
        assert heard.empty()


async def test_the_listener_reconnects_after_losing_its_connection_and_asks_for_a_rescan(
    pg_url: str,
) -> None:
    async with b_listening(pg_url) as (a, b, heard):
        await a.create_task(make_task("t"))
        listener = "SELECT pid FROM pg_stat_activity WHERE application_name = $1"
        (before,) = await query(pg_url, listener, "mcp-task-gateway b listener")

        await query(pg_url, "SELECT pg_terminate_backend($1)", before["pid"])

        async with asyncio.timeout(5):
            assert await heard.get() is None
        await b.heed_task("t")
        await a.finish_task("t", COMPLETED, None, RESULT, T0)
        async with asyncio.timeout(1):
            assert await heard.get() == "t"
        (after,) = await query(pg_url, listener, "mcp-task-gateway b listener")
        assert after["pid"] != before["pid"]


async def test_expired_tasks_deleted_by_any_replica_wake_their_waiters(pg_url: str) -> None:
    async with replicas(pg_url, "a", "b") as (a, b):
        heard: asyncio.Queue[str | None] = asyncio.Queue()
        await a.watch(heard.put_nowait)
        await a.create_task(make_task("t"))

        assert await b.delete_expired(T0 + timedelta(minutes=1)) == ["t"]

        async with asyncio.timeout(1):
            assert await heard.get() == "t"


async def test_replicas_share_the_cursor_secret_and_each_database_has_its_own(
    pg_url: str, postgres_server: str
) -> None:
    other_url = await postgres.create_database(postgres_server)
    try:
        async with replicas(pg_url, "a", "b") as (a, b), replicas(other_url, "c") as (c,):
            secret = await a.secret()

            assert len(secret) == 32 and await b.secret() == secret != await c.secret()
    finally:
        await postgres.drop_database(postgres_server, other_url)


async def test_a_session_saved_on_one_replica_is_read_on_another_with_its_upstream_session(
    pg_url: str,
) -> None:
    record = SessionRecord(
        session_id="s",
        route="files",
        protocol_version="2025-11-25",
        initialize={"method": "initialize"},
        created_at=T0,
        upstream_session_id="upstream-1",
    )
    async with replicas(pg_url, "a", "b") as (a, b):
        await a.save_session(record)

        assert await b.get_session("s") == record


async def test_replicas_long_dead_that_run_nothing_are_forgotten(pg_url: str) -> None:
    async with replicas(pg_url, "live", "recently-dead", "long-dead", "claimer") as stores:
        await stores[1].create_task(make_task("t"))
        await expire(pg_url, "recently-dead")
        await expire(pg_url, "long-dead", "2 hours")

        assert await stores[3].claim_orphans() == [make_task("t")]

        rows = await query(pg_url, "SELECT replica FROM replicas ORDER BY replica")
        assert [row["replica"] for row in rows] == ["claimer", "live", "recently-dead"]


async def test_commits_are_timed_and_a_health_check_writes(pg_url: str) -> None:
    timings: list[str] = []
    store = await open_postgres_store(pg_url, "a", on_timing=lambda op, _: timings.append(op))
    before = store.last_commit

    await store.check_writable()
    await store.get_task("t")

    assert timings == ["commit", "commit", "read"]  # the lease taken on opening, then these
    assert store.last_commit > before > 0
    await store.close()


async def test_a_replica_opens_no_more_connections_than_its_pool_size(pg_url: str) -> None:
    """`store.pool_size`: the connections one replica's reads and writes may hold at once (its
    listener apart). Under more concurrent reads than that, the others wait their turn."""
    mine = "SELECT count(*) FROM pg_stat_activity WHERE application_name = $1"
    for size in (2, 6):
        store = await open_postgres_store(pg_url, f"pool{size}", pool_size=size)
        try:
            await store.create_task(make_task(f"t{size}"))
            found = await asyncio.gather(*(store.get_task(f"t{size}") for _ in range(24)))
            assert found == [make_task(f"t{size}")] * 24
            ((opened,),) = await query(pg_url, mine, f"mcp-task-gateway pool{size}")
            assert opened == size
        finally:
            await store.close()


async def test_reads_and_writes_take_the_pools_connections_first_come_first_served(
    pg_url: str,
) -> None:
    """Callers that each read again the moment a read ends (clients polling) take turns at
    the connections. asyncpg's own queue gives a returned connection to whoever asks next in
    that turn of the loop, ahead of the waiter it woke, which then queues again at the back:
    at c=192, some reads and writes waited seconds while others went round and round
    (docs/performance.md, "The third part")."""
    store = await open_postgres_store(pg_url, "fair", pool_size=2)
    try:
        await store.create_task(make_task("t"))
        callers, rounds = 40, 5
        reads = 0
        first_done_after: list[int] = []

        async def poll() -> None:
            nonlocal reads
            for _ in range(rounds):
                await store.get_task("t")
                reads += 1
            first_done_after.append(reads)

        await asyncio.gather(*(poll() for _ in range(callers)))
        # Taking turns, nobody makes its last read before the others have made all but theirs
        # (less what the other connection may have under way).
        assert first_done_after[0] >= callers * (rounds - 1) - 2, first_done_after[:5]
    finally:
        await store.close()


async def test_the_lease_is_renewed_ahead_of_the_reads_queued_for_a_connection(
    pg_url: str,
) -> None:
    """A replica under load has a queue of reads and writes waiting for the pool; its lease's
    renewal must not wait behind them, or the lease lapses and the other replicas fail this
    one's running tasks (they did, in the thousand-task test with a keyed caller)."""
    store = await open_postgres_store(pg_url, "ahead", pool_size=2)
    try:
        await store.create_task(make_task("t"))
        done = 0

        async def read() -> None:
            nonlocal done
            await store.get_task("t")
            done += 1

        queued = [asyncio.ensure_future(read()) for _ in range(200)]
        await asyncio.sleep(0)  # every read has asked for its turn
        assert await store.renew_lease() == 1
        assert done < 100, done  # behind the queue, it came after all 200
        await asyncio.gather(*queued)
    finally:
        await store.close()
