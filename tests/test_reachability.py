"""`gateway.upstream.reachability` in-process: the probe of one route's upstream that `config check`
and the start-up check share, against a real HTTP+SSE upstream, a stdio child and an address
nothing listens on; and the start-up check's log lines (the process tests of both are in
`test_config_check.py` and `test_start_output.py`)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from gateway.commands.config_check import HEADER
from gateway.commands.config_check import main as config_check_main
from gateway.config import RouteConfig
from gateway.demo.tools import DEMO_TOOLS
from gateway.upstream import reachability

from .conftest import ROOT
from .fakes import legacy_sse_app

STDIO_UPSTREAM = str(ROOT / "tests" / "stdio_upstream.py")

Serve = Callable[[web.Application], Awaitable[TestServer]]


@pytest.fixture
def restored_logging() -> Iterator[None]:
    """The command sets up logging for its process (root's handlers, the gateway's level):
    in-process, every later test's log capture would depend on it."""
    root, gateway = logging.getLogger(), logging.getLogger("gateway")
    handlers, levels = root.handlers[:], (root.level, gateway.level)
    yield
    root.handlers[:] = handlers
    root.setLevel(levels[0])
    gateway.setLevel(levels[1])


def route(name: str, upstream: dict[str, object]) -> RouteConfig:
    return RouteConfig.model_validate({"name": name, "upstream": upstream})


async def test_a_reachable_upstream_is_counted_and_an_unreachable_one_named(
    aiohttp_server: Serve,
) -> None:
    legacy = await aiohttp_server(legacy_sse_app())
    sse = route("sse", {"transport": "sse", "url": f"http://127.0.0.1:{legacy.port}/sse"})
    child = route("child", {"transport": "stdio", "command": ["python", STDIO_UPSTREAM]})
    nowhere = route(
        "nowhere",
        {"transport": "streamable_http", "url": "http://user:s3cret@127.0.0.1:9/mcp?key=s3cret"},
    )
    reached_sse, reached_child, lost = await asyncio.gather(
        reachability.check(sse, "routes[0]", 10),
        reachability.check(child, "routes[1]", 10),
        reachability.check(nowhere, "routes[2]", 5),
    )
    assert reached_sse.reached is not None and reached_sse.reached.tools > 0
    assert reached_child.reached is not None
    assert reached_child.reached.tools == len(DEMO_TOOLS) + 3
    assert lost.reached is None and lost.failure is not None
    assert "s3cret" not in lost.failure


async def test_the_start_up_check_warns_of_each_unreachable_route(
    caplog: pytest.LogCaptureFixture,
) -> None:
    app = web.Application()
    child = route("child", {"transport": "stdio", "command": ["python", STDIO_UPSTREAM]})
    nowhere = route("nowhere", {"transport": "streamable_http", "url": "http://127.0.0.1:9/mcp"})
    start = reachability.at_start_up(app, [child, nowhere], seconds=10)
    both = asyncio.Event()

    seen: list[logging.LogRecord] = []

    class Two(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if record.name == "gateway":
                seen.append(record)
            if len(seen) == 2:
                both.set()

    counter = Two()
    logging.getLogger("gateway").addHandler(counter)
    try:
        with caplog.at_level(logging.INFO, logger="gateway"):
            start()
            async with asyncio.timeout(15):
                await both.wait()
    finally:
        logging.getLogger("gateway").removeHandler(counter)
    lines = {r.getMessage().split(":")[0]: r for r in seen}
    assert lines["route child"].levelno == logging.INFO
    assert "answered" in lines["route child"].getMessage()
    assert lines["route nowhere"].levelno == logging.WARNING
    assert "failed its check" in lines["route nowhere"].getMessage()
    for stop in app.on_shutdown:
        await stop(app)


async def test_config_check_in_process_prints_the_table_and_exits_0(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], restored_logging: None
) -> None:
    config = tmp_path / "gateway.yaml"
    config.write_text(
        "routes:\n"
        "  - name: child\n"
        f"    upstream: {{transport: stdio, command: [python, {STDIO_UPSTREAM}]}}\n"
    )
    status = await asyncio.to_thread(config_check_main, ["check", "--config", str(config)])
    out = capsys.readouterr().out
    assert status == 0
    assert tuple(out.splitlines()[0].split()) == HEADER
    assert "child" in out and "stdio" in out


async def test_config_check_in_process_names_an_unreachable_route_and_exits_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], restored_logging: None
) -> None:
    config = tmp_path / "gateway.yaml"
    config.write_text(
        "routes:\n"
        "  - {name: nowhere, upstream: {transport: streamable_http, url: 'http://127.0.0.1:9/mcp'}}\n"
    )
    status = await asyncio.to_thread(
        config_check_main, ["check", "--config", str(config), "--timeout", "5"]
    )
    captured = capsys.readouterr()
    assert status == 2
    assert "nowhere" in captured.err
