"""A route of several members (`routes[].upstreams`): one server to clients, made of three real
ones with overlapping tool names (mcp 2.3's MCPServer and mcp 1.30's FastMCP over Streamable
HTTP, and mcp 2.3's stdio server as a child), driven by the real clients of both generations.

What the spec asks of the one server a client sees (2025-11-25, server/tools): "Tool names
SHOULD be unique within a server", which MEMBER__TOOL keeps across members; tools/list
"supports pagination", and a client follows `nextCursor` until it is absent.
"""

from __future__ import annotations

import asyncio
import subprocess
from collections.abc import Iterator
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer
from mcp import types
from mcp.shared.exceptions import McpError
from pydantic import AnyUrl

from gateway.app import create_app
from gateway.config import ConfigError, parse_settings
from gateway.protocol import jsonrpc
from gateway.protocol.errors import INVALID_PARAMS
from gateway.upstream import upstreams_of
from gateway.upstream.fanout import MemberSessions
from gateway.upstream.generation import Bridged
from gateway.upstream.members import MemberHealth

from .conftest import ROOT, StartGateway, free_port, mcp_client, wait_for_port
from .fakes import SEEN, recording_upstream
from .helpers import (
    MCP2_PYTHON,
    needs_mcp2,
    open_session,
    raw_session,
    rpc,
    text,
    wait_terminal,
)
from .test_modern_clients import modern_client

pytestmark = needs_mcp2


def members(py2: str, sdk: str, **extra: Any) -> list[dict[str, Any]]:
    stdio = {
        "name": "local",
        "transport": "stdio",
        "command": [str(MCP2_PYTHON), str(ROOT / "tests" / "mcp2_upstream.py"), "--stdio"],
    }
    return [
        {
            "name": "work",
            "upstreams": [
                {"name": "py2", "transport": "streamable_http", "url": py2},
                {"name": "sdk", "transport": "streamable_http", "url": sdk},
                stdio,
            ],
            "auth": {"list_tasks_without_auth": True},
            **extra,
        }
    ]


class Member:
    """An mcp 2.3 member of a test's own, to kill and start again on its port."""

    def __init__(self) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/mcp"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        command = [str(MCP2_PYTHON), str(ROOT / "tests" / "mcp2_upstream.py"), str(self.port)]
        self.proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_for_port(self.port, self.proc)

    def kill(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait(10)
            self.proc = None


@pytest.fixture
def own_member() -> Iterator[Member]:
    member = Member()
    member.start()
    yield member
    member.kill()


async def test_a_2025_client_sees_one_server_with_every_members_tools(
    start_gateway: StartGateway, mcp2_upstream: str, sdk_upstream: str
) -> None:
    url = f"{await start_gateway(members(mcp2_upstream, sdk_upstream))}/work/mcp"
    async with mcp_client(url) as client:
        names = [tool.name for tool in (await client.list_tools()).tools]
        said = {
            member: text(await client.call_tool(f"{member}__echo", {"text": f"to {member}"}))
            for member in ("py2", "sdk", "local")
        }
    for member in ("py2", "sdk", "local"):
        assert {f"{member}__echo", f"{member}__slow", f"{member}__ask"} <= set(names)
    assert "sdk__lookup" in names and "py2__lookup" not in names
    assert len(names) == len(set(names))
    assert said == {m: f"to {m}" for m in ("py2", "sdk", "local")}


async def test_a_task_per_member_with_progress_and_a_question(
    start_gateway: StartGateway, mcp2_upstream: str, sdk_upstream: str
) -> None:
    url = f"{await start_gateway(members(mcp2_upstream, sdk_upstream))}/work/mcp"

    async def elicit(_: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        return types.ElicitResult(action="accept", content={"name": "Ada"})

    seen: list[float] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        seen.append(progress)

    async with mcp_client(url, elicitation_callback=elicit) as client:
        slow = {
            "py2": {"text": "slow py2", "seconds": 0.3, "steps": 3},
            "local": {"text": "slow local", "seconds": 0.3, "steps": 3},
            "sdk": {"text": "slow sdk", "steps": 3},
        }
        results = {}
        for member, arguments in slow.items():
            created = await client.experimental.call_tool_as_task(f"{member}__slow", arguments)
            task = await wait_terminal(client, created.task.taskId)
            assert task.status == "completed", task
            result = await client.experimental.get_task_result(
                created.task.taskId, types.CallToolResult
            )
            results[member] = text(result)
        # A question a member asks during its task reaches the client (the mcp 1.30 pattern:
        # tasks/result at once, the question on it), and the answer goes back to that member.
        for member in ("py2", "sdk", "local"):
            created = await client.experimental.call_tool_as_task(f"{member}__ask", {})
            result = await client.experimental.get_task_result(
                created.task.taskId, types.CallToolResult
            )
            results[f"{member} asked"] = text(result)
        # A question asked mid-call by a member reaches the client, and its answer the member.
        plain = await client.call_tool(
            "py2__slow", {"text": "p", "steps": 2}, progress_callback=on_progress
        )
        asked = await client.call_tool("local__ask", {"text": "!"})
        sdk_asked = await client.call_tool("sdk__ask", {})
    assert results == {
        "py2": "slow py2",
        "local": "slow local",
        "sdk": "slow sdk",
        "py2 asked": "Hello, Ada!",
        "sdk asked": results["sdk asked"],
        "local asked": "Hello, Ada!",
    }
    assert "Ada" in results["sdk asked"]
    assert text(plain) == "p" and seen == [1.0, 2.0]
    assert text(asked) == "Hello, Ada!!"
    assert "Ada" in text(sdk_asked)


async def test_prompts_resources_and_completions_reach_their_member(
    start_gateway: StartGateway, mcp2_upstream: str, sdk_upstream: str
) -> None:
    url = f"{await start_gateway(members(mcp2_upstream, sdk_upstream))}/work/mcp"
    async with mcp_client(url) as client:
        prompts = [p.name for p in (await client.list_prompts()).prompts]
        prompt = await client.get_prompt("sdk__review", {"code": "x = 1"})
        resources = [str(r.uri) for r in (await client.list_resources()).resources]
        templates = (await client.list_resource_templates()).resourceTemplates
        listed = await client.read_resource(AnyUrl("demo://greeting"))
        templated = await client.read_resource(AnyUrl("demo://items/pear"))  # listed by nobody
        completed = await client.complete(
            types.ResourceTemplateReference(type="ref/resource", uri="demo://items/{item}"),
            {"name": "item", "value": "ap"},
        )
        with pytest.raises(McpError):  # as from each member: neither offers logging
            await client.set_logging_level("warning")
        with pytest.raises(McpError) as unknown:
            await client.read_resource(AnyUrl("demo://nothing"))
    assert "sdk__review" in prompts
    assert "x = 1" in str(prompt.messages[0].content)
    assert resources == ["demo://greeting"]
    assert [t.uriTemplate for t in templates] == ["demo://items/{item}"]
    assert listed.contents[0].text == "Hello from a resource"  # type: ignore[union-attr]
    assert templated.contents[0].text == "item pear"  # type: ignore[union-attr]
    assert completed.completion.values == ["apple", "apricot"]
    # Known to no member: the first in the route's order that offers resources answers (py2).
    assert "demo://nothing" in unknown.value.error.message


async def test_cancelling_a_members_task(
    start_gateway: StartGateway, mcp2_upstream: str, sdk_upstream: str
) -> None:
    url = f"{await start_gateway(members(mcp2_upstream, sdk_upstream))}/work/mcp"
    async with mcp_client(url) as client:
        created = await client.experimental.call_tool_as_task(
            "sdk__slow", {"steps": 50, "text": "never"}
        )
        await client.experimental.cancel_task(created.task.taskId)
        task = await wait_terminal(client, created.task.taskId)
    assert task.status == "cancelled"


async def test_unknown_and_unqualified_names_are_unknown_tools(
    start_gateway: StartGateway, mcp2_upstream: str, sdk_upstream: str
) -> None:
    url = f"{await start_gateway(members(mcp2_upstream, sdk_upstream))}/work/mcp"
    async with aiohttp.ClientSession() as http:
        session_id = await open_session(http, url)
        for i, name in enumerate(["echo", "nobody__echo", "py2__", "__echo"]):
            answer = await rpc(http, url, session_id, "tools/call", {"name": name}, i + 2)
            assert answer["error"]["code"] == INVALID_PARAMS, answer
            assert answer["error"]["message"] == f"Unknown tool: {name}"


async def test_curation_names_tools_as_clients_see_them(
    start_gateway: StartGateway, mcp2_upstream: str, sdk_upstream: str
) -> None:
    tools = {
        "allow": ["py2__*", "sdk__echo", "say"],  # globs see the client's names
        "deny": ["py2__ask"],
        "rename": {"local__echo": "say"},
    }
    routes = members(mcp2_upstream, sdk_upstream, tools=tools)
    url = f"{await start_gateway(routes)}/work/mcp"
    async with mcp_client(url) as client:
        names = sorted(tool.name for tool in (await client.list_tools()).tools)
        said = text(await client.call_tool("say", {"text": "renamed"}))
        with pytest.raises(McpError):
            await client.call_tool("py2__ask", {})
    assert names == ["py2__echo", "py2__slow", "say", "sdk__echo"]
    assert said == "renamed"


@pytest.mark.slow
async def test_the_mcp_2_3_client_on_both_generations(
    start_gateway: StartGateway, mcp2_upstream: str, sdk_upstream: str
) -> None:
    url = f"{await start_gateway(members(mcp2_upstream, sdk_upstream))}/work/mcp"
    for mode in ("legacy", "2026-07-28"):
        # The client runs in a child (another venv), beside the gateway on this loop.
        result = await asyncio.to_thread(modern_client, url, mode, "echo:local__echo")
        assert result["echo"][0]["text"] == "modern", (mode, result)
        assert {"py2__echo", "sdk__echo", "local__echo"} <= set(result["tools"])
        asked = await asyncio.to_thread(modern_client, url, mode, "ask:py2__ask")
        assert "mcp-2.3" in str(asked["content"]), (mode, asked)


async def test_after_a_restart_each_members_session_carries_on(
    make_settings: Any, mcp2_upstream: str, sdk_upstream: str
) -> None:
    # The session's record keeps every member's upstream session; a running task fails as
    # on any route (its tool is not repeatable), a finished one keeps its result.
    settings = make_settings(members(mcp2_upstream, sdk_upstream))
    first = TestServer(create_app(settings), host="127.0.0.1")
    await first.start_server()
    url = str(first.make_url("/work/mcp"))
    async with aiohttp.ClientSession() as http:
        session_id, result = await raw_session(http, url)
        done = await rpc(http, url, session_id, "tools/call", {**echo("sdk", "kept"), "task": {}})
        slow = {"name": "py2__slow", "arguments": {"text": "s", "seconds": 30}, "task": {}}
        running = await rpc(http, url, session_id, "tools/call", slow, 2)
        done_id = done["result"]["task"]["taskId"]
        running_id = running["result"]["task"]["taskId"]
        await rpc(http, url, session_id, "tasks/result", {"taskId": done_id}, 3)
    await first.close()

    second = TestServer(create_app(settings), host="127.0.0.1")  # the same database file
    await second.start_server()
    url = str(second.make_url("/work/mcp"))
    try:
        async with aiohttp.ClientSession() as http:
            kept = await rpc(http, url, session_id, "tasks/result", {"taskId": done_id}, 4)
            lost = await rpc(http, url, session_id, "tasks/get", {"taskId": running_id}, 5)
            again = [
                await rpc(http, url, session_id, "tools/call", echo(m, f"again {m}"), 6 + i)
                for i, m in enumerate(("py2", "sdk", "local"))
            ]
    finally:
        await second.close()
    assert result["serverInfo"]["name"] == "work"
    assert kept["result"]["content"][0]["text"] == "kept"
    assert lost["result"]["status"] == "failed"
    texts = [answer["result"]["content"][0]["text"] for answer in again]
    assert texts == ["again py2", "again sdk", "again local"]


def echo(member: str, said: str) -> dict[str, Any]:
    return {"name": f"{member}__echo", "arguments": {"text": said}}


async def test_a_member_killed_drops_out_and_comes_back(
    start_gateway: StartGateway, sdk_upstream: str, own_member: Member
) -> None:
    url = f"{await start_gateway(members(own_member.url, sdk_upstream))}/work/mcp"
    async with mcp_client(url) as client:
        assert "py2__echo" in [t.name for t in (await client.list_tools()).tools]
        slow = {"text": "cut", "seconds": 30, "steps": 30}
        created = await client.experimental.call_tool_as_task("py2__slow", slow)
        own_member.kill()  # mid-run: its task fails, naming the member
        task = await wait_terminal(client, created.task.taskId)
        assert task.status == "failed" and "member py2" in str(task.statusMessage), task
        with pytest.raises(McpError) as failed:
            await client.call_tool("py2__echo", {"text": "x"})
        assert "member py2" in failed.value.error.message
        names = [t.name for t in (await client.list_tools()).tools]
        assert "py2__echo" not in names and "sdk__echo" in names
        assert text(await client.call_tool("sdk__echo", {"text": "still"})) == "still"
        own_member.start()
        # A call of its tool tries it at once (a list waits RETRY_SECONDS to ask again).
        assert text(await client.call_tool("py2__echo", {"text": "back"})) == "back"
        assert "py2__echo" in [t.name for t in (await client.list_tools()).tools]


def careless_member(tools_list: Any) -> web.Application:
    """A member that answers tools/list with `tools_list` (a result, or an error); it bends:
    stateless, each answer on its own POST, as it exists only to be careless in one place."""

    async def post(request: web.Request) -> web.Response:
        message: dict[str, Any] = await request.json()
        if "id" not in message:
            return web.Response(status=202)
        reply: dict[str, Any] = {"jsonrpc": "2.0", "id": message["id"], "result": {}}
        if message["method"] == "initialize":
            reply["result"] = {
                "protocolVersion": "2025-11-25",
                "capabilities": {"tools": {}},
                "serverInfo": {"name": "careless", "version": "1"},
            }
        elif message["method"] == "tools/list":
            reply = {"jsonrpc": "2.0", "id": message["id"], **tools_list}
        return web.json_response(reply)

    app = web.Application()
    app.router.add_post("/mcp", post)
    return app


GOOD = {"name": "good", "inputSchema": {"type": "object"}}


@pytest.mark.parametrize(
    ("tools_list", "shown"),
    [
        # Items that are no tools are left out, a cursor that is no string ends its pages.
        (
            {"result": {"tools": [{"name": 5}, "x", {}, GOOD], "nextCursor": 12}},
            ["odd__good"],
        ),
        ({"result": {"tools": "not a list"}}, []),
        ({"error": {"code": -32603, "message": "broken"}}, []),
        ({"result": {"tools": [{"name": "big", "description": "x" * 40_000}]}}, []),  # too large
    ],
)
async def test_a_careless_members_tools_list_costs_only_its_own_tools(
    start_gateway: StartGateway, sdk_upstream: str, tools_list: Any, shown: list[str]
) -> None:
    careless = TestServer(careless_member(tools_list), host="127.0.0.1")
    await careless.start_server()
    try:
        route = {
            "name": "work",
            "max_result_bytes": 32768,
            "upstreams": [
                {
                    "name": "odd",
                    "transport": "streamable_http",
                    "url": str(careless.make_url("/mcp")),
                },
                {"name": "sdk", "transport": "streamable_http", "url": sdk_upstream},
            ],
        }
        url = f"{await start_gateway([route])}/work/mcp"
        async with mcp_client(url) as client:
            listed = await client.list_tools()
            said = text(await client.call_tool("sdk__echo", {"text": "fine"}))
    finally:
        await careless.close()
    names = [tool.name for tool in listed.tools]
    assert [n for n in names if n.startswith("odd__")] == shown
    assert "sdk__echo" in names and listed.nextCursor is None
    assert said == "fine"


async def test_a_header_one_member_is_given_never_reaches_another(
    start_gateway: StartGateway, recorder: TestServer
) -> None:
    other = TestServer(recording_upstream(), host="127.0.0.1")
    await other.start_server()
    try:
        given = {"transport": "streamable_http", "url": str(recorder.make_url("/mcp"))}
        plain = {"transport": "streamable_http", "url": str(other.make_url("/mcp"))}
        upstreams = [{"name": "a", "forward_headers": ["X-Team"], **given}, {"name": "b", **plain}]
        url = f"{await start_gateway([{'name': 'work', 'upstreams': upstreams}])}/work/mcp"
        async with aiohttp.ClientSession(headers={"X-Team": "blue"}) as http:
            session_id = await open_session(http, url)
            for i, name in enumerate(("a__echo", "b__echo")):
                await rpc(http, url, session_id, "tools/call", {"name": name}, i + 2)
        teams = {
            member: {h.get("X-Team") for h in server.app[SEEN]}
            for member, server in (("a", recorder), ("b", other))
        }
    finally:
        await other.close()
    assert teams == {"a": {"blue"}, "b": {None}}


def test_careless_members_are_refused_naming_the_key() -> None:
    def parse(route: dict[str, Any]) -> None:
        parse_settings({"routes": [{"name": "r", **route}]}, "f.yaml")

    http = {"transport": "streamable_http", "url": "http://127.0.0.1:1/mcp"}
    cases: dict[str, dict[str, Any]] = {
        "two members are named": {"upstreams": [{"name": "a", **http}, {"name": "A", **http}]},
        "not both": {"upstream": http, "upstreams": [{"name": "a", **http}]},
        "upstreams[0].name: 'a__b' is not a member name": {"upstreams": [{"name": "a__b", **http}]},
        "upstreams[0].name: '_a' is not a member name": {"upstreams": [{"name": "_a", **http}]},
        "upstreams[0].name: 'a\\x00' is not a member name": {
            "upstreams": [{"name": "a\x00", **http}]
        },
        "upstreams: Tuple should have at most 16 items": {
            "upstreams": [{"name": f"m{i}", **http} for i in range(17)]
        },
        "upstreams: Tuple should have at least 1 item": {"upstreams": []},
        "upstreams[1].modern: native is for a route with one upstream (or one member)": {
            "upstreams": [{"name": "a", **http}, {"name": "b", "modern": "native", **http}]
        },
    }
    for expected, route in cases.items():
        with pytest.raises(ConfigError) as raised:
            parse(route)
        assert expected in str(raised.value), str(raised.value)


def test_a_route_of_one_member_reaches_it_on_its_own_wire_as_a_plain_route_does() -> None:
    # The 2026-07-28 wire of a route of one member is its member's (`modern`, `auto` by
    # default: natively when the member speaks 2026-07-28, as a plain route's upstream): one
    # always bridged failed every MRTR and subscriptions/listen conformance scenario the
    # plain route passes. A route of several stays bridged.
    http = {"transport": "streamable_http", "url": "http://127.0.0.1:1/mcp"}

    def upstream(*members: dict[str, Any]) -> Any:
        settings = parse_settings({"routes": [{"name": "r", "upstreams": list(members)}]}, "f")
        return upstreams_of(settings.routes[0], "routes[0]")

    one = upstream({"name": "a", "modern": "native", **http})
    assert one.single() is one.members["a"]
    assert one.wire is one.members["a"].wire and one.wire.describe()[0] == "native"
    assert upstream({"name": "a", **http}).wire.auto  # learned, as a plain route's
    several = upstream({"name": "a", **http}, {"name": "b", **http})
    assert isinstance(several.wire, Bridged)
    with pytest.raises(RuntimeError):
        several.single()


class _Above:
    """The session above a `MemberSessions`: what it is told, and about which request."""

    busy = False
    listening = False

    def __init__(self) -> None:
        self.streams: list[tuple[object, bool]] = []
        self.related: list[object] = []

    def on_server_message(self, message: object, related: object) -> None:
        self.related.append(related)

    def on_stream(self, related: object, interrupted: bool) -> None:
        self.streams.append((related, interrupted))


class _SseMember:
    """A member that frames each answer as SSE and sends a progress notification first."""

    busy = False
    on_reestablished = None

    def __init__(self, listener: Any) -> None:
        self._listener = listener

    async def call(self, request: Any, **_: Any) -> Any:
        self._listener.on_stream(request.id, False)
        note = {"progressToken": 1, "progress": 1}
        self._listener.on_server_message(
            jsonrpc.Notification(jsonrpc="2.0", method="notifications/progress", params=note),
            request.id,
        )
        return jsonrpc.Response(jsonrpc="2.0", id=request.id, result={"tools": [{"name": "t"}]})


@pytest.mark.parametrize("members", [["a"], ["a", "b"]])
async def test_a_list_page_relates_each_members_stream_to_the_clients_request(
    members: list[str],
) -> None:
    # A page asks each member under an id of its own; the member's SSE framing and
    # notifications relate to that id, and must reach the client's request: through a route
    # of one member, tools/list came back as JSON where the plain route relays the upstream's
    # SSE (conformance server-sse-multiple-streams: SUCCESS directly, INFO through it).
    above = _Above()
    makers: dict[str, Any] = dict.fromkeys(members, _SseMember)  # (a client's calls only)
    sessions = MemberSessions("r", makers, above, MemberHealth("r"))
    request = jsonrpc.Request(jsonrpc="2.0", id="c-7", method="tools/list", params={})
    answer = await sessions.call(request)
    assert isinstance(answer, jsonrpc.Response) and answer.id == "c-7"
    assert len(answer.result["tools"]) == len(members)
    assert above.streams == [("c-7", False)] * len(members)
    assert above.related == ["c-7"] * len(members)
