"""Serving: the gateway itself, what `mcp-task-gateway` runs without a command. The settings
are loaded and checked, the app built, the upstreams probed in the background once the port is
bound, and where everything is logged as URLs an operator can copy."""

from __future__ import annotations

import ipaddress
import logging
import socket
import sys
from functools import partial

from gateway.app import create_app
from gateway.config import ConfigError, load_settings, route_auth
from gateway.http import announce, listen
from gateway.http.keys import BOUND, RELOADS
from gateway.http.reload import on_sighup
from gateway.http.shutdown import drain
from gateway.observability import audit
from gateway.tasks.store import StoreInUse
from gateway.tasks.store.opening import StoreUnavailable
from gateway.upstream import reachability

log = logging.getLogger("gateway")


def _resolve(host: str) -> str:
    try:
        return socket.gethostbyname(host) if host else "0.0.0.0"
    except OSError:
        return "0.0.0.0"


def serve(config: str | None, host: str | None, port: int | None) -> None:
    """Serves until stopped; a configuration the gateway cannot serve is exit code 2."""
    try:
        settings = load_settings(config)
    except ConfigError as exc:
        print(f"mcp-task-gateway: configuration error:\n{exc}", file=sys.stderr)
        raise SystemExit(2) from None
    overrides = {k: v for k, v in (("host", host), ("port", port)) if v is not None}
    if overrides:
        settings = settings.model_copy(
            update={"listen": settings.listen.model_copy(update=overrides)}
        )
    audit.configure(settings.audit)
    try:
        app = create_app(settings)
    except ValueError as exc:  # a key file named by the auth settings is missing or unusable
        print(f"mcp-task-gateway: configuration error:\n{config}: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
    hangup = on_sighup(app, config, overrides)
    open_routes = [r.name for r in settings.routes if route_auth(settings, r).mode == "none"]
    if open_routes and not ipaddress.ip_address(_resolve(settings.listen.host)).is_loopback:
        log.warning(
            "listening on %s with no authentication on route(s) %s: anyone who can reach the "
            "port can call their tools; configure auth (docs/security.md, Authentication)",
            settings.listen.host,
            ", ".join(open_routes),
        )
    admin = settings.admin
    if admin is not None and not ipaddress.ip_address(_resolve(admin.listen.host)).is_loopback:
        log.warning(
            "the admin API listens on %s, beyond this machine: whoever reaches it with the "
            "token can cancel and purge every principal's tasks; keep it to a management "
            "network (docs/operations.md, the admin API)",
            admin.listen.host,
        )
    log.info("configuration: %s", config or "built in (the same as config/gateway.yaml)")
    check_upstreams = reachability.at_start_up(app, settings.routes, probes=app[RELOADS].probes)

    def started() -> None:
        """Where everything is, once the port is bound: full URLs an operator can copy, with
        the ports the OS chose where the settings say 0."""
        bound = app[BOUND]
        base = announce.base_url(bound["listen"])
        log.info("listening on %s", base)
        for route in settings.routes:
            log.info("%s", announce.route_line(route, base))
        log.info("health: %s/healthz (and /livez, /readyz)", base)
        if settings.metrics.enabled:
            where = bound.get("metrics")
            metrics = base if where is None else announce.base_url(where)
            log.info("metrics: %s/metrics", metrics)
        log.info("audit log: %s (JSON lines)", audit.where(settings.audit))
        if admin is not None:
            address = announce.base_url(bound["admin"])
            log.info("admin API: %s/admin/ (its token in %s)", address, admin.token_env)
            log.info("console: %s/admin/console/ (sign in with that token)", address)
        check_upstreams()  # in the background: a WARNING for each upstream that does not answer

    try:
        listen.run(
            app,
            settings.listen,
            settings.http,
            drain=partial(drain, app),
            on_started=started,
            hangup=hangup,
        )
    except (listen.ListenError, StoreInUse, StoreUnavailable) as exc:
        print(f"mcp-task-gateway: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
    finally:
        audit.stop()  # every event of the run is written before the process ends
