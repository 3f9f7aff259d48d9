"""The store the settings name: the SQLite file, or the PostgreSQL database replicas share."""

from __future__ import annotations

import os
import secrets
import socket
import sqlite3
from collections.abc import Callable
from urllib.parse import urlsplit

import asyncpg

from gateway.config import StoreConfig
from gateway.tasks.store.base import TaskStore
from gateway.tasks.store.postgres import open_postgres_store
from gateway.tasks.store.sqlite import open_store


class StoreUnavailable(Exception):
    """The configured database cannot be reached or used; the message says which and why."""


def replica_name() -> str:
    """This process among the replicas: readable in the database, unique per start."""
    return f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(3)}"


async def open_configured(
    config: StoreConfig, on_timing: Callable[[str, float], None] | None = None
) -> TaskStore:
    """Raises: StoreInUse (SQLite: another process has the file), StoreUnavailable (the file
    or the database cannot be used)."""
    if config.backend == "sqlite":
        try:
            return await open_store(config.path, on_timing=on_timing)
        except (OSError, sqlite3.Error) as exc:
            # A file that is no database, a path under a file, /dev/zero: the operator's
            # to fix, in one line, as a port in use is.
            why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
            raise StoreUnavailable(
                f"store.path: cannot use {config.path} as the SQLite store: {why}"
            ) from None
    assert config.url is not None  # the config refuses postgres without one
    where = urlsplit(config.url)
    database = f"{where.hostname}:{where.port or 5432}{where.path}"
    try:
        return await open_postgres_store(
            config.url, replica_name(), config.lease_seconds, on_timing, config.pool_size
        )
    except (OSError, TimeoutError, asyncpg.PostgresError, asyncpg.InterfaceError) as exc:
        # Never the URL itself in the message: only where, and what the server said.
        raise StoreUnavailable(
            f"store.url: cannot use the PostgreSQL database at {database}: "
            f"{type(exc).__name__}: {exc} (its password is read from PGPASSWORD)"
        ) from None
