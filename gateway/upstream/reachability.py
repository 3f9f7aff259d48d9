"""Does every route's upstream answer? Asked by `config check`, and by the gateway once it
serves, so that a wrong URL or command shows in the log before the first client does.

`check(route, seconds)` runs one probe (`upstream.probe`: initialize and tools/list over the
gateway's own transport, a stdio child started and stopped again) and says what came of it.
A route that sends the caller's identity upstream (`signed_assertion`, `token_exchange`,
`passthrough`, forwarded client headers) has no caller to send during a check: an upstream
that answers it with a refusal is there, and counted as answering.

`at_start_up` probes every route in the background once the port serves, each with a short
child of its own rather than one a session will use (none runs before a client comes, and a
probe must never hold a slot of the route's `max_children`); it logs a line per route, a
WARNING for each upstream that does not answer. The gateway serves all the same.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from aiohttp import web

from gateway.aio import TaskSet
from gateway.config import RouteConfig, UpstreamConfig
from gateway.protocol.curation import unmatched
from gateway.protocol.errors import UpstreamError, UpstreamRefused
from gateway.upstream.probe import Reached, probe

log = logging.getLogger("gateway")

#: Seconds each upstream gets to answer initialize and tools/list.
DEFAULT_TIMEOUT = 10.0


@dataclass(frozen=True)
class ProbeResult:
    """What one route's probe came to: `reached`, or `refused` (an upstream that wants a
    caller's credentials and got none), or else a `failure`."""

    route: RouteConfig
    reached: Reached | None = None
    refused: str | None = None
    failure: str | None = None


async def check(route: RouteConfig, seconds: float) -> ProbeResult:
    """Probe `route`'s upstream once; never raises for what the upstream does."""
    try:
        return ProbeResult(route, reached=await probe(route, seconds))
    except UpstreamRefused as exc:
        if needs_caller(route.upstream):
            return ProbeResult(route, refused=exc.message)
        return ProbeResult(route, failure=exc.message)
    except UpstreamError as exc:
        return ProbeResult(route, failure=exc.message)
    except ValueError as exc:  # an unusable signing key, named by its key
        return ProbeResult(route, failure=str(exc))


def needs_caller(upstream: UpstreamConfig) -> bool:
    """Whether the upstream is told who calls in a way only a caller can supply."""
    return upstream.identity.mode in ("signed_assertion", "token_exchange") or bool(
        upstream.copied_headers
    )


def at_start_up(
    app: web.Application, routes: Sequence[RouteConfig], seconds: float = DEFAULT_TIMEOUT
) -> Callable[[], None]:
    """Returns what starts the check of `routes` in the background, to be called once the
    port serves; the app's shutdown cancels probes still running (their children stopped)."""
    probes = TaskSet("reachability check")

    async def stop(app: web.Application) -> None:
        await probes.close()

    app.on_shutdown.append(stop)

    def start() -> None:
        for route in routes:
            probes.spawn(_report(route, seconds), name=f"reachability of {route.name}")

    return start


async def _report(route: RouteConfig, seconds: float) -> None:
    outcome = await check(route, seconds)
    where = f"{route.upstream.transport} {route.upstream.location}"
    if outcome.reached is not None:
        reached = outcome.reached
        log.info(
            "route %s: upstream %s answered: protocol %s, %d tools; 2026-07-28 callers: %s",
            route.name,
            where,
            reached.protocol_version,
            reached.tools,
            reached.modern
            if reached.learned is None
            else f"{reached.modern} (auto: {reached.learned})",
        )
        for line in unmatched(route, reached.names):
            log.warning("%s", line)
    elif outcome.refused is not None:
        log.info(
            "route %s: upstream %s answered, but refuses a request without a caller (%s); "
            "its tools are listed to callers",
            route.name,
            where,
            outcome.refused,
        )
    else:
        log.warning(
            "route %s: upstream %s failed its check (initialize, tools/list): %s; the gateway "
            "serves, and this route's calls fail until its upstream answers",
            route.name,
            where,
            outcome.failure,
        )
