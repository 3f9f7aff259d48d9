"""What a session keeps stays bounded: finished streams are pruned even behind one that stays
open, a withdrawn question leaves nothing behind, and one store error does not stop the idle
reaper from ending every later idle session."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp.test_utils import TestServer

from gateway.app import create_app
from gateway.config import Settings
from gateway.http.keys import ROUTES, SESSIONS

from .conftest import DEMO, ROOT, StartGateway
from .helpers import (
    headers,
    pids,
    raw_session,
    read_messages,
    result_request,
    rpc,
    start_task,
    wait_until_dead,
)


async def stream_key(resp: aiohttp.ClientResponse) -> str:
    """The stream an SSE answer belongs to, from its priming event's id."""
    async with asyncio.timeout(5):
        line = (await resp.content.readline()).decode()
    assert line.startswith("id: "), line
    return line.removeprefix("id: ").rpartition(":")[0]


async def test_finished_streams_are_pruned_even_behind_one_that_stays_open(
    start_gateway: StartGateway,
) -> None:
    # Every answer as SSE, so each one names its stream.
    routes = [{"name": "t", "upstream": DEMO}]
    url = f"{await start_gateway(routes, http={'json_window_seconds': 0})}/t/mcp"
    async with aiohttp.ClientSession() as http:
        session_id, _ = await raw_session(http, url)
        slow = {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "tools/call",
            "params": {"name": "slow", "arguments": {"seconds": 60, "steps": 1}},
        }
        async with http.post(url, json=slow, headers=headers(session_id)) as resp:
            open_key = await stream_key(resp)  # the call goes on after this connection ends
        keys = []
        for n in range(2, 80):
            echo = {
                "jsonrpc": "2.0",
                "id": n,
                "method": "tools/call",
                "params": {"name": "echo", "arguments": {"text": "x"}},
            }
            async with http.post(url, json=echo, headers=headers(session_id)) as resp:
                keys.append(await stream_key(resp))
                await read_messages(resp, 1)

        async def resumes(key: str) -> int:
            resume = {**headers(session_id), "Last-Event-ID": f"{key}:0"}
            async with http.get(url, headers=resume) as resp:
                return resp.status

        first_finished, last_finished = await resumes(keys[0]), await resumes(keys[-1])
        still_open = await resumes(open_key)
    assert first_finished == 400  # pruned: past the open stream, not stopped by it
    assert last_finished == 200 and still_open == 200


async def test_a_withdrawn_question_leaves_nothing_behind_in_its_session(
    make_settings: Callable[..., Settings],
) -> None:
    server = TestServer(create_app(make_settings([{"name": "t", "upstream": DEMO}])))
    await server.start_server()
    url = str(server.make_url("/t/mcp"))
    try:
        async with aiohttp.ClientSession() as http:
            session_id, _ = await raw_session(http, url)
            for n in range(3):
                task_id = await start_task(http, url, session_id, "ask", {})
                message = result_request(task_id, 10 + n)
                async with http.post(url, json=message, headers=headers(session_id)) as stream:
                    await read_messages(stream, 1)  # the question, then it is withdrawn:
                    await rpc(http, url, session_id, "tasks/cancel", {"taskId": task_id}, 20 + n)
                    await read_messages(stream, 2)  # notifications/cancelled, the answer
        app = server.app
        assert app is not None
        session = await app[SESSIONS].get(session_id, app[ROUTES]["t"], None, "")
        leftovers: dict[str, Any] = {
            "questions": session._questions._waiting._questions,
            "server requests": session._questions._asked,
            "status writes": session._questions._waiting._status_writes,
            "result streams": session._streams._results,
        }
    finally:
        await server.close()
    assert {name: len(held) for name, held in leftovers.items() if held} == {}


async def test_the_idle_reaper_goes_on_after_a_store_error(
    start_gateway: StartGateway, tmp_path: Path
) -> None:
    pid_dir = tmp_path / "pids"
    pid_dir.mkdir()
    command = ["python", str(ROOT / "tests" / "stdio_upstream.py"), "--pid-dir", str(pid_dir)]
    routes = [{"name": "t", "upstream": {"transport": "stdio", "command": command}}]
    base = await start_gateway(routes, sessions={"idle_timeout_seconds": 0.4})
    url = f"{base}/t/mcp"
    database = sqlite3.connect(tmp_path / "gateway.db")
    try:
        async with aiohttp.ClientSession() as http:
            await raw_session(http, url)
            (first,) = pids(pid_dir)
            # The store refuses to delete session records while this lasts.
            database.execute("ALTER TABLE sessions RENAME TO sessions_away")
            try:
                await wait_until_dead(first)  # its session was reaped all the same
            finally:
                database.execute("ALTER TABLE sessions_away RENAME TO sessions")
            later, _ = await raw_session(http, url)
            (second,) = set(pids(pid_dir)) - {first}
            await wait_until_dead(second)
            async with http.post(url, json=result_request("x"), headers=headers(later)) as gone:
                status = gone.status
    finally:
        database.close()
    assert status == 404  # the reaper was still at work, and the store forgot the session
