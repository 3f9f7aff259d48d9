"""Does every route's upstream answer? Asked by `config check`, and by the gateway once it
serves, so that a wrong URL or command shows in the log before the first client does.

`check(route, place, seconds)` runs one probe (`upstream.probe`: initialize and tools/list over
the gateway's own transport, a stdio child started and stopped again) and says what came of it;
`place` is where the file writes the route (`routes[2]`), for messages naming its keys.
A route that sends the caller's identity upstream (`signed_assertion`, `token_exchange`,
`passthrough`, forwarded client headers) has no caller to send during a check: an upstream
that answers it with a refusal is there, and counted as answering. A stdio child that exits
during the check fails it with the last lines it wrote to stderr (`ProbeResult.stderr`), which
`config check` and the WARNING below show: usually the reason, a bad argument or module.

`at_start_up` probes every route in the background once the port serves, each with a short
child of its own rather than one a session will use (none runs before a client comes, and a
probe must never hold a slot of the route's `max_children`); it logs a line per route, a
WARNING for each upstream that does not answer. The gateway serves all the same. A reload
probes each route it adds or changes the same way (`Probes`), after the swap.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass
from functools import partial

from aiohttp import web

from gateway.aio import TaskSet
from gateway.config import MemberConfig, RouteConfig, UpstreamConfig, route_key
from gateway.observability.logs import printable
from gateway.protocol.curation import unmatched
from gateway.protocol.errors import UpstreamError, UpstreamRefused
from gateway.protocol.members import Naming
from gateway.upstream.probe import ChildFailed, Reached, probe

log = logging.getLogger("gateway")

#: Seconds each upstream gets to answer initialize and tools/list.
DEFAULT_TIMEOUT = 10.0


@dataclass(frozen=True)
class ProbeResult:
    """What the probe of one upstream of a route came to: `reached`, or `refused` (an
    upstream that wants a caller's credentials and got none), or else a `failure`."""

    route: RouteConfig
    reached: Reached | None = None
    refused: str | None = None
    failure: str | None = None
    #: The member probed (a route of several); None for a route's one upstream.
    member: MemberConfig | None = None
    #: With a `failure` of a stdio child that exited: the last lines of its stderr.
    stderr: tuple[str, ...] = ()

    @property
    def upstream(self) -> UpstreamConfig:
        return self.member or self.route.single

    @property
    def where(self) -> str:
        """The route, and the member probed: `work/search`."""
        return self.route.name if self.member is None else f"{self.route.name}/{self.member.name}"

    @property
    def names(self) -> tuple[str, ...]:
        """The tools it listed, under the names the route's curation sees (a member's
        qualified, MEMBER__TOOL, on a route of several)."""
        listed = self.reached.names if self.reached is not None else ()
        if self.member is None:
            return listed
        naming = Naming([m.name for m in self.route.upstreams or ()])
        return tuple(naming.client(self.member.name, name) for name in listed)


async def check(
    route: RouteConfig, place: str, seconds: float, member: MemberConfig | None = None
) -> ProbeResult:
    """Probe `route` (which the file writes at `place`, `routes[2]`), its upstream or its
    `member`, once; never raises for what it does."""
    config = member or route.single
    try:
        reached = await probe(route, place, seconds, config)
        return ProbeResult(route, reached=reached, member=member)
    except UpstreamRefused as exc:
        if needs_caller(config):
            return ProbeResult(route, refused=exc.message, member=member)
        return ProbeResult(route, failure=exc.message, member=member)
    except ChildFailed as exc:
        return ProbeResult(route, failure=exc.message, member=member, stderr=exc.stderr)
    except UpstreamError as exc:
        return ProbeResult(route, failure=exc.message, member=member)
    except ValueError as exc:  # an unusable signing key, named by its key
        return ProbeResult(route, failure=str(exc), member=member)


async def check_route(route: RouteConfig, place: str, seconds: float) -> list[ProbeResult]:
    """Every upstream of `route` (at `place` in the file) probed at once: its one, or each
    member."""
    if route.upstreams is None:
        return [await check(route, place, seconds)]
    members = (check(route, place, seconds, m) for m in route.upstreams)
    return list(await asyncio.gather(*members))


def unmatched_by(results: Sequence[ProbeResult]) -> list[str]:
    """What a route's configuration names that no tool of any of its upstreams matches
    (`curation.unmatched`), when every upstream listed its tools (else nothing: who
    failed may list what is named)."""
    if not results or any(result.reached is None for result in results):
        return []
    return unmatched(results[0].route, [name for result in results for name in result.names])


def needs_caller(upstream: UpstreamConfig) -> bool:
    """Whether the upstream is told who calls in a way only a caller can supply."""
    return upstream.identity.mode in ("signed_assertion", "token_exchange") or bool(
        upstream.copied_headers
    )


class Probes:
    """Routes probed in the background, each logged as at start-up. A route probed again
    before its last probe ended (two reloads in a row) stops that probe first: one probe a
    route at most, however often the file is reloaded."""

    def __init__(self, name: str, seconds: float = DEFAULT_TIMEOUT) -> None:
        self.seconds = seconds
        self._tasks = TaskSet(name)
        self._running: dict[str, asyncio.Task[None]] = {}

    def start(
        self,
        routes: Sequence[RouteConfig],
        seconds: float | None = None,
        only: Collection[str] | None = None,
    ) -> None:
        """Probe each of `routes` (the file's, in its order; only those named in `only`, if
        given) in the background, each upstream within `seconds` (else those the probes
        were made with)."""
        for route in routes:
            if only is not None and route.name not in only:
                continue
            self.stop([route.name])
            place = route_key(routes, route)
            task = self._tasks.spawn(
                _report(route, place, self.seconds if seconds is None else seconds),
                name=f"reachability of {route.name}",
            )
            self._running[route.name] = task
            task.add_done_callback(partial(self._forget, route.name))

    def stop(self, names: Iterable[str]) -> None:
        """Cancel the probes of the routes `names` (a reload removed them), if still running;
        their children are stopped as the shutdown stops them."""
        for name in names:
            earlier = self._running.pop(name, None)
            if earlier is not None:
                earlier.cancel()

    def _forget(self, name: str, task: asyncio.Task[None]) -> None:
        if self._running.get(name) is task:
            del self._running[name]

    async def close(self, app: web.Application | None = None) -> None:
        """Cancel the probes still running (their children stopped); an `on_shutdown` hook."""
        self._running.clear()
        await self._tasks.close()


def at_start_up(
    app: web.Application,
    routes: Sequence[RouteConfig],
    seconds: float = DEFAULT_TIMEOUT,
    probes: Probes | None = None,
) -> Callable[[], None]:
    """Returns what starts the check of `routes` (the file's) in the background, to be called
    once the port serves; the app's shutdown cancels probes still running (their children
    stopped). `probes`: those reloads use (the app then stops them), so that a reload changing
    a route before its first probe ended stops that probe, whose lines would be of the old
    route."""
    if probes is None:
        probes = Probes("reachability check", seconds)
        app.on_shutdown.append(probes.close)
    return partial(probes.start, routes, seconds)


async def _report(route: RouteConfig, place: str, seconds: float) -> None:
    """Probe `route` and log what came of it. Whatever a careless upstream or configuration
    makes of the probe is a WARNING line, never a traceback: it runs beside a serving gateway."""
    try:
        results = await check_route(route, place, seconds)
        lines = unmatched_by(results)
    except Exception as exc:  # noqa: BLE001 - logged as one line, the gateway serves on
        log.warning(
            "route %s: its upstream check failed: %s",
            route.name,
            printable(f"{type(exc).__name__}: {exc}"),
        )
        return
    for outcome in results:
        _report_one(outcome)
    for line in lines:
        log.warning("%s", line)


def _report_one(outcome: ProbeResult) -> None:
    upstream = outcome.upstream
    where = f"{upstream.transport} {upstream.location}"
    name = outcome.where
    if outcome.reached is not None:
        reached = outcome.reached
        log.info(
            "route %s: upstream %s answered: protocol %s, %d tools; 2026-07-28 callers: %s",
            name,
            where,
            reached.protocol_version,
            reached.tools,
            reached.modern
            if reached.learned is None
            else f"{reached.modern} (auto: {reached.learned})",
        )
    elif outcome.refused is not None:
        log.info(
            "route %s: upstream %s answered, but refuses a request without a caller (%s); "
            "its tools are listed to callers",
            name,
            where,
            outcome.refused,
        )
    else:
        said = f"; its stderr ended: {' | '.join(outcome.stderr)}" if outcome.stderr else ""
        log.warning(
            "route %s: upstream %s failed its check (initialize, tools/list): %s%s; the gateway "
            "serves, and this route's calls fail until its upstream answers",
            name,
            where,
            outcome.failure,
            said,
        )
