"""An upstream that breaks: each failure reaches the client as a clear JSON-RPC error, and
the session goes on working afterwards."""

from __future__ import annotations

import time

import pytest
from aiohttp.test_utils import TestServer
from mcp.shared.exceptions import McpError

from gateway.protocol.errors import INTERNAL_ERROR

from .conftest import StartGateway, free_port, mcp_client
from .fakes import FAULT_HOOKS
from .helpers import text


def faulty_route(server: TestServer, **upstream: object) -> list[dict[str, object]]:
    url = str(server.make_url("/mcp"))
    return [
        {"name": "faulty", "upstream": {"transport": "streamable_http", "url": url, **upstream}}
    ]


@pytest.mark.parametrize(
    ("tool", "says"),
    [
        ("drop", "cannot reach the upstream"),
        ("garbage", "invalid answer"),
        ("crash", "HTTP 500"),
    ],
)
async def test_upstream_failure_mid_call_is_a_clear_error_and_the_session_survives(
    tool: str, says: str, start_gateway: StartGateway, faulty_upstream: TestServer
) -> None:
    base = await start_gateway(faulty_route(faulty_upstream))
    async with mcp_client(f"{base}/faulty/mcp") as client:
        with pytest.raises(McpError) as raised:
            await client.call_tool(tool, {})
        assert raised.value.error.code == INTERNAL_ERROR
        assert says in raised.value.error.message
        # `crash` also made the upstream forget every session: the gateway re-initializes it.
        assert text(await client.call_tool("echo", {"text": "still here"})) == "still here"


async def test_a_plain_tool_call_that_hangs_fails_after_the_tools_time_limit(
    start_gateway: StartGateway, faulty_upstream: TestServer
) -> None:
    # A client that never makes tasks gets the time a task of the tool gets, not the
    # shorter limit of the upstream's other requests.
    routes = faulty_route(faulty_upstream, request_timeout_seconds=0.5)
    routes[0]["tasks"] = {"time_limit_seconds": 1.5}
    base = await start_gateway(routes)
    async with mcp_client(f"{base}/faulty/mcp") as client:
        started = time.monotonic()
        with pytest.raises(McpError) as raised:
            await client.call_tool("hang", {})
        assert time.monotonic() - started >= 1.4
        assert raised.value.error.code == INTERNAL_ERROR
        assert (
            "did not finish the tool call within 1.5 s (tasks.time_limit_seconds)"
            in raised.value.error.message
        )
        assert faulty_upstream.app[FAULT_HOOKS].arrived["hang"].is_set()
        assert text(await client.call_tool("echo", {"text": "after"})) == "after"


async def test_unreachable_upstream_fails_initialize_with_a_clear_error(
    start_gateway: StartGateway,
) -> None:
    dead = f"http://127.0.0.1:{free_port()}/mcp"
    base = await start_gateway(
        [{"name": "dead", "upstream": {"transport": "streamable_http", "url": dead}}]
    )
    errors: list[McpError] = []
    try:
        async with mcp_client(f"{base}/dead/mcp"):
            pass
    except* McpError as group:  # the SDK client raises from inside its task groups
        errors = [e for e in _leaves(group) if isinstance(e, McpError)]
    assert [e.error.code for e in errors] == [INTERNAL_ERROR]
    assert "upstream unavailable: cannot reach the upstream" in errors[0].error.message


def _leaves(group: BaseExceptionGroup[BaseException]) -> list[BaseException]:
    return [
        leaf
        for e in group.exceptions
        for leaf in (_leaves(e) if isinstance(e, BaseExceptionGroup) else [e])
    ]
