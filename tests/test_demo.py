"""The demo legacy server, driven by the real mcp 1.30 client over stdio and over HTTP+SSE.

Wire details the SDK client cannot show (cancellation, the ignored `task` field) are checked on
`LegacyServer` directly; the fault fakes are checked with plain aiohttp requests.
"""

import asyncio
import json
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiohttp
import jsonschema  # type: ignore[import-untyped]  # a dependency of mcp, without stubs
import pytest
from aiohttp.test_utils import TestClient, TestServer
from aiohttp.web import Application
from mcp import ClientSession, McpError, StdioServerParameters, types
from mcp.client.sse import sse_client
from mcp.client.stdio import stdio_client

from gateway.demo.server import LegacyServer, Message
from gateway.demo.tools import DEMO_TOOLS
from gateway.protocol.errors import METHOD_NOT_FOUND
from tests.fakes import FAULT_HOOKS, SESSION_NOT_FOUND, faulty_streamable_app, legacy_sse_app

REPO_ROOT = Path(__file__).resolve().parent.parent
DEMO = StdioServerParameters(command=sys.executable, args=["-m", "gateway.demo"], cwd=REPO_ROOT)


@asynccontextmanager
async def demo_session(**callbacks: Any) -> AsyncIterator[ClientSession]:
    """An initialized mcp client session on a fresh `python -m gateway.demo` process."""
    async with (
        stdio_client(DEMO) as (read, write),
        ClientSession(read, write, **callbacks) as session,
    ):
        async with asyncio.timeout(10):
            await session.initialize()
        yield session


def text_of(result: types.CallToolResult) -> str:
    assert len(result.content) == 1
    block = result.content[0]
    assert isinstance(block, types.TextContent)
    return block.text


async def test_initialize_echoes_a_supported_version_and_offers_tools_and_logging() -> None:
    async with stdio_client(DEMO) as (read, write), ClientSession(read, write) as session:
        async with asyncio.timeout(10):
            init = await session.initialize()
    assert init.protocolVersion == types.LATEST_PROTOCOL_VERSION
    assert init.serverInfo.name == "gateway-demo"
    assert init.capabilities.tools is not None and init.capabilities.logging is not None
    assert init.capabilities.tasks is None


async def test_tools_list_offers_every_demo_tool_with_a_valid_object_schema() -> None:
    async with demo_session() as session, asyncio.timeout(5):
        listed = await session.list_tools()
    assert [tool.name for tool in listed.tools] == [tool.name for tool in DEMO_TOOLS]
    for tool in listed.tools:
        jsonschema.Draft202012Validator.check_schema(tool.inputSchema)
        assert tool.inputSchema["type"] == "object"


async def test_echo_returns_the_text_as_content_and_structured_content() -> None:
    async with demo_session() as session, asyncio.timeout(5):
        result = await session.call_tool("echo", {"text": "héllo"})
    assert text_of(result) == "héllo"
    assert result.structuredContent == {"text": "héllo"}
    assert not result.isError


async def test_slow_reports_each_step_as_progress_before_its_result() -> None:
    seen: list[tuple[float, float | None, str | None]] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        seen.append((progress, total, message))

    async with demo_session() as session, asyncio.timeout(5):
        result = await session.call_tool(
            "slow", {"seconds": 0.03, "steps": 3}, progress_callback=on_progress
        )
    assert text_of(result) == "slept 0.03 s"
    assert seen == [(1, 3, "step 1/3"), (2, 3, "step 2/3"), (3, 3, "step 3/3")]


async def test_slow_sends_no_progress_when_the_caller_gave_no_token() -> None:
    notifications: list[types.ServerNotification] = []

    async def on_message(message: Any) -> None:
        if isinstance(message, types.ServerNotification):
            notifications.append(message)

    async with demo_session(message_handler=on_message) as session, asyncio.timeout(5):
        result = await session.call_tool("slow", {"seconds": 0.02, "steps": 2})
    assert text_of(result) == "slept 0.02 s"
    assert notifications == []


async def test_ask_greets_the_name_the_user_gives() -> None:
    asked: list[types.ElicitRequestParams] = []

    async def answer(context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        asked.append(params)
        return types.ElicitResult(action="accept", content={"name": "Ada"})

    async with demo_session(elicitation_callback=answer) as session, asyncio.timeout(5):
        result = await session.call_tool("ask", {"question": "Who are you?"})
    assert text_of(result) == "Hello, Ada!"
    [params] = asked
    assert isinstance(params, types.ElicitRequestFormParams)
    assert params.message == "Who are you?"
    assert params.requestedSchema["required"] == ["name"]


@pytest.mark.parametrize("action", ["decline", "cancel"])
async def test_ask_reports_an_unanswered_elicitation(action: str) -> None:
    async def refuse(context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        return types.ElicitResult(action=action)

    async with demo_session(elicitation_callback=refuse) as session, asyncio.timeout(5):
        result = await session.call_tool("ask", {})
    assert text_of(result) == f"No answer ({action})"


async def test_sample_returns_the_text_of_the_clients_model() -> None:
    requests: list[types.CreateMessageRequestParams] = []

    async def model(context: Any, params: types.CreateMessageRequestParams) -> Any:
        requests.append(params)
        return types.CreateMessageResult(
            role="assistant", content=types.TextContent(type="text", text="42"), model="fake"
        )

    async with demo_session(sampling_callback=model) as session, asyncio.timeout(5):
        result = await session.call_tool("sample", {"prompt": "The answer?"})
    assert text_of(result) == "42"
    [params] = requests
    assert params.maxTokens == 100
    assert params.messages[0].content == types.TextContent(type="text", text="The answer?")


async def test_fail_returns_an_is_error_result_not_a_protocol_error() -> None:
    async with demo_session() as session, asyncio.timeout(5):
        result = await session.call_tool("fail", {})
    assert result.isError
    assert text_of(result) == "the tool failed on purpose"


async def test_error_answers_with_a_json_rpc_error() -> None:
    async with demo_session() as session, asyncio.timeout(5):
        with pytest.raises(McpError) as raised:
            await session.call_tool("error", {})
    assert raised.value.error.code == -32000


async def test_bad_arguments_become_an_is_error_result() -> None:
    async with demo_session() as session, asyncio.timeout(5):
        result = await session.call_tool("echo", {})
    assert result.isError


async def test_roots_lists_the_clients_root_uris_one_per_line() -> None:
    async def roots(context: Any) -> types.ListRootsResult:
        uris = ["file:///work/a", "file:///work/b"]
        return types.ListRootsResult(roots=[types.Root(uri=uri) for uri in uris])

    async with demo_session(list_roots_callback=roots) as session, asyncio.timeout(5):
        result = await session.call_tool("roots", {})
    assert text_of(result) == "file:///work/a\nfile:///work/b"


async def test_log_sends_an_info_message_before_its_result() -> None:
    logged: list[types.LoggingMessageNotificationParams] = []

    async def on_log(params: types.LoggingMessageNotificationParams) -> None:
        logged.append(params)

    async with demo_session(logging_callback=on_log) as session, asyncio.timeout(5):
        result = await session.call_tool("log", {"message": "hello"})
    assert text_of(result) == "logged"
    assert [(entry.level, entry.data) for entry in logged] == [("info", "hello")]


async def test_log_level_above_info_silences_the_log_tool() -> None:
    logged: list[types.LoggingMessageNotificationParams] = []

    async def on_log(params: types.LoggingMessageNotificationParams) -> None:
        logged.append(params)

    async with demo_session(logging_callback=on_log) as session, asyncio.timeout(5):
        await session.set_logging_level("warning")
        result = await session.call_tool("log", {"message": "hello"})
    assert text_of(result) == "logged"
    assert logged == []


async def test_sse_app_serves_tools_and_elicitation_to_the_mcp_sse_client(
    aiohttp_server: Any,
) -> None:
    server: TestServer = await aiohttp_server(legacy_sse_app())

    async def answer(context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        return types.ElicitResult(action="accept", content={"name": "Grace"})

    async with (
        sse_client(str(server.make_url("/sse"))) as (read, write),
        ClientSession(read, write, elicitation_callback=answer) as session,
        asyncio.timeout(10),
    ):
        init = await session.initialize()
        echoed = await session.call_tool("echo", {"text": "over sse"})
        greeted = await session.call_tool("ask", {})
    assert init.serverInfo.name == "gateway-demo"
    assert text_of(echoed) == "over sse"
    assert text_of(greeted) == "Hello, Grace!"


async def test_sse_app_rejects_messages_for_an_unknown_session(aiohttp_client: Any) -> None:
    client: TestClient[Any, Application] = await aiohttp_client(legacy_sse_app())
    response = await client.post("/messages?session_id=nope", json={"jsonrpc": "2.0"})
    assert response.status == 404


async def run_legacy(*messages: Message) -> tuple[LegacyServer, asyncio.Queue[Message]]:
    """A LegacyServer fed `messages`, with its output collected in a queue."""
    sent: asyncio.Queue[Message] = asyncio.Queue()
    server = LegacyServer(DEMO_TOOLS, sent.put)
    for message in messages:
        await server.handle(message)
    return server, sent


@pytest.mark.parametrize(
    ("method", "params", "code"),
    [
        ("tools/call", None, -32602),  # params: null is no tool named
        ("tools/call", [], -32602),
        ("tools/call", {"name": {}}, -32602),
        ("tools/call", {"name": "echo", "arguments": {"text": "x"}, "_meta": 5}, None),
        ("logging/setLevel", None, -32602),
        ("initialize", "x", -32602),
    ],
)
async def test_params_of_any_shape_get_an_answer_and_the_server_goes_on(
    method: str, params: object, code: int | None
) -> None:
    """The demo is the README's first upstream, and the gateway relays what a client sends:
    `params: null` on a call left its caller waiting for the gateway's time limit, and on
    logging/setLevel it ended the server, and every call of the session with it."""
    odd = {"jsonrpc": "2.0", "id": 3, "method": method, "params": params}
    cancel = {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": None}
    ping = {"jsonrpc": "2.0", "id": 4, "method": "ping"}
    server, sent = await run_legacy(odd, cancel, ping)
    async with asyncio.timeout(5):
        answers = {m["id"]: m for m in [await sent.get(), await sent.get()]}
    await server.close()
    assert answers[4] == {"jsonrpc": "2.0", "id": 4, "result": {}}
    if code is None:
        assert "result" in answers[3]
    else:
        assert answers[3]["error"]["code"] == code


async def test_a_cancelled_call_is_never_answered() -> None:
    ask = {"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {"name": "ask"}}
    server, sent = await run_legacy(ask)
    async with asyncio.timeout(5):
        elicitation = await sent.get()
        cancel = {"requestId": 7, "reason": "user gave up"}
        await server.handle(
            {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": cancel}
        )
        # Had the cancel been ignored, this answer would wake the ask call, ahead of the echo below.
        accept = {"action": "accept", "content": {"name": "late"}}
        await server.handle({"jsonrpc": "2.0", "id": elicitation["id"], "result": accept})
        echo = {"name": "echo", "arguments": {"text": "next"}}
        await server.handle({"jsonrpc": "2.0", "id": 8, "method": "tools/call", "params": echo})
        assert (await sent.get())["id"] == 8
    await server.close()
    assert sent.empty()


async def test_a_call_under_an_id_already_in_flight_is_refused_and_the_first_answered() -> None:
    """As strict as an SDK server, which routes answers by id: the gateway must never send
    two calls under one id, and a test that would do so fails here, not silently."""
    slow = {"name": "slow", "arguments": {"seconds": 0.2, "steps": 1}}
    first = {"jsonrpc": "2.0", "id": 5, "method": "tools/call", "params": slow}
    echo = {"name": "echo", "arguments": {"text": "second"}}
    again = {"jsonrpc": "2.0", "id": 5, "method": "tools/call", "params": echo}
    server, sent = await run_legacy(first, again)
    async with asyncio.timeout(5):
        refused, answered = await sent.get(), await sent.get()
    await server.close()
    assert refused["id"] == 5 and refused["error"]["code"] == -32600
    assert answered["id"] == 5 and answered["result"]["content"][0]["text"] == "slept 0.2 s"


async def test_a_task_augmented_call_gets_a_plain_tool_result() -> None:
    params = {"name": "echo", "arguments": {"text": "hi"}, "task": {"ttl": 60000}}
    server, sent = await run_legacy(
        {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params}
    )
    async with asyncio.timeout(5):
        answer = await sent.get()
    await server.close()
    assert answer["result"]["content"] == [{"type": "text", "text": "hi"}]
    assert "task" not in answer["result"]


async def test_tasks_methods_are_unknown_to_the_legacy_server() -> None:
    server, sent = await run_legacy({"jsonrpc": "2.0", "id": 1, "method": "tasks/list"})
    await server.close()
    assert sent.get_nowait()["error"]["code"] == METHOD_NOT_FOUND


async def start_faulty_session(
    aiohttp_client: Any, app: Application | None = None
) -> tuple[TestClient[Any, Application], dict[str, str]]:
    """A test client on the faulty app, and the headers of a session it initialized there."""
    client: TestClient[Any, Application] = await aiohttp_client(app or faulty_streamable_app())
    init = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {}}
    response = await client.post("/mcp", json=init)
    assert response.status == 200
    return client, {"Mcp-Session-Id": response.headers["Mcp-Session-Id"]}


def call(tool: str) -> Message:
    return {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": tool}}


async def test_faulty_app_drop_closes_the_connection_without_an_answer(aiohttp_client: Any) -> None:
    client, session = await start_faulty_session(aiohttp_client)
    with pytest.raises(aiohttp.ServerDisconnectedError):
        await client.post("/mcp", json=call("drop"), headers=session)


async def test_faulty_app_garbage_answers_200_with_invalid_json(aiohttp_client: Any) -> None:
    client, session = await start_faulty_session(aiohttp_client)
    response = await client.post("/mcp", json=call("garbage"), headers=session)
    assert response.status == 200
    with pytest.raises(json.JSONDecodeError):
        json.loads(await response.text())


async def test_faulty_app_crash_answers_500_then_forgets_the_session(aiohttp_client: Any) -> None:
    client, session = await start_faulty_session(aiohttp_client)
    crashed = await client.post("/mcp", json=call("crash"), headers=session)
    after = await client.post("/mcp", json=call("echo"), headers=session)
    assert crashed.status == 500
    assert after.status == 404
    assert (await after.json())["error"]["code"] == SESSION_NOT_FOUND


async def test_faulty_app_hang_is_abandoned_when_the_caller_gives_up(aiohttp_client: Any) -> None:
    app = faulty_streamable_app()
    client, session = await start_faulty_session(aiohttp_client, app)

    async def post_hang() -> None:
        await client.post("/mcp", json=call("hang"), headers=session)

    async with asyncio.timeout(5), asyncio.TaskGroup() as group:
        request = group.create_task(post_hang())
        await app[FAULT_HOOKS].arrived["hang"].wait()
        request.cancel()
        await app[FAULT_HOOKS].abandoned.wait()
