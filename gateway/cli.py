"""The `mcp-task-gateway` command: with options only, the gateway serves; with a command first
(`COMMANDS`: config check, tasks, sessions, store), that command runs instead.

Each imports what it runs when it runs: `tasks list` needs neither the server nor the stores,
and answers in a third of the time the whole gateway takes to import."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable

from gateway import __version__
from gateway.http.signals import hold_hangups
from gateway.observability import logs
from gateway.observability.logs import printable


def _config(argv: list[str]) -> int:
    from gateway.commands import config_check

    return config_check.main(argv[1:])


def _admin(argv: list[str]) -> int:
    from gateway.commands import admin

    return admin.main(argv)


def _store(argv: list[str]) -> int:
    from gateway.commands import store

    return store.main(argv[1:])


#: The commands beside serving, by their first word: what `--help` calls each, its one line, and
#: what runs it (each parses its own arguments, `COMMAND --help`, and returns an exit code).
COMMANDS: dict[str, tuple[str, str, Callable[[list[str]], int]]] = {
    "config": (
        "config check",
        "validate a configuration and its files, and reach every upstream once",
        _config,
    ),
    "tasks": (
        "tasks",
        "list, show, cancel or purge tasks of every principal (through the admin API)",
        _admin,
    ),
    "sessions": (
        "sessions",
        "list or end sessions of every principal (through the admin API)",
        _admin,
    ),
    "store": (
        "store",
        "back up the SQLite store, or erase a principal's tasks and sessions",
        _store,
    ),
}


_USAGE = f"""%(prog)s [options]
       %(prog)s {{{",".join(COMMANDS)}}} ..."""


# The command line's overrides skip the settings' checks (they replace checked values), so
# they are held to the same ones here: a port past 65535 was bound modulo 65536 and logged
# as given, a host with a NUL or a byte that is not UTF-8 was a traceback.
def _port(text: str) -> int:
    port = int(text) if text.isascii() and text.isdecimal() else -1
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"'{printable(text, 20)}' is not a port (0 to 65535)")
    return port


def _host(text: str) -> str:
    if not text.isprintable():
        raise argparse.ArgumentTypeError(
            f"'{printable(text, 60)}' holds a control character or a byte that is not UTF-8"
        )
    return text


def _commands_help() -> str:
    width = max(len(shown) for shown, _, _ in COMMANDS.values())
    return "\n".join(
        [
            "commands (without one, the gateway serves):",
            *(f"  {shown.ljust(width)}  {said}" for shown, said, _ in COMMANDS.values()),
            "",
            "`mcp-task-gateway COMMAND --help` tells what each takes.",
        ]
    )


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] and argv[0] in COMMANDS:
        raise SystemExit(COMMANDS[argv[0]][2](argv))
    parser = argparse.ArgumentParser(
        prog="mcp-task-gateway",
        usage=_USAGE,
        description="Adds MCP Tasks to MCP servers that lack them.",
        epilog=_commands_help(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    if argv[:1] and not argv[0].startswith("-"):
        parser.error(
            f"unknown command '{printable(argv[0], 40)}': the commands are "
            f"{', '.join(shown for shown, _, _ in COMMANDS.values())} (or none, to serve)"
        )
    hold_hangups()  # before the second of imports and the settings' loading to come
    parser.add_argument(
        "--config",
        help="YAML settings (default: the built-in demo settings, the same as config/gateway.yaml)",
    )
    parser.add_argument("--host", type=_host, help="override listen.host")
    parser.add_argument("--port", type=_port, help="override listen.port")
    parser.add_argument("--log-level", default="INFO", help="DEBUG, INFO, WARNING or ERROR")
    parser.add_argument(
        "--debug-libraries",
        action="store_true",
        help="let third-party loggers (aiosqlite, aiohttp, asyncio) log below INFO too; "
        "their DEBUG lines may show stored results and session ids",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    args = parser.parse_args(argv)
    try:
        logs.configure(args.log_level, args.debug_libraries)
    except ValueError as exc:
        parser.error(str(exc))
    from gateway.commands.serve import serve

    serve(args.config, args.host, args.port)
