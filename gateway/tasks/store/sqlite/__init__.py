"""The SQLite backend: one file, one process (the default).

store.py      `SqliteTaskStore`: the task and outcome queries, the rest delegated below
writer.py     the file's single writer: group commit, each write durable on return
schema.py     the file: the one-process lock, connections, migrations
inputs.py, attempts.py, sessions.py
              its input-request, attempt and session rows
"""

from gateway.tasks.store.sqlite.backup import BackupRefused, backup_store
from gateway.tasks.store.sqlite.schema import StoreInUse
from gateway.tasks.store.sqlite.store import SqliteTaskStore, open_store

__all__ = ["BackupRefused", "SqliteTaskStore", "StoreInUse", "backup_store", "open_store"]
