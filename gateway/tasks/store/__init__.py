"""Where tasks, their outcomes and sessions are kept: the durable end of every flow.

RunAsTask: the runner creates the task here before the client hears of it, and writes its
one terminal status and outcome here when the upstream call ends. Local (tasks/*): the task
APIs answer from here alone, never from the runner's memory, so answers survive a restart
(and, with a shared backend, reach any replica). Sessions are kept here too, so a client
that keeps its session id never notices a restart.

    base.py       `TaskStore`, the interface: async methods that speak `tasks.models`
    sqlite/       the SQLite backend (the default, one process)
    postgres/     the PostgreSQL backend, shared by replicas (DESIGN.md "Several replicas")
    filters.py    the WHERE clauses of an operator's choice of tasks and sessions, in either
                  backend's placeholders
    opening.py    the store the settings name

Both backends have the same modules for the same rows (`inputs`, `attempts`, `sessions`,
`schema`, and `store` for the class). Callers import only what this package
exports, and never learn which backend they have.
"""

from gateway.tasks.store.base import TaskStore
from gateway.tasks.store.postgres import open_postgres_store
from gateway.tasks.store.sqlite import BackupRefused, StoreInUse, backup_store, open_store

__all__ = [
    "BackupRefused",
    "StoreInUse",
    "TaskStore",
    "backup_store",
    "open_postgres_store",
    "open_store",
]
