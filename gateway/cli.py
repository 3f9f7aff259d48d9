"""The `mcp-task-gateway` command: with options only, the gateway serves; with a command first
(`COMMANDS`: config check, tasks, sessions, store), that command runs instead."""

from __future__ import annotations

import argparse
import ipaddress
import logging
import socket
import sys
from collections.abc import Callable
from functools import partial

from gateway import __version__
from gateway.app import create_app, drain
from gateway.commands import admin as admin_command
from gateway.commands import config_check, store
from gateway.config import ConfigError, load_settings, route_auth
from gateway.http import announce, listen
from gateway.http.keys import RELOADS
from gateway.http.reload import on_sighup
from gateway.observability import audit, logs
from gateway.observability.logs import printable
from gateway.tasks.store import StoreInUse
from gateway.tasks.store.opening import StoreUnavailable
from gateway.upstream import reachability


def _resolve(host: str) -> str:
    try:
        return socket.gethostbyname(host) if host else "0.0.0.0"
    except OSError:
        return "0.0.0.0"


#: The commands beside serving, by their first word: what `--help` calls each, its one line, and
#: what runs it (each parses its own arguments, `COMMAND --help`, and returns an exit code).
COMMANDS: dict[str, tuple[str, str, Callable[[list[str]], int]]] = {
    "config": (
        "config check",
        "validate a configuration and its files, and reach every upstream once",
        lambda argv: config_check.main(argv[1:]),
    ),
    "tasks": (
        "tasks",
        "list, show, cancel or purge tasks of every principal (through the admin API)",
        admin_command.main,
    ),
    "sessions": (
        "sessions",
        "list or end sessions of every principal (through the admin API)",
        admin_command.main,
    ),
    "store": (
        "store",
        "back up the SQLite store, or erase a principal's tasks and sessions",
        lambda argv: store.main(argv[1:]),
    ),
}

_USAGE = f"""%(prog)s [options]
       %(prog)s {{{",".join(COMMANDS)}}} ..."""


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
    parser.add_argument(
        "--config",
        help="YAML settings (default: the built-in demo settings, the same as config/gateway.yaml)",
    )
    parser.add_argument("--host", help="override listen.host")
    parser.add_argument("--port", type=int, help="override listen.port")
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
    try:
        settings = load_settings(args.config)
    except ConfigError as exc:
        print(f"mcp-task-gateway: configuration error:\n{exc}", file=sys.stderr)
        raise SystemExit(2) from None
    overrides = {k: v for k, v in (("host", args.host), ("port", args.port)) if v is not None}
    if overrides:
        settings = settings.model_copy(
            update={"listen": settings.listen.model_copy(update=overrides)}
        )
    audit.configure(settings.audit)
    try:
        app = create_app(settings)
    except ValueError as exc:  # a key file named by the auth settings is missing or unusable
        print(f"mcp-task-gateway: configuration error:\n{args.config}: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
    on_sighup(app, args.config, overrides)
    open_routes = [r.name for r in settings.routes if route_auth(settings, r).mode == "none"]
    if open_routes and not ipaddress.ip_address(_resolve(settings.listen.host)).is_loopback:
        logging.getLogger("gateway").warning(
            "listening on %s with no authentication on route(s) %s: anyone who can reach the "
            "port can call their tools; configure auth (docs/security.md, Authentication)",
            settings.listen.host,
            ", ".join(open_routes),
        )
    log = logging.getLogger("gateway")
    admin = settings.admin
    if admin is not None and not ipaddress.ip_address(_resolve(admin.listen.host)).is_loopback:
        log.warning(
            "the admin API listens on %s, beyond this machine: whoever reaches it with the "
            "token can cancel and purge every principal's tasks; keep it to a management "
            "network (docs/operations.md, the admin API)",
            admin.listen.host,
        )
    log.info("configuration: %s", args.config or "built in (the same as config/gateway.yaml)")
    check_upstreams = reachability.at_start_up(app, settings.routes, probes=app[RELOADS].probes)

    def started() -> None:
        """Where everything is, once the port is bound: full URLs an operator can copy."""
        base = announce.base_url(settings.listen)
        log.info("listening on %s", base)
        for route in settings.routes:
            log.info("%s", announce.route_line(route, base))
        log.info("health: %s/healthz (and /livez, /readyz)", base)
        if settings.metrics.enabled:
            where = settings.metrics.listen
            metrics = base if where is None else announce.base_url(where)
            log.info("metrics: %s/metrics", metrics)
        log.info("audit log: %s (JSON lines)", audit.where(settings.audit))
        if admin is not None:
            address = announce.base_url(admin.listen)
            log.info("admin API: %s/admin/ (its token in %s)", address, admin.token_env)
            log.info("console: %s/admin/console/ (sign in with that token)", address)
        check_upstreams()  # in the background: a WARNING for each upstream that does not answer

    try:
        listen.run(
            app, settings.listen, settings.http, drain=partial(drain, app), on_started=started
        )
    except (listen.ListenError, StoreInUse, StoreUnavailable) as exc:
        print(f"mcp-task-gateway: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
    finally:
        audit.stop()  # every event of the run is written before the process ends
