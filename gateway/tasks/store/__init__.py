"""Where tasks, their outcomes and sessions are kept: the durable end of every flow.

RunAsTask: the runner creates the task here before the client hears of it, and writes its
one terminal status and outcome here when the upstream call ends. Local (tasks/*): the task
APIs answer from here alone, never from the runner's memory, so answers survive a restart
(and, with a shared backend, reach any replica). Sessions are kept here too, so a client
that keeps its session id never notices a restart.

    base.py            `TaskStore`, the interface: async methods that speak `tasks.models`
    sqlite.py          the SQLite backend (the default): task, outcome and session queries
    sqlite_writer.py   its single writer: group commit, each write durable on return
    sqlite_schema.py   its file: the one-process lock, connections, migrations

A backend for several replicas (PostgreSQL, DESIGN.md "Several replicas") goes beside
`sqlite.py` as `postgres.py`, implementing `TaskStore`. Callers import only what this package
exports, so they stay as they are.
"""

from gateway.tasks.store.base import TaskStore
from gateway.tasks.store.sqlite import open_store
from gateway.tasks.store.sqlite_schema import StoreInUse

__all__ = ["StoreInUse", "TaskStore", "open_store"]
