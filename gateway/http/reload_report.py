"""What a reload says of itself: its result, and the log lines, audit event and count it
makes (`gateway.http.reload` does the reloading)."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Literal

from aiohttp import web

from gateway.http.announce import base_url, route_line
from gateway.http.keys import BOUND, METRICS, RELOADS
from gateway.observability.audit import audit

# The reload's own logger name: operators filter their logs on it.
log = logging.getLogger("gateway.reload")


@dataclass(frozen=True, slots=True)
class ReloadResult:
    """What a reload did: applied, and what changed, or refused, and why."""

    outcome: Literal["applied", "refused"]
    #: Why it was refused: what start-up would have printed (the file and the key path).
    error: str = ""
    added: tuple[str, ...] = ()
    removed: tuple[str, ...] = ()
    #: The routes rebuilt, each with the keys that differ: "demo (auth.api_keys, limits.burst)".
    changed: tuple[str, ...] = ()
    #: Gateway-wide sections that changed and apply through the routes: auth, limits.
    sections: tuple[str, ...] = ()
    #: Keys the file changes that only a restart applies; their running values stay.
    needs_restart: tuple[str, ...] = ()
    #: The routes added, and those changed in their own section (not only auth or limits).
    probed: tuple[str, ...] = ()


def report(app: web.Application, path: str, result: ReloadResult) -> None:
    """Log, audit and count what `result` says; an added route gets the line start-up gives
    each route (`announce.route_line`): its URL and where its calls go."""
    app[METRICS].config_reloads.labels(result.outcome).inc()
    if result.outcome == "refused":
        log.error("configuration reload refused, the running configuration stays: %s", result.error)
        audit("config_reload_failed", file=path, error=result.error)
        return
    if result.needs_restart:
        log.warning(
            "configuration reload: %s changed in %s but take effect only after a restart; "
            "the running values stay",
            ", ".join(result.needs_restart),
            path,
        )
    parts = [
        f"{what}: {', '.join(names)}"
        for what, names in (
            ("routes added", result.added),
            ("routes removed", result.removed),
            ("routes changed", result.changed),
            ("sections changed", result.sections),
        )
        if names
    ]
    log.info("configuration reloaded from %s: %s", path, "; ".join(parts) or "nothing changed")
    settings = app[RELOADS].settings
    # (An app served by a test client has bound nothing of its own.)
    base = base_url(app[BOUND].get("listen", settings.listen))
    for route in settings.routes:
        if route.name in result.added:
            log.info("%s", route_line(route, base))
    audit(
        "config_reloaded",
        file=path,
        added=list(result.added),
        removed=list(result.removed),
        changed=list(result.changed),
        sections=list(result.sections),
        needs_restart=list(result.needs_restart),
    )
