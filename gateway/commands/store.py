"""`mcp-task-gateway store backup | erase`: operations on the task store, beside the gateway.

`backup PATH`: a consistent copy of a running SQLite store, one read transaction of the file
(`VACUUM INTO`), taken without the gateway's lock (WAL lets a reader in while it writes) and
without stopping it. A PostgreSQL store is the database's to back up (`pg_dump`).

`erase --principal P`: everything the store keeps of one principal, for a data-protection
request: their tasks on every route (results, questions, kept requests) and their session
records; with `--audit pseudonymise`, their name in the audit file is replaced by a pseudonym.
A SQLite store must be stopped first: a running gateway holds its live tasks and sessions in
memory as well, which a write from outside would not reach. Replicas on PostgreSQL read the
database again on every request of a session and on the wake-up of a deleted task.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import os
import sys
from pathlib import Path

from gateway.commands.printing import typed_text
from gateway.config import ConfigError, Settings, load_settings
from gateway.tasks.store import BackupRefused, StoreInUse, backup_store
from gateway.tasks.store.opening import StoreUnavailable, open_configured


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
    erase = commands.add_parser(
        "erase", help="delete a principal's tasks and sessions (the gateway stopped, on SQLite)"
    )
    erase.add_argument(
        "--principal", type=typed_text, required=True, help="whom to erase, as authenticated"
    )
    erase.add_argument(
        "--audit",
        choices=("keep", "pseudonymise"),
        default="keep",
        help="what becomes of their name in audit.file and its rotations (keep)",
    )
    erase.add_argument("--config", help="the gateway's YAML settings (default: the built-in)")
    args = parser.parse_args(argv)
    try:
        settings = load_settings(args.config)
    except ConfigError as exc:
        print(f"mcp-task-gateway: configuration error:\n{exc}", file=sys.stderr)
        return 2
    if args.command == "erase":
        return _erase(settings, args.principal, args.audit == "pseudonymise")
    if settings.store.backend != "sqlite":
        print(
            "mcp-task-gateway: store backup copies a SQLite store; back up a PostgreSQL store "
            "with pg_dump (docs/replicas.md)",
            file=sys.stderr,
        )
        return 2
    try:
        tasks, sessions = backup_store(Path(settings.store.path), Path(args.path))
    except BackupRefused as exc:
        print(f"mcp-task-gateway: {exc}", file=sys.stderr)
        return 2
    print(f"backed up {settings.store.path} to {args.path}: {tasks} task(s), {sessions} session(s)")
    return 0


def _erase(settings: Settings, principal: str, pseudonymise: bool) -> int:
    try:
        tasks, sessions = asyncio.run(_erase_from_store(settings, principal))
    except StoreInUse as exc:
        print(
            f"mcp-task-gateway: {exc}; an erasure runs on a stopped gateway's store, since a "
            "running one holds live tasks and sessions in memory as well",
            file=sys.stderr,
        )
        return 2
    except StoreUnavailable as exc:
        print(f"mcp-task-gateway: {exc}", file=sys.stderr)
        return 2
    said = f"erased principal {principal!r}: {tasks} task(s), {sessions} session(s)"
    if not pseudonymise:
        print(f"{said}; audit lines kept")
        return 0
    if settings.audit.file is None:
        print(f"{said}; audit lines went to stderr (no audit.file): nothing to rewrite here")
        return 0
    lines, files = _pseudonymise(Path(settings.audit.file), settings.audit.backups, principal)
    print(f"{said}; {lines} audit line(s) in {files} file(s) now name {pseudonym(principal)}")
    return 0


async def _erase_from_store(settings: Settings, principal: str) -> tuple[int, int]:
    store = await open_configured(settings.store)
    try:
        return await store.erase_principal(principal)
    finally:
        await store.close()


def pseudonym(principal: str) -> str:
    """The same for every line of one principal, and not theirs."""
    return "pseudonym:" + hashlib.sha256(principal.encode()).hexdigest()[:16]


def _pseudonymise(path: Path, backups: int, principal: str) -> tuple[int, int]:
    """Rewrites the audit file and its rotations with `principal` replaced; each file whole,
    through a new file moved over it. Returns lines changed and files rewritten."""
    changed = files = 0
    for file in [path, *(path.with_name(f"{path.name}.{n}") for n in range(1, backups + 1))]:
        if not file.is_file():
            continue
        out: list[str] = []
        touched = False
        for line in file.read_text(encoding="utf-8").splitlines():
            try:
                event = json.loads(line)
            except ValueError:
                out.append(line)  # not an audit event: left as it is
                continue
            if isinstance(event, dict) and event.get("principal") == principal:
                event["principal"] = pseudonym(principal)
                line = json.dumps(event, separators=(",", ":"))
                changed += 1
                touched = True
            out.append(line)
        if touched:
            fresh = file.with_name(file.name + ".erasing")
            fresh.write_text("".join(f"{line}\n" for line in out), encoding="utf-8")
            os.replace(fresh, file)
            files += 1
    return changed, files
