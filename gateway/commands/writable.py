"""Can the gateway write where its configuration keeps things? Asked by `config check`, so that
a store or audit file it cannot write shows before the gateway fails to start on it.

`store.path` (SQLite): an existing file must be a writable SQLite database (or empty), in a
writable directory (the store keeps its `-wal` and `-shm` files beside it); a missing one needs
its nearest existing directory writable, since the gateway creates the directories down to it.
A PostgreSQL store is the database's to grant, reached when the gateway starts. `audit.file`:
an existing file must be writable, in a writable directory (rotation renames it there); a
missing one needs its directory to exist and be writable, which the gateway does not create.
Nothing is created or written: permissions are read as access(2) reads them, for the user
running the check.
"""

from __future__ import annotations

import os
from pathlib import Path

from gateway.config import Settings
from gateway.observability.logs import printable

#: What every SQLite database file begins with.
_SQLITE_HEADER = b"SQLite format 3\x00"


def problems(settings: Settings) -> list[tuple[str, str]]:
    """Each key whose file the gateway could not write, with why."""
    found: list[tuple[str, str]] = []
    if settings.store.backend == "sqlite":
        found += _checked("store.path", settings.store.path, makes_directories=True, sqlite=True)
    if settings.audit.file is not None:
        found += _checked("audit.file", settings.audit.file, makes_directories=False)
    return found


def _checked(
    key: str, value: str, makes_directories: bool, sqlite: bool = False
) -> list[tuple[str, str]]:
    try:
        # pathlib answers "no such file" for a path with NUL, which no system call takes.
        problem = (
            "is not a path the system can open (it holds NUL)"
            if "\x00" in value
            else _problem(Path(value), makes_directories, sqlite)
        )
    except OSError as exc:
        problem = f"cannot be checked: {exc.strerror or exc}"
    return [] if problem is None else [(key, f"{printable(value, 300)} {problem}")]


def _problem(path: Path, makes_directories: bool, sqlite: bool) -> str | None:
    if path.is_dir():
        return "is a directory, not a file"
    if sqlite and path.exists():
        if not path.is_file():
            return "is not a regular file"
        # Its first bytes, not an open: a running gateway holds the file, and a check must
        # take no lock of its own. An empty file is one SQLite makes a database of.
        with path.open("rb") as file:
            head = file.read(len(_SQLITE_HEADER))
        if head and head != _SQLITE_HEADER:
            return "is not a SQLite database (a file of something else)"
    if path.exists() and not os.access(path, os.W_OK):
        return "is not writable by this user"
    directory = path.parent
    if makes_directories:
        while not directory.exists() and directory != directory.parent:
            directory = directory.parent
    elif not directory.exists():
        return f"is in {_shown(directory)}, which does not exist (the gateway does not create it)"
    if not directory.is_dir():
        return f"is under {_shown(directory)}, which is not a directory"
    if not os.access(directory, os.W_OK | os.X_OK):
        return f"is in {_shown(directory)}, where this user cannot create files"
    return None


def _shown(directory: Path) -> str:
    return printable(str(directory), 300)
