"""The PostgreSQL backend: the database several replicas share (DESIGN.md, "Several
replicas"), each live task run by one of them and its runner's writes fenced on it.

    store.py      `PostgresTaskStore`: the writes, each one transaction, and the reads
    opening.py    a replica's start on the database: schema brought up to date, lease taken
    pool.py       its connections: the pool, transactions, an unreachable server as 503
    schema.py     the database: migrations under an advisory lock, wake-up triggers
    tasks.py, inputs.py, attempts.py, sessions.py
                  the writes of each kind of row, each of a runner's fenced on `runner`;
                  leases and takeovers (`claim_orphans`) in attempts
    listener.py   the wake-ups: LISTEN on a connection of its own, reconnecting
    kept.py       the session records and finished tasks a replica keeps, dropped by news
"""

from gateway.tasks.store.postgres.opening import open_postgres_store
from gateway.tasks.store.postgres.store import PostgresTaskStore

__all__ = ["PostgresTaskStore", "open_postgres_store"]
