"""The SQLite backend: one file, held by one process, which runs every task in it.

store.py      `SqliteTaskStore`: the writes handed to the writer, and the reads
cache.py      the tasks it wrote last, in memory: a poll reads no file
writer.py     the file's single writer: group commit, each write durable on return
schema.py     the file: the one-process lock, its connections, migrations
tasks.py, inputs.py, attempts.py, sessions.py
              the writes of each kind of row, inside the writer's transaction
backup.py     a consistent copy of the file while the gateway runs
"""

from gateway.tasks.store.sqlite.backup import BackupRefused, backup_store
from gateway.tasks.store.sqlite.schema import StoreInUse
from gateway.tasks.store.sqlite.store import SqliteTaskStore, open_store

__all__ = ["BackupRefused", "SqliteTaskStore", "StoreInUse", "backup_store", "open_store"]
