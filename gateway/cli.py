"""The `mcp-task-gateway` command."""

from __future__ import annotations

import argparse
import ipaddress
import logging
import socket
import sys
from functools import partial

from gateway import __version__
from gateway.app import create_app, drain
from gateway.commands import admin as admin_command
from gateway.commands import config_check, store
from gateway.config import ConfigError, RouteConfig, load_settings, route_auth
from gateway.http import listen
from gateway.http.keys import RELOADS
from gateway.http.reload import on_sighup
from gateway.observability import audit, logs
from gateway.tasks.store import StoreInUse
from gateway.tasks.store.opening import StoreUnavailable
from gateway.upstream import reachability


def _url_host(host: str) -> str:
    return f"[{host}]" if ":" in host else host


def _resolve(host: str) -> str:
    try:
        return socket.gethostbyname(host) if host else "0.0.0.0"
    except OSError:
        return "0.0.0.0"


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["store"]:
        raise SystemExit(store.main(argv[1:]))
    if argv[:1] == ["config"]:
        raise SystemExit(config_check.main(argv[1:]))
    if argv[:1] in (["tasks"], ["sessions"]):
        raise SystemExit(admin_command.main(argv))
    parser = argparse.ArgumentParser(
        prog="mcp-task-gateway",
        description="Adds MCP Tasks to MCP servers that lack them.",
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
        base = f"http://{_url_host(settings.listen.host)}:{settings.listen.port}"
        log.info("listening on %s", base)
        for route in settings.routes:
            log.info("route %s: %s%s -> %s", route.name, base, route.http_path, _upstreams(route))
        log.info("health: %s/healthz (and /livez, /readyz)", base)
        if settings.metrics.enabled:
            where = settings.metrics.listen
            metrics = base if where is None else f"http://{_url_host(where.host)}:{where.port}"
            log.info("metrics: %s/metrics", metrics)
        log.info("audit log: %s (JSON lines)", audit.where(settings.audit))
        if admin is not None:
            where = admin.listen
            log.info(
                "admin API: http://%s:%d/admin/ (its token in %s)",
                _url_host(where.host),
                where.port,
                admin.token_env,
            )
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


def _upstreams(route: RouteConfig) -> str:
    """Where a route's calls go: `stdio python`, or each member's, `search=streamable_http ...`."""
    if route.upstreams is None:
        return f"{route.single.transport} {route.single.location}"
    return ", ".join(f"{m.name}={m.transport} {m.location}" for m in route.upstreams)
