"""`mcp-task-gateway store backup PATH --config FILE`: a consistent copy of a running store.

SQLite only: the copy is one read transaction of the file (`VACUUM INTO`), taken beside a
running gateway without its lock (WAL lets a reader in while it writes) and without stopping
it. A PostgreSQL store is the database's to back up (`pg_dump`, docs/replicas.md).
"""

from __future__ import annotations

import argparse
import contextlib
import sqlite3
import sys
from pathlib import Path

from gateway.config import ConfigError, load_settings


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="mcp-task-gateway store",
        description="Operations on the gateway's task store.",
    )
    commands = parser.add_subparsers(dest="command", required=True)
    backup = commands.add_parser(
        "backup", help="copy the SQLite store, consistently, while the gateway runs"
    )
    backup.add_argument("path", help="the new file to write (it must not exist)")
    backup.add_argument("--config", help="the gateway's YAML settings (default: the built-in)")
    args = parser.parse_args(argv)
    try:
        settings = load_settings(args.config)
    except ConfigError as exc:
        print(f"mcp-task-gateway: configuration error:\n{exc}", file=sys.stderr)
        return 2
    if settings.store.backend != "sqlite":
        print(
            "mcp-task-gateway: store backup copies a SQLite store; back up a PostgreSQL store "
            "with pg_dump (docs/replicas.md)",
            file=sys.stderr,
        )
        return 2
    try:
        tasks, sessions = _backup(Path(settings.store.path), Path(args.path))
    except _Refused as exc:
        print(f"mcp-task-gateway: {exc}", file=sys.stderr)
        return 2
    print(f"backed up {settings.store.path} to {args.path}: {tasks} task(s), {sessions} session(s)")
    return 0


class _Refused(Exception):
    """Why no copy was made."""


def _backup(store: Path, target: Path) -> tuple[int, int]:
    """Copies `store` to the new file `target`; the copy's task and session counts."""
    if not store.is_file():
        raise _Refused(f"there is no store at {store} (store.path)")
    if target.exists():
        raise _Refused(f"{target} exists already: give the backup a new path")
    try:
        with contextlib.closing(sqlite3.connect(store, timeout=10)) as db:
            # One read transaction: what the copy holds is the store at one moment.
            db.execute("VACUUM INTO ?", (str(target),))
        with contextlib.closing(sqlite3.connect(f"file:{target}?mode=ro", uri=True)) as copy:
            (tasks,) = copy.execute("SELECT count(*) FROM tasks").fetchone()
            (sessions,) = copy.execute("SELECT count(*) FROM sessions").fetchone()
    except sqlite3.Error as exc:
        raise _Refused(f"could not copy {store} to {target}: {exc}") from None
    return int(tasks), int(sessions)
