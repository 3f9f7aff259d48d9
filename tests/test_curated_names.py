"""A name the configuration gives a tool that the upstream does not list (after `tools:`) is
a WARNING naming the route and the name: at start-up, once the reachability probe has listed
the upstream's tools, and in `config check`'s output."""

from __future__ import annotations

import asyncio
import json
import logging
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from gateway.config import RouteConfig
from gateway.protocol.curation import unmatched
from gateway.upstream import reachability

from .test_config_check import config_check, write

STDIO_UPSTREAM = {"transport": "stdio", "command": ["python", "-m", "gateway.demo"]}


def careless(upstream: dict[str, Any]) -> RouteConfig:
    return RouteConfig.model_validate(
        {
            "name": "r",
            "upstream": upstream,
            "tools": {
                "rename": {"echo": "say", "nope": "gone"},
                "describe": {"say": "ok", "echo": "renamed away"},
            },
            "tasks": {"tools": {"say": "required", "ghost": "optional"}, "repeatable": ["spook"]},
            "tool_scopes": {"phantom": ["ops"]},
        }
    )


def test_each_name_that_matches_no_tool_is_one_line_naming_route_key_and_name() -> None:
    lines = unmatched(careless(STDIO_UPSTREAM), ["echo", "slow"])
    assert lines == [
        "route r: tools.rename names 'nope', which matches no tool its upstream lists",
        "route r: tools.describe names 'echo', which matches no tool a client sees",
        "route r: tasks.tools names 'ghost', which matches no tool a client sees",
        "route r: tasks.repeatable names 'spook', which matches no tool a client sees",
        "route r: tool_scopes names 'phantom', which matches no tool a client sees",
    ]


def test_globs_matching_no_name_and_curation_hiding_every_tool_are_warnings() -> None:
    """A careless operator's `allow` naming a tool by its upstream name after renaming it,
    and globs that leave a client nothing: each a WARNING, not an error."""
    route = RouteConfig.model_validate(
        {
            "name": "r",
            "upstream": STDIO_UPSTREAM,
            "tools": {"allow": ["echo", "sl*"], "deny": ["slow", "x*"], "rename": {"echo": "say"}},
        }
    )
    assert unmatched(route, ["echo", "slow"]) == [
        "route r: tools.allow has 'echo', which matches no tool name a client could see "
        "(names here are the client's, after tools.rename)",
        "route r: tools.deny has 'x*', which matches no tool name a client could see "
        "(names here are the client's, after tools.rename)",
        "route r: tools.allow and tools.deny hide every tool its upstream lists",
    ]
    # An upstream that lists nothing hides nothing: no line for it.
    assert unmatched(route, [])[-1].startswith("route r: tools.deny has 'x*'")


async def test_the_start_up_check_warns_of_names_matching_no_listed_tool(
    caplog: pytest.LogCaptureFixture,
) -> None:
    app = web.Application()
    start = reachability.at_start_up(app, [careless(STDIO_UPSTREAM)], seconds=15)
    warned = asyncio.Event()

    class Watch(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if "phantom" in record.getMessage():  # the last of them
                warned.set()

    watch = Watch()
    logging.getLogger("gateway").addHandler(watch)
    try:
        with caplog.at_level(logging.INFO, logger="gateway"):
            start()
            async with asyncio.timeout(20):
                await warned.wait()
    finally:
        logging.getLogger("gateway").removeHandler(watch)
        for stop in app.on_shutdown:
            await stop(app)
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert "route r: tools.rename names 'nope', which matches no tool its upstream lists" in (
        warnings
    )
    assert "route r: tasks.tools names 'ghost', which matches no tool a client sees" in warnings
    assert not any("'say'" in line for line in warnings)  # echo, renamed, is seen as say


async def test_config_check_prints_a_warning_per_name_matching_no_tool(
    tmp_path: Path, sdk_upstream: str
) -> None:
    config = write(
        tmp_path,
        "routes:\n"
        "  - name: sdk\n"
        f"    upstream: {{transport: streamable_http, url: {json.dumps(sdk_upstream)}}}\n"
        "    tools: {rename: {echo: say}, describe: {say: Says}, deny: [fail]}\n"
        "    tasks: {tools: {say: required, fail: optional}}\n",
    )
    code, _, err = await config_check("--config", config)
    assert code == 0, err  # a warning, not a failure
    assert (
        f"{config}: warning: route sdk: tasks.tools names 'fail', which matches no tool "
        "a client sees" in err
    )
    assert "'say'" not in err
