"""A task outlives the session that started it: after DELETE, what the upstream still sends
has nowhere to go and is dropped, open questions get their default answer at once, the task
ends as the upstream decides, and a stdio child is released once the last task has ended.

Tasks are bound to an API key's principal here, so a second session of the same caller can
read what became of a task whose session is gone.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from .conftest import ROOT, StartGateway
from .helpers import headers, pids, raw_session, read_messages, result_request, rpc, wait_until_dead

KEY = "the-api-key-of-the-one-caller-in-these-tests"
AUTH = {
    "mode": "api_keys",
    "api_keys": [{"principal": "ops", "sha256": hashlib.sha256(KEY.encode()).hexdigest()}],
}


def route(upstream: dict[str, Any]) -> list[dict[str, Any]]:
    return [{"name": "t", "upstream": upstream, "auth": AUTH}]


def upstream(kind: str, pid_dir: Path, sdk_upstream: str) -> dict[str, Any]:
    if kind == "streamable_http":
        return {"transport": "streamable_http", "url": sdk_upstream}
    command = ["python", str(ROOT / "tests" / "stdio_upstream.py"), "--pid-dir", str(pid_dir)]
    return {"transport": "stdio", "command": command}


@pytest.fixture
def pid_dir(tmp_path: Path) -> Path:
    path = tmp_path / "pids"
    path.mkdir()
    return path


def caller() -> aiohttp.ClientSession:
    return aiohttp.ClientSession(headers={"Authorization": f"Bearer {KEY}"})


async def start_task(
    http: aiohttp.ClientSession, url: str, session_id: str, tool: str, arguments: dict[str, Any]
) -> str:
    # With a progress token, so the upstream has progress to send after the session is gone.
    params = {"name": tool, "arguments": arguments, "task": {}, "_meta": {"progressToken": "p"}}
    created = await rpc(http, url, session_id, "tools/call", params)
    return str(created["result"]["task"]["taskId"])


async def delete(http: aiohttp.ClientSession, url: str, session_id: str) -> None:
    async with http.delete(url, headers={"Mcp-Session-Id": session_id}) as ended:
        assert ended.status == 200


async def outcome(
    http: aiohttp.ClientSession, url: str, task_id: str
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The task's final status and its tasks/result answer, read from a second session."""
    session_id, _ = await raw_session(http, url)
    async with asyncio.timeout(15):
        result = await rpc(http, url, session_id, "tasks/result", {"taskId": task_id}, 2)
    got = await rpc(http, url, session_id, "tasks/get", {"taskId": task_id}, 3)
    return got["result"], result


@pytest.mark.parametrize("kind", ["stdio", "streamable_http"])
async def test_progress_after_the_session_is_deleted_is_dropped_and_the_task_completes(
    kind: str, start_gateway: StartGateway, sdk_upstream: str, pid_dir: Path
) -> None:
    url = f"{await start_gateway(route(upstream(kind, pid_dir, sdk_upstream)))}/t/mcp"
    arguments: dict[str, Any] = {"steps": 10}
    if kind == "stdio":
        arguments["seconds"] = 1
    async with caller() as http:
        session_id, _ = await raw_session(http, url)
        task_id = await start_task(http, url, session_id, "slow", arguments)
        children = pids(pid_dir)
        # Most of the progress is still to come: it arrives for a session that is gone.
        await delete(http, url, session_id)
        task, result = await outcome(http, url, task_id)
    assert task["status"] == "completed"
    said = result["result"]["content"][0]["text"]
    assert said == ("slept 1 s" if kind == "stdio" else "10 steps done")
    for pid in children:
        await wait_until_dead(pid)  # released once its session's last task had ended


@pytest.mark.parametrize(
    ("kind", "tool", "status", "says"),
    [
        ("stdio", "ask", "completed", "No answer (cancel)"),
        ("stdio", "sample", "failed", "session ended"),
        ("streamable_http", "ask", "completed", "cancel"),
        ("streamable_http", "sample", "failed", "session ended"),
    ],
)
async def test_a_question_pending_when_the_session_is_deleted_gets_its_default_answer_at_once(
    kind: str,
    tool: str,
    status: str,
    says: str,
    start_gateway: StartGateway,
    sdk_upstream: str,
    pid_dir: Path,
) -> None:
    url = f"{await start_gateway(route(upstream(kind, pid_dir, sdk_upstream)))}/t/mcp"
    arguments = {"prompt": "x"} if tool == "sample" else {}
    async with caller() as http:
        session_id, _ = await raw_session(http, url)
        task_id = await start_task(http, url, session_id, tool, arguments)
        children = pids(pid_dir)
        message = result_request(task_id, 2)
        async with http.post(url, json=message, headers=headers(session_id)) as stream:
            (question,) = await read_messages(stream, 1)
            assert question["method"] in ("elicitation/create", "sampling/createMessage")
            # Nobody is left to answer: waiting out tasks.input_timeout_seconds (600 s by
            # default) would only hold the upstream's call.
            await delete(http, url, session_id)
        task, result = await outcome(http, url, task_id)
    assert task["status"] == status
    assert says in json.dumps(result)
    for pid in children:
        await wait_until_dead(pid)
