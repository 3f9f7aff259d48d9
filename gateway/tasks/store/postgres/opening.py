"""How a replica opens the PostgreSQL store: its pool connected, the schema brought up to
date, the database's cursor secret read, and its lease taken before it serves a task.

It runs once per process, before the store exists, and several replicas may run it at once
on one database (`schema.migrate` takes them in turn). Its end, the lease given up, is the
store's `close`.
"""

from __future__ import annotations

from collections.abc import Callable

from gateway.config import POOL_SIZE
from gateway.tasks.store.postgres.pool import Pool
from gateway.tasks.store.postgres.schema import cursor_secret, migrate
from gateway.tasks.store.postgres.store import PostgresTaskStore


async def open_postgres_store(
    url: str,
    replica: str,
    lease_seconds: float = 15.0,
    on_timing: Callable[[str, float], None] | None = None,
    pool_size: int = POOL_SIZE,
) -> PostgresTaskStore:
    """Connects to the database at `url` (the password from PGPASSWORD), brings its schema up
    to date and takes the lease of `replica`, this process's name among the replicas. Give a
    new name at each start: the live tasks of an earlier process of the same name would pass
    for this one's, and no replica would ever claim them.

    `on_timing(operation, seconds)` hears how long each read and each commit took;
    `pool_size` bounds the connections the store's pool opens.

    Raises: what asyncpg raises when the database cannot be reached or used (OSError,
    asyncpg.PostgresError, ...); RuntimeError if its schema is newer than this gateway knows.
    """
    db = await Pool.connect(url, replica, on_timing, pool_size)
    try:
        async with db.acquire() as conn:
            await migrate(conn)
            secret = await cursor_secret(conn)
        store = PostgresTaskStore(db, url, replica, lease_seconds, secret)
        await store.renew_lease()
    except BaseException:
        db.terminate()
        raise
    return store
