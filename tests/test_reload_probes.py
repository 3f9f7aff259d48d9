"""A reload probes each route it adds or changes (in its own section, not only through a
gateway-wide auth or limit) in the background, as start-up does: a line for each upstream (each
member), a WARNING for one that does not answer and for each name in `tools:`, `tasks.*` or
`tool_scopes` that matches no listed tool. The reload never waits for a probe, the app's
shutdown stops one still running (its stdio child too), and whatever a probe runs into is a
WARNING line, never a traceback."""

from __future__ import annotations

import asyncio
import logging
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp.test_utils import TestServer

from gateway.http.reload import reload
from gateway.upstream import reachability

from .conftest import DEMO
from .helpers import alive, pids
from .test_reload import _recorded, _serving, _write

DEAD = {"transport": "streamable_http", "url": "http://127.0.0.1:9/mcp"}
CARELESS = {
    "name": "careless",
    "upstream": DEMO,
    "tools": {"rename": {"echo": "say", "nope": "gone"}},
    "tasks": {"tools": {"say": "required", "ghost": "optional"}, "repeatable": ["spook"]},
}


async def _logged(caplog: pytest.LogCaptureFixture, holds: Callable[[str], bool]) -> None:
    """Until `holds(the log so far)`; the probes have no event to await."""
    async with asyncio.timeout(30):
        while not holds(caplog.text):  # noqa: ASYNC110
            await asyncio.sleep(0.05)


async def _children(pid_dir: Path, count: int) -> list[int]:
    """The pids of the probes' children, once `count` have started."""
    async with asyncio.timeout(20):
        while len(pids(pid_dir)) < count:  # noqa: ASYNC110 - no event to await
            await asyncio.sleep(0.05)
    return pids(pid_dir)


def _lines(caplog: pytest.LogCaptureFixture, level: int) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "gateway" and r.levelno == level]


async def test_a_reload_probes_the_routes_it_adds_and_changes_and_warns_as_start_up(
    tmp_path: Path, recorder: TestServer, caplog: pytest.LogCaptureFixture
) -> None:
    kept: dict[str, Any] = {"name": "kept", "upstream": _recorded(recorder)}
    moved: dict[str, Any] = {"name": "moved", "upstream": _recorded(recorder)}
    config = _write(tmp_path / "gateway.yaml", routes=[kept, moved])
    caplog.set_level(logging.INFO, logger="gateway")
    async with _serving(config) as (app, _):
        members = [{"name": "live", **DEMO}, {"name": "gone", **DEAD}]
        moved = {"name": "moved", "upstreams": members, "tasks": {"tools": {"ghost": "optional"}}}
        # A gateway-wide limit changes every route, but not what a probe would find of kept.
        _write(config, routes=[kept, moved, CARELESS], limits={"max_ttl_ms": 60000})
        result = await reload(app, config)
        assert result.added == ("careless",) and result.changed[0] == "kept (limits.max_ttl_ms)"
        assert result.probed == ("moved", "careless")
        await _logged(caplog, lambda log: "'spook'" in log and "route moved/live" in log)
        await _logged(caplog, lambda log: "route moved/gone" in log)
    warnings = _lines(caplog, logging.WARNING)
    for line in (
        "route careless: tools.rename names 'nope', which matches no tool its upstream lists",
        "route careless: tasks.tools names 'ghost', which matches no tool a client sees",
        "route careless: tasks.repeatable names 'spook', which matches no tool a client sees",
    ):
        assert line in warnings
    assert not any("'say'" in line for line in warnings)  # echo, renamed, is seen as say
    (gone,) = [line for line in warnings if line.startswith("route moved/gone:")]
    assert "127.0.0.1:9/mcp failed its check" in gone
    # One member failed: what it would list is unknown, so no name is called unmatched.
    assert not any("'ghost'" in line for line in warnings if line.startswith("route moved"))
    infos = _lines(caplog, logging.INFO)
    assert any(line.startswith("route careless: upstream stdio") for line in infos)
    assert any(line.startswith("route moved/live: upstream stdio") for line in infos)
    assert not any(line.startswith("route kept:") for line in warnings + infos)
    assert not any(r.exc_info for r in caplog.records)


async def test_the_reload_does_not_wait_for_its_probe_and_the_shutdown_stops_it(
    tmp_path: Path, recorder: TestServer, caplog: pytest.LogCaptureFixture
) -> None:
    """An upstream that never answers: the reload is applied at once. A second reload that
    changes the route again stops the first probe (and its child): one probe a route. The
    last probe's child is stopped with the gateway, and no failure is claimed for a probe
    that was cut short."""
    pid_dir = tmp_path / "pids"
    pid_dir.mkdir()
    hang = (
        "import os, pathlib, sys, time; "
        "pathlib.Path(sys.argv[1], str(os.getpid())).touch(); time.sleep(60)"
    )
    command = [sys.executable, "-c", hang, str(pid_dir)]
    silent = {"transport": "stdio", "command": command}
    first = {"name": "first", "upstream": _recorded(recorder)}
    config = _write(tmp_path / "gateway.yaml", routes=[first])
    caplog.set_level(logging.INFO, logger="gateway")
    async with _serving(config) as (app, base):
        _write(config, routes=[first, {"name": "silent", "upstream": silent}])
        async with asyncio.timeout(5):  # the probe alone would take its 10 seconds
            result = await reload(app, config)
        assert result.added == ("silent",)
        (first_child,) = await _children(pid_dir, 1)
        again = {"transport": "stdio", "command": [*command, "again"]}
        _write(config, routes=[first, {"name": "silent", "upstream": again}])
        assert (await reload(app, config)).changed == ("silent (upstream.command)",)
        child = next(pid for pid in await _children(pid_dir, 2) if pid != first_child)
        async with asyncio.timeout(10):
            while alive(first_child):  # noqa: ASYNC110 - a stopped child has no event
                await asyncio.sleep(0.05)
        assert alive(child)
        async with aiohttp.ClientSession() as http, http.get(f"{base}/livez") as live:
            assert live.status == 200  # the gateway serves meanwhile
    async with asyncio.timeout(10):
        while alive(child):  # noqa: ASYNC110 - a stopped child has no event to await
            await asyncio.sleep(0.05)
    assert not any(line.startswith("route silent:") for line in _lines(caplog, logging.WARNING))
    assert not any(r.exc_info for r in caplog.records)


async def test_a_reload_that_removes_a_route_stops_its_probe(
    tmp_path: Path, recorder: TestServer, caplog: pytest.LogCaptureFixture
) -> None:
    pid_dir = tmp_path / "pids"
    pid_dir.mkdir()
    hang = "import os, pathlib, sys, time; pathlib.Path(sys.argv[1], str(os.getpid())).touch()"
    command = [sys.executable, "-c", f"{hang}; time.sleep(60)", str(pid_dir)]
    first = {"name": "first", "upstream": _recorded(recorder)}
    config = _write(tmp_path / "gateway.yaml", routes=[first])
    caplog.set_level(logging.INFO, logger="gateway")
    async with _serving(config) as (app, _):
        silent = {"name": "silent", "upstream": {"transport": "stdio", "command": command}}
        _write(config, routes=[first, silent])
        assert (await reload(app, config)).added == ("silent",)
        (child,) = await _children(pid_dir, 1)
        _write(config, routes=[first])
        assert (await reload(app, config)).removed == ("silent",)
        async with asyncio.timeout(10):
            while alive(child):  # noqa: ASYNC110 - a stopped child has no event to await
                await asyncio.sleep(0.05)
    assert not any("route silent:" in line for line in _lines(caplog, logging.WARNING))


async def test_a_probe_that_breaks_is_one_warning_line_and_the_gateway_serves_on(
    tmp_path: Path,
    recorder: TestServer,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async def broken(route: Any, place: str, seconds: float) -> list[reachability.ProbeResult]:
        raise RuntimeError("upstream said \x1b[31mred\nFAKE log line")

    monkeypatch.setattr(reachability, "check_route", broken)
    first = {"name": "first", "upstream": _recorded(recorder)}
    config = _write(tmp_path / "gateway.yaml", routes=[first])
    caplog.set_level(logging.INFO)
    async with _serving(config) as (app, base):
        _write(config, routes=[first, {"name": "second", "upstream": _recorded(recorder)}])
        assert (await reload(app, config)).added == ("second",)
        await _logged(caplog, lambda log: "route second: its upstream check failed" in log)
        async with aiohttp.ClientSession() as http, http.get(f"{base}/livez") as live:
            assert live.status == 200
    (line,) = [w for w in _lines(caplog, logging.WARNING) if w.startswith("route second:")]
    assert line == (
        "route second: its upstream check failed: RuntimeError: upstream said "
        "\\x1b[31mred\\nFAKE log line"
    )
    assert not any(r.exc_info for r in caplog.records)
