"""Where tasks, their outcomes and sessions are kept: the durable end of every flow.

RunAsTask: the runner creates the task here before the client hears of it, and writes its
one terminal status and outcome here when the upstream call ends. Local (tasks/*): the task
APIs answer from here alone, never from the runner's memory, so answers survive a restart
(and, with a shared backend, reach any replica). Sessions are kept here too, so a client
that keeps its session id never notices a restart.

    base.py       `TaskStore`, the interface: async methods that speak `tasks.models`
    sqlite/       the SQLite backend (the default): one file, one process
    postgres/     the PostgreSQL backend, shared by replicas (DESIGN.md "Several replicas")
    opening.py    the backend the settings name, opened

What both backends share is written once, here:

    rows.py       how each kind of stored row reads back as a model
    sql.py        the statements that differ only by placeholder, built per backend
    filters.py    the queries of an operator's choice of tasks and sessions
    reads.py      the reads both make alike, which each store class inherits
    writes.py     the writes' argument checks, and the outcome of a task failed while running

Both backends have the same modules for the same parts: `store` (the class), `schema` (the
database and its migrations), and the writes by the rows they change, `tasks`, `inputs`,
`attempts` and `sessions`. Callers import only what this package exports, and never learn
which backend they have.
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
