"""Reloading the configuration: SIGHUP re-reads --config.

`reload(app, path)` is all or nothing. The file is loaded as at start-up (`${VAR}`s from the
process environment, the key files it names), and every route it adds or changes is built
before anything is swapped: a file start-up would refuse is refused whole, with the same error
text, and the running configuration stays. A valid one is swapped in one step, with no await
in between, and applies to new requests and sessions:

    routes added     served at once (their URL, and with auth mode oauth their metadata)
    routes removed   new requests get 404; the sessions still open on one are served by it,
                     as it was, until they end; its running tasks finish
    routes changed   rebuilt (credentials, limits, task policy, upstream URL, headers and
                     identity): every request is admitted by the new one and new sessions
                     open on it; open sessions keep theirs, with their upstream connections
    auth, limits     the gateway-wide sections, through the routes that inherit them

Routes are compared by what they are built from (`RouteInputs`: loaded secrets and key files'
contents too), so an unchanged route is kept as it is and a rotated secret rebuilds its route;
a rebuilt route whose upstream section is the same shares the old one's upstream (connection
pool, stdio child cap, learned tool headers). The other sections (listen, store, http,
shutdown, sessions, audit, metrics, tracing) are read once at start: a reload that changes
them applies the rest and logs a WARNING naming the keys that wait for a restart. Every
reload is logged, audited (`config_reloaded`, `config_reload_failed`: key and route names,
never values) and counted (`mcp_gateway_config_reloads_total{outcome}`). Each route added or
changed in its own section is then probed in the background as at start-up (`reachability`):
a line for each of its upstreams, a WARNING for one that does not answer and for each name in
its `tools:`, `tasks.*` or `tool_scopes` that matches no listed tool. A route's probe still
running (start-up's, an earlier reload's) is stopped first, as is a removed route's.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping, Sequence
from functools import partial
from pathlib import Path

from aiohttp import web
from pydantic import BaseModel

from gateway.config import ConfigError, Settings, load_settings, route_key
from gateway.http.keys import METRICS, RELOADS, ROUTE_TABLE, ROUTES, SESSIONS, SHARE, TRACING
from gateway.http.reload_report import ReloadResult, report
from gateway.http.reload_state import Reloads
from gateway.route import Route, RouteInputs
from gateway.upstream import MemberRoutes, UpstreamRoute

# Named as before the module moved into http/: operators filter their logs on this name.
log = logging.getLogger("gateway.reload")

#: The sections a reload applies; the others keep the values the gateway started with.
RELOADABLE = frozenset({"auth", "limits", "routes"})


async def reload(app: web.Application, path: str | Path) -> ReloadResult:
    """Re-read the file at `path` and apply it, all or nothing; logged, audited and counted.
    A file that cannot be applied makes a refused result, not an exception."""
    state = app[RELOADS]
    async with state.lock:
        state.waiting = False
        try:
            # Reading and validating a big file (thousands of API keys) takes seconds: off
            # the loop, which goes on serving meanwhile. Under the lock, nothing changes
            # what `_load` reads of `state`.
            settings, needs_restart = await asyncio.to_thread(_load, str(path), state)
            built = await _build(app, str(path), settings)
        except ConfigError as exc:
            result = ReloadResult("refused", error=str(exc))
        else:
            result = _swap(app, settings, built, needs_restart)
        _gauge_children(app)
    report(app, str(path), result)
    if result.outcome == "applied":
        # Never awaited: a slow or dead upstream delays no reload (see `reachability`).
        state.probes.stop(result.removed)
        state.probes.start(settings.routes, only=result.probed)
    return result


def on_sighup(
    app: web.Application, path: str | None, listen_overrides: Mapping[str, object]
) -> Callable[[], None]:
    """What a SIGHUP does while `app` serves (`listen.run` calls it): reload `path`, keeping
    the command line's overrides of listen. Without a file (the built-in demo settings) it
    only logs so."""
    app[RELOADS].path = path
    app[RELOADS].listen_overrides = dict(listen_overrides)
    return partial(_hangup, app, path)


def _hangup(app: web.Application, path: str | None) -> None:
    if path is None:
        log.warning("SIGHUP: no --config file to re-read (the built-in demo settings run)")
        return
    state = app[RELOADS]
    if state.waiting:
        # A flood of SIGHUPs (a watcher gone wrong) would queue a reload each, every one
        # re-reading and re-validating the whole file: seconds of CPU each for a big one.
        log.info("SIGHUP: a reload waits to start already, and will read %s as it is then", path)
        return
    log.info("SIGHUP: reloading %s", path)
    state.waiting = True
    state.tasks.spawn(reload(app, path), name="reload")


def _load(path: str, state: Reloads) -> tuple[Settings, tuple[str, ...]]:
    """The settings to apply (the restart-only sections as running) and the keys whose
    change waits for a restart.

    Raises:
        ConfigError: as at start-up.
    """
    loaded = load_settings(path)
    if state.listen_overrides:
        listen = loaded.listen.model_copy(update=state.listen_overrides)
        loaded = loaded.model_copy(update={"listen": listen})
    running = state.settings
    fixed = [name for name in Settings.model_fields if name not in RELOADABLE]
    needs_restart = tuple(
        key
        for name in fixed
        for key in changed_keys(getattr(running, name), getattr(loaded, name), name)
    )
    return loaded.model_copy(update={name: getattr(running, name) for name in fixed}), needs_restart


async def _build(app: web.Application, path: str, settings: Settings) -> dict[str, Route]:
    """The routes `settings` adds or changes, built (their key files read).

    Raises:
        ConfigError: a key file is missing or unusable, named as at start-up.
    """
    current = app[ROUTES]
    built: dict[str, Route] = {}
    try:
        for config in settings.routes:
            old = current.get(config.name)
            if old is None or old.inputs != RouteInputs.of(settings, config):
                built[config.name] = Route(
                    settings, config, app[METRICS], old, app[TRACING], app[SHARE]
                )
    except ValueError as exc:
        for name, route in built.items():
            if current.get(name) is None or current[name].upstream is not route.upstream:
                await route.close()
        raise ConfigError(f"{path}: {exc}") from None
    return built


def _swap(
    app: web.Application,
    settings: Settings,
    built: Mapping[str, Route],
    needs_restart: tuple[str, ...],
) -> ReloadResult:
    """Put `settings` in force, in one step: nothing here awaits."""
    state, metrics = app[RELOADS], app[METRICS]
    current = app[ROUTES].copy()
    routes = {c.name: built.get(c.name) or current[c.name] for c in settings.routes}
    for config in settings.routes:  # one the file moved keeps its upstream: messages follow
        routes[config.name].upstream.place(route_key(settings.routes, config))
    added = tuple(name for name in routes if name not in current)
    removed = tuple(name for name in current if name not in routes)
    changed = tuple(name for name in routes if name in current and name in built)
    sections = tuple(
        name
        for name in ("auth", "limits")
        if getattr(state.settings, name) != getattr(settings, name)
    )
    for name in added:
        metrics.add_route(name)
        metrics.learn_tools(name, list(routes[name].policy.tools))
        metrics.sessions.labels(name).set_function(partial(app[SESSIONS].count, name))
    state.retired += [current[name] for name in (*removed, *changed)]
    app[ROUTE_TABLE].replace(routes, removed=[current[name] for name in removed])
    state.settings = settings
    return ReloadResult(
        "applied",
        added=added,
        removed=removed,
        changed=tuple(_described(current[name], routes[name]) for name in changed),
        sections=sections,
        needs_restart=needs_restart,
        probed=tuple(
            name
            for name in built
            if name not in current or current[name].inputs.config != built[name].inputs.config
        ),
    )


def changed_keys(old: object, new: object, where: str = "") -> list[str]:
    """The dotted keys whose values differ between two settings (names, never values); a
    model that differs only in a secret it read from the environment is named itself."""
    if old == new:
        return []
    if isinstance(old, BaseModel) and type(old) is type(new):
        keys = [
            key
            for name in type(old).model_fields
            for key in changed_keys(
                getattr(old, name), getattr(new, name), f"{where}.{name}" if where else name
            )
        ]
        return keys or [where]
    return [where]


def _described(old: Route, new: Route) -> str:
    before, after = old.inputs, new.inputs
    keys = changed_keys(before.config, after.config)
    keys += changed_keys(before.auth, after.auth, "auth")
    keys += changed_keys(before.limits, after.limits, "limits")
    if before.key_files != after.key_files:
        keys.append("auth key files")
    return f"{new.name} ({', '.join(dict.fromkeys(keys))})"


def _gauge_children(app: web.Application) -> None:
    """Each route's stdio children, those of its versions a reload replaced included (their
    sessions keep them), whatever a refused reload's routes set the gauges to."""
    metrics, retired = app[METRICS], app[RELOADS].retired
    for name, route in app[ROUTES].items():
        versions = [route, *(old for old in retired if old.name == name)]
        upstreams = list({id(r.upstream): r.upstream for r in versions}.values())
        metrics.children.labels(name).set_function(partial(_children, upstreams))


def _children(upstreams: Sequence[UpstreamRoute | MemberRoutes]) -> int:
    return sum(upstream.children_running for upstream in upstreams)
