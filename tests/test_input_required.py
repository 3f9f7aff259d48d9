"""input_required: upstream elicitation, sampling and roots requests during a task reach the
client, with the related-task meta, and the answers get back to the upstream that asked.

The spec's rules quoted here are from "Input Required Status" and "Associating Task-Related
Messages" in tasks-2025-11-25.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from mcp import ClientSession, types
from mcp.shared.context import RequestContext

from gateway.protocol.errors import INTERNAL_ERROR

from .conftest import (
    DEMO,
    ROOT,
    StartGateway,
    mcp_client,
    start_sdk_upstream,
)
from .helpers import (
    RELATED,
    headers,
    pids,
    raw_session,
    read_messages,
    result_request,
    rpc,
    start_task,
    text,
    upstream_of,
)

KIDS = {"transport": "stdio", "command": ["python", str(ROOT / "tests" / "stdio_upstream.py")]}


def route(upstream: dict[str, Any], **tasks: Any) -> list[dict[str, Any]]:
    return [{"name": "t", "upstream": upstream, "tasks": tasks}]


class Recorder:
    """Callbacks of the real client that remember what they were asked and the task statuses."""

    def __init__(self) -> None:
        self.related: list[str] = []
        self.statuses: list[str] = []

    async def elicit(
        self, ctx: RequestContext[Any, Any], params: types.ElicitRequestParams
    ) -> types.ElicitResult:
        task_id = params.meta.model_dump()[RELATED]["taskId"] if params.meta else None
        self.related.append(task_id or "")
        # Answer with the related task's id: the result then proves the answer reached the
        # call that asked, not some other task's.
        return types.ElicitResult(action="accept", content={"name": task_id or "nobody"})

    async def sample(
        self, ctx: RequestContext[Any, Any], params: types.CreateMessageRequestParams
    ) -> types.CreateMessageResult:
        meta = params.meta.model_dump() if params.meta else {}
        self.related.append(meta.get(RELATED, {}).get("taskId", ""))
        return types.CreateMessageResult(
            role="assistant", model="m", content=types.TextContent(type="text", text="sampled")
        )

    async def on_message(self, message: Any) -> None:
        if isinstance(message, types.ServerNotification) and isinstance(
            message.root, types.TaskStatusNotification
        ):
            self.statuses.append(message.root.params.status)

    def client(self, url: str) -> Any:
        return mcp_client(
            url,
            elicitation_callback=self.elicit,
            sampling_callback=self.sample,
            message_handler=self.on_message,
        )


async def settle(recorder: Recorder, status: str) -> None:
    async with asyncio.timeout(10):
        while status not in recorder.statuses:  # noqa: ASYNC110 - notifications arrive on their own
            await asyncio.sleep(0.02)


@pytest.mark.parametrize("kind", ["stdio", "streamable_http", "mcp2"])
async def test_elicitation_during_a_task_reaches_the_waiting_tasks_result_and_the_answer_returns(
    kind: str, start_gateway: StartGateway, request: pytest.FixtureRequest
) -> None:
    base = await start_gateway(route(upstream_of(kind, request)))
    recorder = Recorder()
    async with recorder.client(f"{base}/t/mcp") as client:
        created = await client.experimental.call_tool_as_task("ask", {})
        # The mcp 1.30 pattern: tasks/result straight away; the question arrives on it.
        result = await client.experimental.get_task_result(
            created.task.taskId, types.CallToolResult
        )
        await settle(recorder, "completed")
    task_id = created.task.taskId
    # "The receiver MUST include the io.modelcontextprotocol/related-task metadata in the request."
    assert recorder.related == [task_id]
    assert text(result) == f"Hello, {task_id}!"
    # "SHOULD move the task to the input_required status", then "transition out" once answered.
    assert recorder.statuses == ["input_required", "working", "completed"]


@pytest.mark.parametrize("kind", ["stdio", "streamable_http"])
async def test_sampling_during_a_task_reaches_the_client_and_the_answer_returns(
    kind: str, start_gateway: StartGateway, request: pytest.FixtureRequest
) -> None:
    base = await start_gateway(route(upstream_of(kind, request)))
    recorder = Recorder()
    async with recorder.client(f"{base}/t/mcp") as client:
        created = await client.experimental.call_tool_as_task("sample", {"prompt": "hi"})
        result = await client.experimental.get_task_result(
            created.task.taskId, types.CallToolResult
        )
        await settle(recorder, "completed")
    assert recorder.related == [created.task.taskId]
    assert "sampled" in text(result)
    assert recorder.statuses == ["input_required", "working", "completed"]


@pytest.mark.parametrize("kind", ["streamable_http", "mcp2"])
async def test_questions_of_two_tasks_in_one_session_each_reach_their_own_call(
    kind: str, start_gateway: StartGateway, request: pytest.FixtureRequest
) -> None:
    base = await start_gateway(route(upstream_of(kind, request)))
    recorder = Recorder()
    async with recorder.client(f"{base}/t/mcp") as client:
        one, two = [await client.experimental.call_tool_as_task("ask", {}) for _ in range(2)]
        results = await asyncio.gather(
            *(
                client.experimental.get_task_result(t.task.taskId, types.CallToolResult)
                for t in (one, two)
            )
        )
    assert [text(r) for r in results] == [
        f"Hello, {one.task.taskId}!",
        f"Hello, {two.task.taskId}!",
    ]
    assert sorted(recorder.related) == sorted([one.task.taskId, two.task.taskId])


async def test_a_task_with_two_open_questions_waits_for_both(start_gateway: StartGateway) -> None:
    url = f"{await start_gateway(route(KIDS))}/t/mcp"
    async with aiohttp.ClientSession() as http:
        session_id, _ = await raw_session(http, url)
        task_id = await start_task(http, url, session_id, "ask_twice", {})
        message = result_request(task_id, 2)
        async with http.post(url, json=message, headers=headers(session_id)) as stream:
            questions = await read_messages(stream, 2)
            assert all(q["method"] == "elicitation/create" for q in questions)
            assert all(q["params"]["_meta"][RELATED] == {"taskId": task_id} for q in questions)
            await answer(http, url, session_id, questions[0], "Ada")
            # One answer is not enough: still input_required.
            got = await rpc(http, url, session_id, "tasks/get", {"taskId": task_id}, 3)
            assert got["result"]["status"] == "input_required"
            await answer(http, url, session_id, questions[1], "Lovelace")
            (final,) = await read_messages(stream, 1)
    assert final["id"] == 2 and final["result"]["content"][0]["text"] == "Ada Lovelace"


async def test_poll_first_then_tasks_result_receives_the_question(
    start_gateway: StartGateway,
) -> None:
    url = f"{await start_gateway(route(DEMO))}/t/mcp"
    async with aiohttp.ClientSession() as http:
        session_id, _ = await raw_session(http, url)
        task_id = await start_task(http, url, session_id, "ask", {})
        # The TS SDK pattern: poll tasks/get; on input_required, call tasks/result.
        async with asyncio.timeout(10):
            status = ""
            while status != "input_required":
                await asyncio.sleep(0.02)  # polling is exactly what this client pattern does
                got = await rpc(http, url, session_id, "tasks/get", {"taskId": task_id}, 2)
                status = got["result"]["status"]
        message = result_request(task_id, 3)
        async with http.post(url, json=message, headers=headers(session_id)) as stream:
            (question,) = await read_messages(stream, 1)
            await answer(http, url, session_id, question, "Grace")
            (final,) = await read_messages(stream, 1)
    assert final["result"]["content"][0]["text"] == "Hello, Grace!"


async def test_a_dropped_tasks_result_stream_gets_its_question_again_on_the_next_call(
    start_gateway: StartGateway,
) -> None:
    url = f"{await start_gateway(route(DEMO))}/t/mcp"
    async with aiohttp.ClientSession() as http:
        session_id, _ = await raw_session(http, url)
        task_id = await start_task(http, url, session_id, "ask", {})
        message = result_request(task_id, 2)
        first = await http.post(url, json=message, headers=headers(session_id))
        (question,) = await read_messages(first, 1)
        first.close()  # the client goes away without answering
        again = {**message, "id": 3}
        async with http.post(url, json=again, headers=headers(session_id)) as stream:
            (repeated,) = await read_messages(stream, 1)
            assert repeated == question  # the same request, same id: not lost
            await answer(http, url, session_id, repeated, "Linus")
            (final,) = await read_messages(stream, 1)
    assert final["id"] == 3 and final["result"]["content"][0]["text"] == "Hello, Linus!"


@pytest.mark.parametrize(
    ("tool", "status", "says"),
    [("ask", "completed", "No answer (cancel)"), ("sample", "failed", "did not answer")],
)
async def test_an_unanswered_question_gets_a_default_answer_and_the_upstream_decides(
    tool: str, status: str, says: str, start_gateway: StartGateway
) -> None:
    url = f"{await start_gateway(route(DEMO, input_timeout_seconds=0.3))}/t/mcp"
    async with aiohttp.ClientSession() as http:
        session_id, _ = await raw_session(http, url)
        args = {"prompt": "x"} if tool == "sample" else {}
        task_id = await start_task(http, url, session_id, tool, args)
        message = result_request(task_id, 2)
        async with http.post(url, json=message, headers=headers(session_id)) as stream:
            question, withdrawn, final = await read_messages(stream, 3)
        got = await rpc(http, url, session_id, "tasks/get", {"taskId": task_id}, 3)
    # Elicitation: the user "dismissed" it ({"action": "cancel"}); sampling: an error.
    assert withdrawn["method"] == "notifications/cancelled"
    assert withdrawn["params"]["requestId"] == question["id"]
    assert got["result"]["status"] == status
    assert says in json.dumps(final)


@pytest.mark.parametrize(
    ("tool", "reply", "status", "says"),
    [
        ("ask", {"result": {"action": "decline"}}, "completed", "No answer (decline)"),
        (
            "sample",
            {"error": {"code": -1, "message": "user rejected sampling"}},
            "failed",
            "user rejected sampling",
        ),
    ],
)
async def test_a_declined_or_refused_question_goes_upstream_and_the_upstream_decides(
    tool: str, reply: dict[str, Any], status: str, says: str, start_gateway: StartGateway
) -> None:
    url = f"{await start_gateway(route(DEMO))}/t/mcp"
    async with aiohttp.ClientSession() as http:
        session_id, _ = await raw_session(http, url)
        args = {"prompt": "x"} if tool == "sample" else {}
        task_id = await start_task(http, url, session_id, tool, args)
        message = result_request(task_id, 2)
        async with http.post(url, json=message, headers=headers(session_id)) as stream:
            (question,) = await read_messages(stream, 1)
            response = {"jsonrpc": "2.0", "id": question["id"], **reply}
            async with http.post(url, json=response, headers=headers(session_id)) as sent:
                assert sent.status == 202
            (final,) = await read_messages(stream, 1)
        got = await rpc(http, url, session_id, "tasks/get", {"taskId": task_id}, 3)
    assert got["result"]["status"] == status
    assert says in json.dumps(final)


async def test_cancelling_a_task_in_input_required_withdraws_the_question_and_stays_cancelled(
    start_gateway: StartGateway,
) -> None:
    url = f"{await start_gateway(route(DEMO))}/t/mcp"
    async with aiohttp.ClientSession() as http:
        session_id, _ = await raw_session(http, url)
        task_id = await start_task(http, url, session_id, "ask", {})
        message = result_request(task_id, 2)
        async with http.post(url, json=message, headers=headers(session_id)) as stream:
            (question,) = await read_messages(stream, 1)
            cancelled = await rpc(http, url, session_id, "tasks/cancel", {"taskId": task_id}, 3)
            withdrawn, final = await read_messages(stream, 2)
            # A late answer changes nothing.
            late = {
                "jsonrpc": "2.0",
                "id": question["id"],
                "result": {"action": "accept", "content": {"name": "x"}},
            }
            async with http.post(url, json=late, headers=headers(session_id)) as sent:
                assert sent.status == 202
        got = await rpc(http, url, session_id, "tasks/get", {"taskId": task_id}, 4)
    assert cancelled["result"]["status"] == "cancelled"
    assert withdrawn["method"] == "notifications/cancelled"
    assert withdrawn["params"]["requestId"] == question["id"]
    assert final["error"]["message"] == "The task was cancelled by request."
    assert got["result"]["status"] == "cancelled"


async def answer(
    http: aiohttp.ClientSession, url: str, session_id: str, question: dict[str, Any], name: str
) -> None:
    response = {
        "jsonrpc": "2.0",
        "id": question["id"],
        "result": {"action": "accept", "content": {"name": name}},
    }
    async with http.post(url, json=response, headers=headers(session_id)) as sent:
        assert sent.status == 202


_ = ClientSession  # the SDK client type, used through Recorder.client


async def test_sdk_client_answers_two_questions_of_one_task(start_gateway: StartGateway) -> None:
    base = await start_gateway(route(KIDS))
    recorder = Recorder()
    async with recorder.client(f"{base}/t/mcp") as client:
        created = await client.experimental.call_tool_as_task("ask_twice", {})
        result = await client.experimental.get_task_result(
            created.task.taskId, types.CallToolResult
        )
    task_id = created.task.taskId
    assert recorder.related == [task_id, task_id]
    assert text(result) == f"{task_id} {task_id}"


async def test_sdk_client_declining_and_refusing_reach_the_upstream(
    start_gateway: StartGateway,
) -> None:
    base = await start_gateway(route(DEMO))

    async def decline(ctx: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        return types.ElicitResult(action="decline")

    async def refuse(ctx: Any, params: types.CreateMessageRequestParams) -> types.ErrorData:
        return types.ErrorData(code=-1, message="user rejected sampling")

    async with mcp_client(
        f"{base}/t/mcp", elicitation_callback=decline, sampling_callback=refuse
    ) as client:
        asked = await client.experimental.call_tool_as_task("ask", {})
        declined = await client.experimental.get_task_result(
            asked.task.taskId, types.CallToolResult
        )
        sampled = await client.experimental.call_tool_as_task("sample", {"prompt": "x"})
        with pytest.raises(Exception) as refused:
            await client.experimental.get_task_result(sampled.task.taskId, types.CallToolResult)
        sampled_task = await client.experimental.get_task(sampled.task.taskId)
    assert text(declined) == "No answer (decline)"
    assert "user rejected sampling" in str(refused.value)
    assert sampled_task.status == "failed"


async def test_sdk_client_that_answers_too_late_leaves_the_default_answer_standing(
    start_gateway: StartGateway,
) -> None:
    base = await start_gateway(route(DEMO, input_timeout_seconds=0.2))

    async def slow_human(ctx: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        # mcp 1.30 runs this inline in its receive loop, so it cannot see the withdrawal;
        # its answer arrives after the gateway already answered the upstream for it.
        await asyncio.sleep(1)
        return types.ElicitResult(action="accept", content={"name": "too late"})

    async with mcp_client(f"{base}/t/mcp", elicitation_callback=slow_human) as client:
        created = await client.experimental.call_tool_as_task("ask", {})
        result = await client.experimental.get_task_result(
            created.task.taskId, types.CallToolResult
        )
    assert text(result) == "No answer (cancel)"


# -- answers the upstream cannot take


@pytest.fixture
def own_sdk_upstream() -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """An SDK upstream process of the test's own, which it may stop, resume or kill."""
    url, proc = start_sdk_upstream()
    try:
        yield url, proc
    finally:
        proc.send_signal(signal.SIGCONT)
        proc.kill()
        proc.wait(10)


async def answer_to(resp: aiohttp.ClientResponse, request_id: int) -> dict[str, Any]:
    """The answer to `request_id` on an SSE response, past any notification before it."""
    while True:
        (message,) = await read_messages(resp, 1)
        if message.get("id") == request_id and "method" not in message:
            return message


async def test_an_answer_the_upstream_cannot_take_is_refused_and_its_question_stays_open(
    start_gateway: StartGateway, own_sdk_upstream: tuple[str, subprocess.Popen[bytes]]
) -> None:
    upstream_url, proc = own_sdk_upstream
    upstream = {"transport": "streamable_http", "url": upstream_url, "request_timeout_seconds": 1}
    url = f"{await start_gateway(route(upstream))}/t/mcp"
    reply: dict[str, Any] = {
        "jsonrpc": "2.0",
        "result": {"action": "accept", "content": {"name": "Ada"}},
    }
    async with aiohttp.ClientSession() as http:
        session_id, _ = await raw_session(http, url)
        task_id = await start_task(http, url, session_id, "ask", {})
        message = result_request(task_id, 2)
        async with http.post(url, json=message, headers=headers(session_id)) as stream:
            (question,) = await read_messages(stream, 1)
            reply["id"] = question["id"]
            # Frozen between asking and the answer: its connections stay up, nothing answers.
            proc.send_signal(signal.SIGSTOP)
            try:
                async with http.post(url, json=reply, headers=headers(session_id)) as refused:
                    status, body = refused.status, await refused.json()
                waiting = await rpc(http, url, session_id, "tasks/get", {"taskId": task_id}, 3)
            finally:
                proc.send_signal(signal.SIGCONT)
            async with http.post(url, json=reply, headers=headers(session_id)) as again:
                assert again.status == 202
            final = await answer_to(stream, 2)
    # A JSON-RPC response gets no JSON-RPC reply: the HTTP status says it was not relayed.
    assert status == 504
    assert body["id"] is None and body["error"]["code"] == INTERNAL_ERROR
    assert waiting["result"]["status"] == "input_required"
    assert final["result"]["content"][0]["text"] == "Hello, Ada!"


async def test_an_upstream_that_dies_while_asking_fails_the_task_and_withdraws_its_question(
    start_gateway: StartGateway, tmp_path: Path
) -> None:
    pid_dir = tmp_path / "pids"
    pid_dir.mkdir()
    kids = {**KIDS, "command": [*KIDS["command"], "--pid-dir", str(pid_dir)]}
    url = f"{await start_gateway(route(kids))}/t/mcp"
    async with aiohttp.ClientSession() as http:
        session_id, _ = await raw_session(http, url)
        task_id = await start_task(http, url, session_id, "ask", {})
        message = result_request(task_id, 2)
        async with http.post(url, json=message, headers=headers(session_id)) as stream:
            (question,) = await read_messages(stream, 1)
            (pid,) = pids(pid_dir)
            os.kill(pid, signal.SIGKILL)
            withdrawn, final = await read_messages(stream, 2)
        # Withdrawn, so there is nothing left to relay it to: accepted and dropped, as the
        # spec has a receiver ignore an answer to a request it no longer waits on.
        late = {"jsonrpc": "2.0", "id": question["id"], "result": {"action": "decline"}}
        async with http.post(url, json=late, headers=headers(session_id)) as sent:
            assert sent.status == 202
        got = await rpc(http, url, session_id, "tasks/get", {"taskId": task_id}, 3)
    assert withdrawn["method"] == "notifications/cancelled"
    assert withdrawn["params"]["requestId"] == question["id"]
    assert got["result"]["status"] == "failed"
    assert got["result"]["statusMessage"] == "the stdio upstream process exited with code -9"
    assert final["error"]["message"] == got["result"]["statusMessage"]
