"""Where tasks, their outcomes and sessions are kept: the durable end of every flow.

RunAsTask: the runner creates the task here before the client hears of it, and writes its
one terminal status and outcome here when the upstream call ends. Local (tasks/*): the task
APIs answer from here alone, never from the runner's memory, so answers survive a restart
(and, with a shared backend, reach any replica). Sessions are kept here too, so a client
that keeps its session id never notices a restart.

    base.py               `TaskStore`, the interface: async methods that speak `tasks.models`
    sqlite.py             the SQLite backend (the default, one process): task and outcome queries
    sqlite_writer.py      its single writer: group commit, each write durable on return
    sqlite_schema.py      its file: the one-process lock, connections, migrations
    sqlite_inputs.py, sqlite_attempts.py, sqlite_sessions.py
                          its input-request, attempt and session rows
    postgres.py           the PostgreSQL backend, shared by replicas (DESIGN.md "Several
                          replicas"): its reads and transactions on a pool of connections
    postgres_tasks.py     its task and outcome writes, each of a runner's fenced on `runner`
    postgres_inputs.py, postgres_attempts.py, postgres_sessions.py
                          as SQLite's; leases and takeovers (`claim_orphans`) in attempts
    postgres_schema.py    its database: migrations under an advisory lock, wake-up triggers
    postgres_listener.py  the wake-ups: LISTEN on a connection of its own, reconnecting
    filters.py            the WHERE clauses of an operator's choice of tasks and sessions,
                          in either backend's placeholders

Callers import only what this package exports, and never learn which backend they have.
"""

from gateway.tasks.store.base import TaskStore
from gateway.tasks.store.postgres import open_postgres_store
from gateway.tasks.store.sqlite import open_store
from gateway.tasks.store.sqlite_schema import StoreInUse

__all__ = ["StoreInUse", "TaskStore", "open_postgres_store", "open_store"]
