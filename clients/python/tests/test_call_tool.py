"""`client.call_tool()` with `TasksExtension()`: a call made a task looks like a plain call."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import anyio
import httpx2
import pytest
from conftest import Gateway
from mcp import Client, MCPError
from mcp.client import Transport
from mcp.client.session import ClientRequestContext
from mcp.client.streamable_http import streamable_http_client
from mcp.types import (
    CallToolResult,
    CreateMessageRequestParams,
    CreateMessageResult,
    ElicitRequestParams,
    ElicitResult,
    ListRootsResult,
    Root,
    TextContent,
)

from mcp_tasks_client import EXTENSION_ID, DetailedTask, TasksExtension, resume_task

pytestmark = pytest.mark.anyio

MISSING_REQUIRED_CLIENT_CAPABILITY = -32021
#: The demo's `error` tool answers with this JSON-RPC error.
DEMO_ERROR = -32000


class Statuses:
    """An `on_status` that keeps what it is given, and an event per status seen."""

    def __init__(self) -> None:
        self.seen: list[DetailedTask] = []
        self.created = anyio.Event()

    async def __call__(self, task: DetailedTask) -> None:
        self.seen.append(task)
        self.created.set()

    @property
    def statuses(self) -> list[str]:
        return [task.status for task in self.seen]


class Wire:
    """An HTTP client for `streamable_http_client` that keeps every POST it sends."""

    def __init__(self) -> None:
        self.posts: list[httpx2.Request] = []
        self.http = httpx2.AsyncClient(timeout=30, event_hooks={"request": [self._record]})

    async def _record(self, request: httpx2.Request) -> None:
        if request.method == "POST":
            self.posts.append(request)

    def transport(self, url: str) -> Transport:
        return streamable_http_client(url, http_client=self.http)

    def sent(self, prefix: str) -> list[tuple[httpx2.Headers, dict[str, Any]]]:
        """The requests sent whose method starts with `prefix`: headers and JSON body."""
        bodies = [(request.headers, json.loads(request.content)) for request in self.posts]
        return [(headers, body) for headers, body in bodies if body["method"].startswith(prefix)]


def text(result: CallToolResult) -> str:
    block = result.content[0]
    assert isinstance(block, TextContent)
    return block.text


async def answer_name(context: ClientRequestContext, params: ElicitRequestParams) -> ElicitResult:
    return ElicitResult(action="accept", content={"name": "Ada"})


async def answer_sampling(
    context: ClientRequestContext, params: CreateMessageRequestParams
) -> CreateMessageResult:
    reply = TextContent(type="text", text="sampled by the test")
    return CreateMessageResult(role="assistant", content=reply, model="test")


async def answer_roots(context: ClientRequestContext) -> ListRootsResult:
    return ListRootsResult(roots=[Root(uri="file:///tests/root")])


async def test_slow_call_returns_its_result_and_reports_progress_as_status(
    gateway: Gateway,
) -> None:
    seen = Statuses()
    async with Client(gateway.url(), extensions=[TasksExtension(on_status=seen)]) as client:
        result = await client.call_tool("slow", {"seconds": 1.5, "steps": 3})

    assert text(result) == "slept 1.5 s"
    assert seen.statuses[0] == "working"
    assert seen.statuses[-1] == "completed"
    assert len({task.task_id for task in seen.seen}) == 1
    assert any("step" in (task.status_message or "") for task in seen.seen)


async def test_question_inside_a_task_is_answered_by_the_elicitation_callback(
    gateway: Gateway,
) -> None:
    seen = Statuses()
    async with Client(
        gateway.url("required"),
        extensions=[TasksExtension(on_status=seen)],
        elicitation_callback=answer_name,
    ) as client:
        result = await client.call_tool("ask", {})

    assert text(result) == "Hello, Ada!"
    asked = [task for task in seen.seen if task.status == "input_required"]
    assert asked and asked[0].input_requests
    [request] = asked[0].input_requests.values()
    assert request["method"] == "elicitation/create"


async def test_sampling_and_roots_questions_of_tasks_reach_their_callbacks(
    gateway: Gateway,
) -> None:
    seen = Statuses()
    async with Client(
        gateway.url("required"),
        extensions=[TasksExtension(on_status=seen)],
        sampling_callback=answer_sampling,
        list_roots_callback=answer_roots,
    ) as client:
        sampled = await client.call_tool("sample", {"prompt": "say something"})
        rooted = await client.call_tool("roots", {})

    assert text(sampled) == "sampled by the test"
    assert text(rooted) == "file:///tests/root"
    assert seen.statuses.count("input_required") == 2


async def test_question_before_a_task_is_an_mrtr_round_and_no_task(gateway: Gateway) -> None:
    seen = Statuses()
    async with Client(
        gateway.url(), extensions=[TasksExtension(on_status=seen)], elicitation_callback=answer_name
    ) as client:
        result = await client.call_tool("ask", {})

    assert text(result) == "Hello, Ada!"
    assert seen.seen == []


async def test_required_tool_runs_as_a_task_with_the_extension_and_is_refused_without(
    gateway: Gateway,
) -> None:
    seen = Statuses()
    async with Client(
        gateway.url("required"), extensions=[TasksExtension(on_status=seen)]
    ) as client:
        result = await client.call_tool("slow", {"seconds": 0.2, "steps": 1})
    async with Client(gateway.url("required")) as plain:
        with pytest.raises(MCPError) as refused:
            await plain.call_tool("slow", {"seconds": 0.2, "steps": 1})

    assert text(result) == "slept 0.2 s"
    assert seen.statuses[-1] == "completed"
    assert refused.value.code == MISSING_REQUIRED_CLIENT_CAPABILITY
    assert refused.value.data["requiredCapabilities"]["extensions"] == {EXTENSION_ID: {}}


async def test_tool_error_result_is_returned_and_a_failed_task_raises_its_error(
    gateway: Gateway,
) -> None:
    seen = Statuses()
    async with Client(
        gateway.url("required"), extensions=[TasksExtension(on_status=seen)]
    ) as client:
        failed_tool = await client.call_tool("fail", {})
        with pytest.raises(MCPError) as failed_call:
            await client.call_tool("error", {})

    assert failed_tool.is_error is True
    assert text(failed_tool) == "the tool failed on purpose"
    assert failed_call.value.code == DEMO_ERROR
    assert seen.statuses.count("completed") == 1
    assert seen.statuses[-1] == "failed"


async def test_cancelling_the_call_sends_tasks_cancel_and_the_task_ends_cancelled(
    gateway: Gateway,
) -> None:
    seen = Statuses()
    wire = Wire()
    async with (
        wire.http,
        Client(
            wire.transport(gateway.url()), extensions=[TasksExtension(on_status=seen)]
        ) as client,
    ):
        async with asyncio.TaskGroup() as group:
            call = group.create_task(client.call_tool("slow", {"seconds": 60, "steps": 60}))
            with anyio.fail_after(10):
                await seen.created.wait()
            call.cancel()
        task_id = seen.seen[0].task_id
        cancels = [body["params"]["taskId"] for _, body in wire.sent("tasks/cancel")]
        handle = resume_task(client, task_id)
        with anyio.fail_after(10):
            while (status := (await handle.status()).status) == "working":  # noqa: ASYNC110
                await anyio.sleep(0.05)

    assert call.cancelled()
    assert cancels == [task_id]
    assert status == "cancelled"


async def test_tasks_requests_name_their_task_and_declare_the_extension(gateway: Gateway) -> None:
    wire = Wire()
    async with (
        wire.http,
        Client(
            wire.transport(gateway.url("required")),
            extensions=[TasksExtension()],
            elicitation_callback=answer_name,
        ) as client,
    ):
        await client.call_tool("ask", {})

    sent = wire.sent("tasks/")
    assert {body["method"] for _, body in sent} == {"tasks/get", "tasks/update"}
    for headers, body in sent:
        assert headers["mcp-method"] == body["method"]
        assert headers["mcp-name"] == body["params"]["taskId"]
        capabilities = body["params"]["_meta"]["io.modelcontextprotocol/clientCapabilities"]
        assert capabilities["extensions"] == {EXTENSION_ID: {}}
