"""A crash costs no safe call: tasks of tools a route marks repeatable run again after a kill -9,
over real processes, with the same task id; the others fail as before."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from .conftest import free_port
from .fakes import FAULT_HOOKS
from .helpers import (
    RELATED,
    WITH_ELICITATION,
    WITH_TASKS,
    get_task,
    headers,
    modern_inputs,
    modern_rpc,
    modern_status,
    modern_terminal,
    open_session,
    read_messages,
    result_request,
    rpc,
    start_process,
    start_task,
    task_terminal,
    write_config,
)

DEMO = "{transport: stdio, command: [python, -m, gateway.demo]}"


async def status_of(
    http: aiohttp.ClientSession,
    url: str,
    session: str,
    task_id: str,
    status: str,
    says: str = "",
) -> dict[str, Any]:
    """Polls until the task has `status` and a statusMessage holding `says`."""
    async with asyncio.timeout(20):
        while True:
            task = await get_task(http, url, session, task_id)
            if task["status"] == status and says in task.get("statusMessage", ""):
                return task
            await asyncio.sleep(0.1)


async def test_a_kill_reruns_repeatable_tasks_and_fails_the_others(
    tmp_path: Path, sdk_upstream: str
) -> None:
    http_upstream = f"{{transport: streamable_http, url: {json.dumps(sdk_upstream)}}}"
    routes = (
        "routes:\n"
        f"  - {{name: safe, upstream: {DEMO}, tasks: {{repeatable: [slow], max_attempts: 3}}}}\n"
        f"  - {{name: once, upstream: {DEMO}, tasks: {{repeatable: [slow], max_attempts: 1}}}}\n"
        f"  - {{name: plain, upstream: {DEMO}}}\n"
        f"  - {{name: http, upstream: {http_upstream}, tasks: {{repeatable: [slow]}}}}\n"
    )
    port = free_port()
    config = write_config(tmp_path, port, routes=routes)
    base = f"http://127.0.0.1:{port}"
    slow_demo = {"seconds": 2.5, "steps": 5}
    started: dict[str, tuple[str, str]] = {}
    proc = start_process(config, port)
    try:
        async with aiohttp.ClientSession() as http:
            # Every session first (each starts a stdio child, a second or more on a busy
            # machine), then the calls at once: the kill must find each 2.5 s call running.
            names = ("safe", "once", "plain", "http")
            sessions = {name: await open_session(http, f"{base}/{name}/mcp") for name in names}
            for name, session in sessions.items():
                url = f"{base}/{name}/mcp"
                arguments = {"steps": 50} if name == "http" else slow_demo
                started[name] = (session, await start_task(http, url, session, "slow", arguments))
            await asyncio.sleep(0.5)  # every call is under way upstream
    finally:
        proc.kill()  # kill -9: nothing is written on the way out
        proc.wait(10)
    proc = start_process(config, port, audit=tmp_path / "restarted.audit")
    try:
        async with aiohttp.ClientSession() as http:
            outcomes: dict[str, dict[str, Any]] = {}
            seen: dict[str, list[str]] = {}
            for name, (session, task_id) in started.items():
                seen[name] = []
                outcome = await task_terminal(
                    http, f"{base}/{name}/mcp", session, task_id, seen=seen[name]
                )
                outcomes[name] = outcome
    finally:
        proc.terminate()
        proc.wait(15)
    # The same task ids: the repeatable ones ran again and completed; the others failed.
    assert outcomes["safe"]["status"] == "completed"
    assert "restarted after the gateway stopped: attempt 2 of 3" in seen["safe"]
    assert outcomes["http"]["status"] == "completed"
    assert outcomes["plain"]["status"] == "failed"
    assert outcomes["plain"]["statusMessage"] == "interrupted: gateway restarted"
    assert outcomes["once"]["status"] == "failed"
    assert outcomes["once"]["statusMessage"] == (
        "interrupted: gateway restarted; not run again after 1 attempts"
    )
    audit = (tmp_path / "restarted.audit").read_text()
    assert '"event":"task_rerun"' in audit
    assert '"event":"task_rerun_refused"' in audit


async def test_annotated_follows_the_upstreams_annotations_as_the_task_found_them(
    tmp_path: Path, sdk_upstream: str
) -> None:
    upstream = f"{{transport: streamable_http, url: {json.dumps(sdk_upstream)}}}"
    routes = f"routes:\n  - {{name: a, upstream: {upstream}, tasks: {{repeatable: annotated}}}}\n"
    port = free_port()
    config = write_config(tmp_path, port, routes=routes)
    url = f"http://127.0.0.1:{port}/a/mcp"
    proc = start_process(config, port)
    try:
        async with aiohttp.ClientSession() as http:
            session = await open_session(http, url)
            # The gateway learns each tool's annotations from the tools/list it relays.
            await rpc(http, url, session, "tools/list", {}, request_id=3)
            reading = await start_task(http, url, session, "slow_read", {"steps": 50})
            writing = await start_task(http, url, session, "slow", {"steps": 50})
            await asyncio.sleep(0.5)
    finally:
        proc.kill()
        proc.wait(10)
    proc = start_process(config, port)
    try:
        async with aiohttp.ClientSession() as http:
            read = await task_terminal(http, url, session, reading)
            written = await task_terminal(http, url, session, writing)
    finally:
        proc.terminate()
        proc.wait(15)
    # slow_read says readOnlyHint: it ran again; slow says nothing: it failed as before.
    assert read["status"] == "completed"
    assert written["status"] == "failed"
    assert written["statusMessage"] == "interrupted: gateway restarted"


async def test_a_stop_leaves_repeatable_tasks_to_the_next_process(tmp_path: Path) -> None:
    routes = (
        "routes:\n"
        f"  - {{name: safe, upstream: {DEMO}, tasks: {{repeatable: [slow]}}}}\n"
        f"  - {{name: plain, upstream: {DEMO}}}\n"
    )
    port = free_port()
    config = write_config(tmp_path, port, routes=routes)  # drain_seconds: 0
    base = f"http://127.0.0.1:{port}"
    started: dict[str, tuple[str, str]] = {}
    proc = start_process(config, port)
    try:
        async with aiohttp.ClientSession() as http:
            for name in ("safe", "plain"):
                url = f"{base}/{name}/mcp"
                session = await open_session(http, url)
                task_id = await start_task(http, url, session, "slow", {"seconds": 2, "steps": 2})
                started[name] = (session, task_id)
            await asyncio.sleep(0.3)
    finally:
        proc.terminate()  # SIGTERM with no drain time: the stop comes at once
        assert proc.wait(15) == 0
    proc = start_process(config, port)
    try:
        async with aiohttp.ClientSession() as http:
            safe = await task_terminal(http, f"{base}/safe/mcp", *started["safe"])
            plain = await task_terminal(http, f"{base}/plain/mcp", *started["plain"])
    finally:
        proc.terminate()
        proc.wait(15)
    assert safe["status"] == "completed"
    assert plain["status"] == "failed"
    assert plain["statusMessage"] == "interrupted: gateway shut down"


async def test_a_renamed_tool_named_repeatable_by_its_client_name_runs_again(
    tmp_path: Path,
) -> None:
    routes = (
        "routes:\n"
        f"  - name: safe\n    upstream: {DEMO}\n"
        "    tools: {rename: {slow: nap}}\n    tasks: {repeatable: [nap]}\n"
    )
    port = free_port()
    config = write_config(tmp_path, port, routes=routes)
    url = f"http://127.0.0.1:{port}/safe/mcp"
    proc = start_process(config, port)
    try:
        async with aiohttp.ClientSession() as http:
            session = await open_session(http, url)
            task_id = await start_task(http, url, session, "nap", {"seconds": 2, "steps": 2})
            await asyncio.sleep(0.3)
    finally:
        proc.terminate()
        assert proc.wait(15) == 0
    proc = start_process(config, port)
    try:
        async with aiohttp.ClientSession() as http:
            task = await task_terminal(http, url, session, task_id)
    finally:
        proc.terminate()
        proc.wait(15)
    # Run again, under the upstream's name, although the client named the tool `nap`.
    assert task["status"] == "completed"


async def test_a_task_waiting_for_input_at_the_crash_asks_again_and_takes_the_new_answer(
    tmp_path: Path, sdk_upstream: str
) -> None:
    upstream = f"{{transport: streamable_http, url: {json.dumps(sdk_upstream)}}}"
    routes = f"routes:\n  - {{name: q, upstream: {upstream}, tasks: {{repeatable: [ask_both]}}}}\n"
    port = free_port()
    config = write_config(tmp_path, port, routes=routes)
    url = f"http://127.0.0.1:{port}/q/mcp"
    caps = {**WITH_TASKS, **WITH_ELICITATION}
    proc = start_process(config, port)
    try:
        async with aiohttp.ClientSession() as http:
            _, created = await modern_rpc(
                http, url, "tools/call", {"name": "ask_both", "arguments": {}}, caps
            )
            task_id = created["result"]["taskId"]
            before = await modern_status(http, url, task_id, "input_required")
    finally:
        proc.kill()
        proc.wait(10)
    proc = start_process(config, port)
    try:
        async with aiohttp.ClientSession() as http:
            again = await modern_inputs(http, url, task_id, 2)
            answers = {
                key: {"action": "accept", "content": {"name": name}}
                for key, name in zip(sorted(again["inputRequests"]), ("New", "Answer"), strict=True)
            }
            update = {"taskId": task_id, "inputResponses": answers}
            await modern_rpc(http, url, "tasks/update", update, caps)
            done = await modern_terminal(http, url, task_id)
    finally:
        proc.terminate()
        proc.wait(15)
    # The earlier attempt's questions were withdrawn; the new attempt asked again, under keys
    # never used before in this task, and completed with the new answers.
    assert not set(before["inputRequests"]) & set(again["inputRequests"])
    assert len(again["inputRequests"]) == 2
    assert done["status"] == "completed"
    assert sorted(done["result"]["content"][0]["text"].split()) == ["Answer", "New"]


@pytest.mark.parametrize(
    ("reply", "says"),
    [
        ({"result": {"action": "accept", "content": {"name": "Again"}}}, "Hello, Again!"),
        ({"error": {"code": -32603, "message": "no user here"}}, "no user here"),
    ],
)
async def test_a_2025_clients_question_is_asked_again_on_tasks_result_after_the_crash(
    tmp_path: Path, sdk_upstream: str, reply: dict[str, Any], says: str
) -> None:
    upstream = f"{{transport: streamable_http, url: {json.dumps(sdk_upstream)}}}"
    routes = f"routes:\n  - {{name: q, upstream: {upstream}, tasks: {{repeatable: [ask]}}}}\n"
    port = free_port()
    config = write_config(tmp_path, port, routes=routes)
    url = f"http://127.0.0.1:{port}/q/mcp"
    proc = start_process(config, port)
    try:
        async with aiohttp.ClientSession() as http:
            session = await open_session(http, url, WITH_ELICITATION)
            task_id = await start_task(http, url, session, "ask")
            await status_of(http, url, session, task_id, "input_required")
    finally:
        proc.kill()
        proc.wait(10)
    proc = start_process(config, port)
    try:
        async with aiohttp.ClientSession() as http:
            # The TS SDK pattern, on the same session after the restart: poll until the task
            # waits for input, then tasks/result, where the new attempt's question arrives.
            await status_of(http, url, session, task_id, "input_required")
            message = result_request(task_id, 3)
            async with http.post(url, json=message, headers=headers(session)) as stream:
                (question,) = await read_messages(stream, 1)
                answer = {"jsonrpc": "2.0", "id": question["id"], **reply}
                async with http.post(url, json=answer, headers=headers(session)) as sent:
                    assert sent.status == 202
                (final,) = await read_messages(stream, 1)
    finally:
        proc.terminate()
        proc.wait(15)
    # "The receiver MUST include the io.modelcontextprotocol/related-task metadata in the request."
    assert question["method"] == "elicitation/create"
    assert question["params"]["_meta"][RELATED] == {"taskId": task_id}
    # The client's answer, or its refusal, reached the re-run's call upstream.
    assert final["id"] == 3
    assert says in final["result"]["content"][0]["text"]


async def test_a_task_cut_short_on_every_attempt_fails_after_max_attempts(
    tmp_path: Path, sdk_upstream: str
) -> None:
    upstream = f"{{transport: streamable_http, url: {json.dumps(sdk_upstream)}}}"
    policy = "{repeatable: [slow], max_attempts: 2}"
    routes = f"routes:\n  - {{name: s, upstream: {upstream}, tasks: {policy}}}\n"
    port = free_port()
    config = write_config(tmp_path, port, routes=routes)
    url = f"http://127.0.0.1:{port}/s/mcp"
    proc = start_process(config, port)
    try:
        async with aiohttp.ClientSession() as http:
            session = await open_session(http, url)
            task_id = await start_task(http, url, session, "slow", {"steps": 100})
            await asyncio.sleep(0.5)
    finally:
        proc.kill()
        proc.wait(10)
    second_audit = tmp_path / "second.audit"
    proc = start_process(config, port, audit=second_audit)
    try:
        async with aiohttp.ClientSession() as http:
            second = await status_of(http, url, session, task_id, "working")
        async with asyncio.timeout(10):
            while '"event":"task_rerun"' not in second_audit.read_text():  # noqa: ASYNC110 - a file
                await asyncio.sleep(0.1)
        await asyncio.sleep(0.5)  # the second attempt's call is under way upstream
    finally:
        proc.kill()  # the second attempt is cut short too
        proc.wait(10)
    third_audit = tmp_path / "third.audit"
    proc = start_process(config, port, audit=third_audit)
    try:
        async with aiohttp.ClientSession() as http:
            seen: list[str] = []
            final = await task_terminal(http, url, session, task_id, seen=seen)
    finally:
        proc.terminate()
        proc.wait(15)
    assert second["status"] == "working"
    assert '"attempt":2' in second_audit.read_text()
    assert '"event":"task_rerun_refused"' in third_audit.read_text()
    assert final["status"] == "failed"
    assert final["statusMessage"] == (
        "interrupted: gateway restarted; not run again after 2 attempts"
    )


async def test_the_earlier_attempts_http_call_is_cancelled_before_the_rerun(
    tmp_path: Path, faulty_upstream: Any
) -> None:
    upstream = f"{{transport: streamable_http, url: {faulty_upstream.make_url('/mcp')}}}"
    routes = f"routes:\n  - {{name: h, upstream: {upstream}, tasks: {{repeatable: [hang]}}}}\n"
    port = free_port()
    config = write_config(tmp_path, port, routes=routes)
    url = f"http://127.0.0.1:{port}/h/mcp"
    received = faulty_upstream.app[FAULT_HOOKS].received
    proc = start_process(config, port)
    try:
        async with aiohttp.ClientSession() as http:
            session = await open_session(http, url)
            task_id = await start_task(http, url, session, "hang")
            for _ in range(100):
                if any(m.get("method") == "tools/call" for m in received):
                    break
                await asyncio.sleep(0.05)
    finally:
        proc.kill()
        proc.wait(10)
    (first,) = [m for m in received if m.get("method") == "tools/call"]
    proc = start_process(config, port)
    try:
        for _ in range(100):
            calls = [m for m in received if m.get("method") == "tools/call"]
            if len(calls) == 2:
                break
            await asyncio.sleep(0.05)
        async with aiohttp.ClientSession() as http:
            await rpc(http, url, session, "tasks/cancel", {"taskId": task_id}, request_id=5)
    finally:
        proc.terminate()
        proc.wait(15)
    methods = [m.get("method") for m in received]
    second = [i for i, method in enumerate(methods) if method == "tools/call"][1]
    cancel = methods.index("notifications/cancelled")
    # The upstream heard that the first attempt's call was cancelled before the re-run came.
    assert cancel < second
    assert received[cancel]["params"]["requestId"] == first["id"]
