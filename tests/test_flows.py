"""Journeys of the real mcp 1.30 client through the gateway, over every upstream transport."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest
from mcp import ClientSession, types
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.context import RequestContext
from mcp.shared.exceptions import McpError
from pydantic import FileUrl

from .conftest import DEMO, ROOT, StartGateway, mcp_client
from .helpers import text


async def accept_name(
    ctx: RequestContext[Any, Any], params: types.ElicitRequestParams
) -> types.ElicitResult:
    return types.ElicitResult(action="accept", content={"name": "Ada"})


async def model(
    ctx: RequestContext[Any, Any], params: types.CreateMessageRequestParams
) -> types.CreateMessageResult:
    prompt = params.messages[0].content
    assert isinstance(prompt, types.TextContent)
    return types.CreateMessageResult(
        role="assistant",
        model="test-model",
        content=types.TextContent(type="text", text=f"model says: {prompt.text}"),
    )


async def roots(ctx: RequestContext[Any, Any]) -> types.ListRootsResult:
    return types.ListRootsResult(roots=[types.Root(uri=FileUrl("file:///srv/project"))])


def routes_for(kind: str, sdk_upstream: str, sse_upstream: str) -> list[dict[str, Any]]:
    upstream = {
        "stdio": DEMO,
        "streamable_http": {"transport": "streamable_http", "url": sdk_upstream},
        "sse": {"transport": "sse", "url": sse_upstream},
    }[kind]
    return [{"name": "up", "upstream": upstream}]


TRANSPORTS = ["stdio", "streamable_http", "sse"]


@pytest.mark.parametrize("kind", TRANSPORTS)
async def test_client_lists_and_calls_tools_through_each_transport(
    kind: str, start_gateway: StartGateway, sdk_upstream: str, sse_upstream: str
) -> None:
    base = await start_gateway(routes_for(kind, sdk_upstream, sse_upstream))
    async with mcp_client(f"{base}/up/mcp") as client:
        tools = await client.list_tools()
        assert {"echo", "slow", "ask", "fail"} <= {t.name for t in tools.tools}
        result = await client.call_tool("echo", {"text": "héllo ✓"})
        assert text(result) == "héllo ✓" and not result.isError
        assert (await client.send_ping()) is not None


@pytest.mark.parametrize("kind", TRANSPORTS)
async def test_progress_reaches_the_client_with_its_own_token(
    kind: str, start_gateway: StartGateway, sdk_upstream: str, sse_upstream: str
) -> None:
    base = await start_gateway(routes_for(kind, sdk_upstream, sse_upstream))
    seen: list[tuple[float, float | None, str | None]] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        seen.append((progress, total, message))

    async with mcp_client(f"{base}/up/mcp") as client:
        args = {"steps": 3} if kind == "streamable_http" else {"seconds": 0.3, "steps": 3}
        # The SDK client routes progress by the token it put in _meta; a gateway that leaked
        # its own upstream token would leave `seen` empty.
        await client.call_tool("slow", args, progress_callback=on_progress)
    assert [p for p, _, _ in seen] == [1, 2, 3]
    assert all(total == 3 for _, total, _ in seen)


@pytest.mark.parametrize("kind", TRANSPORTS)
async def test_elicitation_and_sampling_cross_and_answers_return_upstream(
    kind: str, start_gateway: StartGateway, sdk_upstream: str, sse_upstream: str
) -> None:
    base = await start_gateway(routes_for(kind, sdk_upstream, sse_upstream))
    async with mcp_client(
        f"{base}/up/mcp", elicitation_callback=accept_name, sampling_callback=model
    ) as client:
        assert text(await client.call_tool("ask", {})) == "Hello, Ada!"
        assert text(await client.call_tool("sample", {"prompt": "hi"})) == "model says: hi"


async def test_roots_request_and_log_notification_cross_from_a_stdio_upstream(
    start_gateway: StartGateway,
) -> None:
    base = await start_gateway()
    logged: list[types.LoggingMessageNotificationParams] = []

    async def on_log(params: types.LoggingMessageNotificationParams) -> None:
        logged.append(params)

    async with mcp_client(
        f"{base}/demo/mcp", list_roots_callback=roots, logging_callback=on_log
    ) as client:
        assert text(await client.call_tool("roots", {})) == "file:///srv/project"
        await client.call_tool("log", {"message": "hello log"})
    assert [p.data for p in logged] == ["hello log"]


@pytest.mark.parametrize("kind", TRANSPORTS)
async def test_is_error_results_and_json_rpc_errors_pass_through_unchanged(
    kind: str, start_gateway: StartGateway, sdk_upstream: str, sse_upstream: str
) -> None:
    base = await start_gateway(routes_for(kind, sdk_upstream, sse_upstream))
    async with mcp_client(f"{base}/up/mcp") as client:
        failed = await client.call_tool("fail", {})
        assert failed.isError and "failed on purpose" in text(failed)
        if kind == "streamable_http":
            return  # FastMCP turns every tool exception into an isError result
        with pytest.raises(McpError) as raised:
            await client.call_tool("error", {})
        assert raised.value.error.code == -32000
        assert raised.value.error.message == "upstream error on purpose"


async def test_concurrent_calls_in_one_session_each_get_their_own_answer(
    start_gateway: StartGateway,
) -> None:
    base = await start_gateway()
    async with mcp_client(f"{base}/demo/mcp") as client:
        texts = [f"call {i}" for i in range(20)]
        results = await asyncio.gather(*(client.call_tool("echo", {"text": t}) for t in texts))
    assert [text(r) for r in results] == texts


async def test_client_gets_2025_11_25_even_when_the_upstream_negotiates_an_older_version(
    start_gateway: StartGateway, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, "gateway")
    old = {
        "transport": "stdio",
        "command": [
            "python",
            str(ROOT / "tests" / "stdio_upstream.py"),
            "--only-version",
            "2024-11-05",
        ],
    }
    base = await start_gateway([{"name": "old", "upstream": old}])
    async with streamable_http_client(f"{base}/old/mcp") as (read, write, _):
        async with ClientSession(read, write) as client:
            init = await client.initialize()
            assert init.protocolVersion == "2025-11-25"
            assert text(await client.call_tool("echo", {"text": "bridged"})) == "bridged"
    assert "(client 2025-11-25, upstream 2024-11-05)" in caplog.text
