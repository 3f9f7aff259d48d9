"""The PostgreSQL database itself: its tables, how they change between versions, and the
statements shared with SQLite in its placeholders (`SQL`).

Several replicas may start together on one database: `migrate` takes a transaction-scoped
advisory lock before it looks at the schema version, so exactly one of them applies each
migration and the others find it done. Columns keep SQLite's shapes (times as `epoch_us`
integers, JSON as text), so both backends read back exactly the same values; only the
replicas' leases use the database's clock, so that no replica's clock ever decides whether
another one is dead. Wake-ups (`listener`) are sent by triggers, inside the very
transaction that changes a row, and only for changes someone waits for.
"""

from __future__ import annotations

import secrets
from typing import TYPE_CHECKING, TypeAlias

from asyncpg import Record

from gateway.tasks.history import HISTORY_KEPT
from gateway.tasks.store.sql import LIVE_SQL, Statements, dollar

if TYPE_CHECKING:
    from asyncpg.pool import PoolConnectionProxy

#: A pooled connection (only the stubs make its class generic).
Connection: TypeAlias = "PoolConnectionProxy[Record]"

#: The LISTEN/NOTIFY channel; each notification's payload is a task id.
CHANNEL = "mcp_gateway_tasks"
#: The channel of session records that changed or went; each payload is a session id.
SESSION_CHANNEL = "mcp_gateway_sessions"
#: The channel of deleted tasks (from schema 6; CHANNEL before); each payload is a task id.
DELETED_CHANNEL = "mcp_gateway_deleted"
#: The setting that names the replica on each of its pooled connections (from schema 8).
REPLICA_SETTING = "mcp_gateway.replica"

#: `pg_advisory_xact_lock(LOCKS, n)` keys: 0 for the schema, `OWNER_LOCK` for an owner's count
#: of live tasks (its key is the owner's hash).
LOCKS = 0x4D435047  # "MCPG"
_SCHEMA_LOCK = 0
OWNER_LOCK = 1

# The one function behind every trigger below: a row's task id, on the channel. Identical
# payloads within one transaction are folded into one by PostgreSQL.
_NOTIFY = f"""
    CREATE FUNCTION task_changed() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        IF TG_OP = 'DELETE' THEN
            PERFORM pg_notify('{CHANNEL}', OLD.task_id);
        ELSE
            PERFORM pg_notify('{CHANNEL}', NEW.task_id);
        END IF;
        RETURN NULL;
    END $$;
"""

#: Applied in order once each, each recorded in `schema_versions`. Append, never edit.
MIGRATIONS = [
    # Ids and keys sort bytewise (COLLATE "C"), as in SQLite, whatever the database's locale.
    # Wake-ups: a status or attempt moved (not a statusMessage alone: pollers read those), a
    # question answered or withdrawn, a task deleted at its expiry.
    f"""
    CREATE TABLE meta (key TEXT PRIMARY KEY, value BYTEA NOT NULL);
    CREATE TABLE replicas (replica TEXT PRIMARY KEY, lease_until TIMESTAMPTZ NOT NULL);
    CREATE TABLE tasks (
        task_id TEXT COLLATE "C" PRIMARY KEY,
        owner TEXT NOT NULL,
        route TEXT NOT NULL,
        tool TEXT NOT NULL,
        status TEXT NOT NULL
            CHECK (status IN ('working', 'input_required', 'completed', 'failed', 'cancelled')),
        status_message TEXT,
        created_at BIGINT NOT NULL,
        updated_at BIGINT NOT NULL,
        expires_at BIGINT,
        ttl_ms BIGINT,
        poll_interval_ms BIGINT NOT NULL,
        progress_token TEXT,
        generation TEXT NOT NULL,
        repeatable BOOLEAN NOT NULL,
        attempt INTEGER NOT NULL CHECK (attempt >= 1),
        runner TEXT NOT NULL
    );
    CREATE INDEX tasks_by_owner ON tasks (owner, created_at, task_id);
    CREATE INDEX tasks_by_expiry ON tasks (expires_at);
    CREATE INDEX tasks_live_by_owner ON tasks (owner) WHERE status IN ('working', 'input_required');
    CREATE INDEX tasks_live_by_runner ON tasks (runner, created_at, task_id)
        WHERE status IN ('working', 'input_required');
    CREATE TABLE outcomes (
        task_id TEXT COLLATE "C" PRIMARY KEY REFERENCES tasks ON DELETE CASCADE,
        kind TEXT NOT NULL,
        body TEXT NOT NULL
    );
    CREATE TABLE task_inputs (
        task_id TEXT COLLATE "C" NOT NULL REFERENCES tasks ON DELETE CASCADE,
        key TEXT COLLATE "C" NOT NULL,
        method TEXT NOT NULL,
        params TEXT NOT NULL,
        upstream_id TEXT NOT NULL,
        state TEXT NOT NULL CHECK (state IN ('pending', 'answered', 'withdrawn')),
        response TEXT,
        created_at BIGINT NOT NULL,
        settled_at BIGINT,
        PRIMARY KEY (task_id, key)
    );
    CREATE TABLE task_calls (
        task_id TEXT COLLATE "C" PRIMARY KEY REFERENCES tasks ON DELETE CASCADE,
        request TEXT,
        upstream_session_id TEXT,
        upstream_request_id TEXT
    );
    CREATE TABLE sessions (
        session_id TEXT PRIMARY KEY,
        route TEXT NOT NULL,
        principal TEXT,
        protocol_version TEXT NOT NULL,
        initialize TEXT NOT NULL,
        initialized TEXT,
        created_at BIGINT NOT NULL,
        last_seen BIGINT NOT NULL,
        upstream_session_id TEXT
    );
    CREATE INDEX sessions_by_last_seen ON sessions (last_seen);
    {_NOTIFY}
    CREATE TRIGGER task_moved AFTER UPDATE OF status, attempt ON tasks FOR EACH ROW
        WHEN (OLD.status <> NEW.status OR OLD.attempt <> NEW.attempt)
        EXECUTE FUNCTION task_changed();
    CREATE TRIGGER task_deleted AFTER DELETE ON tasks FOR EACH ROW
        EXECUTE FUNCTION task_changed();
    CREATE TRIGGER input_settled AFTER UPDATE OF state ON task_inputs FOR EACH ROW
        WHEN (OLD.state <> NEW.state) EXECUTE FUNCTION task_changed();
    """,
    # A session's upstream speaks a protocol version of its own, which each request names.
    """
    ALTER TABLE sessions ADD COLUMN upstream_protocol_version TEXT;
    """,
    # A caller's sessions on a route, counted at each new session against its limit.
    """
    CREATE INDEX sessions_by_caller ON sessions (route, principal, last_seen);
    """,
    # Tasks keep their latest status changes and progress for operators (`appending`). A task
    # made before kept none: its count of earlier changes is unknown (NULL), and stays so.
    """
    ALTER TABLE tasks ADD COLUMN history TEXT NOT NULL DEFAULT '[]',
        ADD COLUMN history_dropped INTEGER,
        ADD COLUMN progress TEXT,
        ADD COLUMN progress_at BIGINT;
    """,
    # Replicas keep the session records they use (`kept`): a record rewritten or
    # deleted on any replica is news to them all. A prune's touch of `last_seen` is not.
    f"""
    CREATE FUNCTION session_changed() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        PERFORM pg_notify('{SESSION_CHANNEL}', OLD.session_id);
        RETURN NULL;
    END $$;
    CREATE TRIGGER session_ended AFTER DELETE ON sessions FOR EACH ROW
        EXECUTE FUNCTION session_changed();
    CREATE TRIGGER session_rewritten AFTER UPDATE OF route, principal, protocol_version,
        initialize, initialized, upstream_session_id, upstream_protocol_version ON sessions
        FOR EACH ROW EXECUTE FUNCTION session_changed();
    """,
    # A task's deletion has a channel of its own: a replica keeps the tasks it has just
    # finished (`kept`), which change no more until deleted, and its own terminal write's
    # wake-up (on CHANNEL) must not drop them.
    f"""
    CREATE FUNCTION task_gone() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        PERFORM pg_notify('{DELETED_CHANNEL}', OLD.task_id);
        RETURN NULL;
    END $$;
    DROP TRIGGER task_deleted ON tasks;
    CREATE TRIGGER task_deleted AFTER DELETE ON tasks FOR EACH ROW
        EXECUTE FUNCTION task_gone();
    """,
    # A creation held to its owner's cap in one statement (`tasks.inserting`): the lock of the
    # owner's creations, then the count of their live tasks. VOLATILE, so the count takes its
    # snapshot after the lock, and sees the creation that held it before; the lock is held to
    # the statement's commit. (As five statements, BEGIN, lock, count, insert and COMMIT, it
    # cost five round trips; both forms take the same lock, so replicas of either agree.)
    f"""
    CREATE FUNCTION live_below(lock_key INTEGER, task_owner TEXT, cap BIGINT)
        RETURNS BOOLEAN LANGUAGE plpgsql VOLATILE AS $$
    BEGIN
        PERFORM pg_advisory_xact_lock(lock_key, hashtext(task_owner));
        RETURN (SELECT count(*) FROM (SELECT 1 FROM tasks WHERE owner = task_owner
            AND {LIVE_SQL} LIMIT cap) AS live) < cap;
    END $$;
    """,
    # A task's wake-up is sent only where it is news: every replica's listener reads every
    # notification, and with three replicas that cost a fifth of a lifecycle's gateway CPU
    # and a third of PostgreSQL's. A write notifies when its writer (`REPLICA_SETTING` on a
    # replica's connections; none for an operator's SQL) is not the task's runner, before or
    # after (a cancel or an answer from elsewhere, a takeover); when a replica that does not
    # run the task waits for it (`watched`, set by `heed_task`, which a write serialises
    # with on the row's lock); or while a replica of an older gateway, which waits without
    # marking, holds a lease (`marks_waits` false).
    f"""
    ALTER TABLE tasks ADD COLUMN watched BOOLEAN NOT NULL DEFAULT false;
    ALTER TABLE replicas ADD COLUMN marks_waits BOOLEAN NOT NULL DEFAULT false;
    -- (PL/pgSQL: a function in SQL called from a trigger is planned again at every call.)
    CREATE FUNCTION news_elsewhere(was_run_by TEXT, is_run_by TEXT, watched BOOLEAN)
        RETURNS BOOLEAN LANGUAGE plpgsql STABLE AS $$
    DECLARE
        writer TEXT := coalesce(current_setting('{REPLICA_SETTING}', true), '');
    BEGIN
        RETURN watched OR writer <> was_run_by OR writer <> is_run_by
            OR EXISTS (SELECT 1 FROM replicas WHERE NOT marks_waits AND lease_until > now());
    END $$;
    CREATE FUNCTION task_moved_news() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        IF news_elsewhere(OLD.runner, NEW.runner, NEW.watched) THEN
            PERFORM pg_notify('{CHANNEL}', NEW.task_id);
        END IF;
        RETURN NULL;
    END $$;
    CREATE FUNCTION input_settled_news() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        IF (SELECT news_elsewhere(runner, runner, watched) FROM tasks
                WHERE task_id = NEW.task_id) IS NOT FALSE THEN
            PERFORM pg_notify('{CHANNEL}', NEW.task_id);
        END IF;
        RETURN NULL;
    END $$;
    DROP TRIGGER task_moved ON tasks;
    CREATE TRIGGER task_moved AFTER UPDATE OF status, attempt ON tasks FOR EACH ROW
        WHEN (OLD.status <> NEW.status OR OLD.attempt <> NEW.attempt)
        EXECUTE FUNCTION task_moved_news();
    DROP TRIGGER input_settled ON task_inputs;
    CREATE TRIGGER input_settled AFTER UPDATE OF state ON task_inputs FOR EACH ROW
        WHEN (OLD.state <> NEW.state) EXECUTE FUNCTION input_settled_news();
    DROP FUNCTION task_changed();
    CREATE FUNCTION heed_task(id TEXT) RETURNS SETOF tasks LANGUAGE plpgsql AS $$
    BEGIN
        -- Marked already: every later write is news, and the row is written no more (a
        -- client asking again and again for a task's result costs reads, not writes).
        RETURN QUERY SELECT * FROM tasks WHERE task_id = id AND watched;
        IF NOT FOUND THEN
            -- A mark lost with a crash of the server costs a wait its backstop, nothing
            -- more: it is not worth a flush to disk.
            SET LOCAL synchronous_commit = off;
            RETURN QUERY UPDATE tasks SET watched = true WHERE task_id = id RETURNING *;
        END IF;
    END $$;
    """,
]

#: The statements both backends share, in PostgreSQL's placeholders.
SQL = Statements(dollar)


def appending(moved: str, entry: str) -> str:
    """The SET clause of a write that appends a history entry (`writes.change`, in parameter
    `entry`) to each row where the condition `moved` holds, in the same statement as the move:
    the oldest entry is dropped, and counted, beyond `HISTORY_KEPT`. (SET reads the row as it
    was before the statement.)"""
    full = f"jsonb_array_length(history::jsonb) >= {HISTORY_KEPT}"
    kept = f"CASE WHEN {full} THEN history::jsonb - 0 ELSE history::jsonb END"
    return (
        f"history = CASE WHEN {moved} THEN ({kept} || {entry}::jsonb)::text ELSE history END,"
        f" history_dropped = history_dropped + ({moved} AND {full})::int"
    )


async def migrate(db: Connection) -> None:
    """Brings the schema up to date in one transaction, whoever else is starting meanwhile.

    Raises: RuntimeError if the database's schema is newer than this gateway knows.
    """
    async with db.transaction():
        await db.execute("SELECT pg_advisory_xact_lock($1, $2)", LOCKS, _SCHEMA_LOCK)
        await db.execute("CREATE TABLE IF NOT EXISTS schema_versions (version INTEGER PRIMARY KEY)")
        version: int = await db.fetchval("SELECT coalesce(max(version), 0) FROM schema_versions")
        if version > len(MIGRATIONS):
            raise RuntimeError(f"database schema {version} is newer than this gateway knows")
        for number, script in enumerate(MIGRATIONS[version:], start=version + 1):
            await db.execute(script)
            await db.execute("INSERT INTO schema_versions VALUES ($1)", number)


async def cursor_secret(db: Connection) -> bytes:
    """The database's list-cursor secret, made by whichever replica asks first."""
    made = "INSERT INTO meta VALUES ('cursor_secret', $1) ON CONFLICT (key) DO NOTHING"
    await db.execute(made, secrets.token_bytes(32))
    secret: bytes = await db.fetchval("SELECT value FROM meta WHERE key = 'cursor_secret'")
    return secret
