"""A consistent copy of a SQLite store while its gateway runs.

One read transaction of the file (`VACUUM INTO`) is the store at one moment. It is taken
without the store's lock (`schema`) and without stopping the gateway: under WAL a reader gets
in while the gateway writes.
"""

from __future__ import annotations

import contextlib
import sqlite3
from pathlib import Path


class BackupRefused(Exception):
    """No copy was made; the message says why, and what to change."""


def backup_store(path: Path, target: Path) -> tuple[int, int]:
    """Copies the store at `path` to the new file `target`; the copy's task and session counts.

    Raises:
        BackupRefused: there is no store at `path`, `target` exists, or the copy failed.
    """
    if not path.is_file():
        raise BackupRefused(f"there is no store at {path} (store.path)")
    if target.exists():
        raise BackupRefused(f"{target} exists already: give the backup a new path")
    try:
        with contextlib.closing(sqlite3.connect(path, timeout=10)) as db:
            db.execute("VACUUM INTO ?", (str(target),))
        with contextlib.closing(sqlite3.connect(f"file:{target}?mode=ro", uri=True)) as copy:
            (tasks,) = copy.execute("SELECT count(*) FROM tasks").fetchone()
            (sessions,) = copy.execute("SELECT count(*) FROM sessions").fetchone()
    except sqlite3.Error as exc:
        raise BackupRefused(f"could not copy {path} to {target}: {exc}") from None
    return int(tasks), int(sessions)
