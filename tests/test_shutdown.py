"""SIGTERM on a real gateway process: refuse new work, answer everyone, exit within grace."""

from __future__ import annotations

import asyncio
import json
import signal
import sqlite3
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import aiohttp
from aiohttp import web
from aiohttp.test_utils import TestServer

from gateway.tasks.runner import SHUTDOWN_MESSAGE

from .conftest import free_port
from .fakes import faulty_streamable_app
from .helpers import (
    headers,
    raw_session,
    result_request,
    rpc,
    start_process,
    start_task,
    write_config,
)


async def test_sigterm_answers_waiting_clients_fails_running_tasks_and_exits_in_time(
    tmp_path: Path,
) -> None:
    port = free_port()
    config = write_config(
        tmp_path, port, "http: {shutdown_grace_seconds: 5}\nauth: {list_tasks_without_auth: true}"
    )
    url = f"http://127.0.0.1:{port}/demo/mcp"
    proc = start_process(config, port)
    try:
        async with aiohttp.ClientSession() as http:
            session_id, _ = await raw_session(http, url)
            task_id = await start_task(http, url, session_id, "slow", {"seconds": 60, "steps": 1})
            wait = result_request(task_id)
            listen = {"Accept": "text/event-stream", "Mcp-Session-Id": session_id}
            async with (
                http.post(url, json=wait, headers=headers(session_id)) as waiting,
                http.get(url, headers=listen) as stream,
            ):
                await waiting.content.readline()  # the stream is open: the client waits
                proc.send_signal(signal.SIGTERM)
                started = time.monotonic()
                async with asyncio.timeout(10):
                    answer = (await waiting.content.read()).decode()
                    await stream.content.read()  # the GET stream ends too
                code = await asyncio.to_thread(proc.wait, 10)
                took = time.monotonic() - started
    finally:
        if proc.poll() is None:
            proc.kill()
    assert '"message":"interrupted: gateway shut down"' in answer and '"id":2' in answer
    assert code == 0 and took < 5

    proc = start_process(config, port)  # the same database: the task's end was recorded
    try:
        async with aiohttp.ClientSession() as http:
            got = await rpc(http, url, session_id, "tasks/get", {"taskId": task_id}, 3)
    finally:
        proc.terminate()
        proc.wait(10)
    assert got["result"]["status"] == "failed"
    assert got["result"]["statusMessage"] == "interrupted: gateway shut down"


@web.middleware
async def slow_to_end_sessions(
    request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
) -> web.StreamResponse:
    if request.method == "DELETE":
        await asyncio.sleep(0.2)  # a busy upstream: a thousand of these one by one take 200 s
    return await handler(request)


async def test_sigterm_with_a_thousand_sessions_and_tasks_fails_them_all_and_exits_in_time(
    tmp_path: Path,
) -> None:
    upstream_app = faulty_streamable_app()
    upstream_app.middlewares.append(slow_to_end_sessions)
    upstream = TestServer(upstream_app, host="127.0.0.1")
    await upstream.start_server()
    port = free_port()
    db = tmp_path / "gateway.db"
    http_upstream = {"transport": "streamable_http", "url": str(upstream.make_url("/mcp"))}
    config = write_config(
        tmp_path,
        port,
        # One client address opens them all: only the per-caller caps are lifted.
        "http: {shutdown_grace_seconds: 10}\n"
        "limits: {sessions_per_principal: null, requests_per_second: null}",
        routes="routes: " + json.dumps([{"name": "t", "upstream": http_upstream}]),
    )
    url = f"http://127.0.0.1:{port}/t/mcp"
    proc = start_process(config, port)
    try:
        connector = aiohttp.TCPConnector(limit=32)
        async with aiohttp.ClientSession(connector=connector) as http:

            async def session_with_a_task(n: int) -> str:
                session_id, _ = await raw_session(http, url)
                return await start_task(http, url, session_id, "hang")

            async with asyncio.timeout(60):
                task_ids = await asyncio.gather(*map(session_with_a_task, range(1000)))
        proc.send_signal(signal.SIGTERM)
        started = time.monotonic()
        code = await asyncio.to_thread(proc.wait, 30)
        took = time.monotonic() - started
    finally:
        if proc.poll() is None:
            proc.kill()
        await upstream.close()
    assert code == 0 and took < 10
    with sqlite3.connect(db) as store:  # the process is gone: the file is ours to read
        ended = store.execute("SELECT status, status_message, COUNT(*) FROM tasks GROUP BY 1, 2")
        assert list(ended) == [("failed", SHUTDOWN_MESSAGE, len(set(task_ids)))]
        (outcomes,) = store.execute("SELECT COUNT(*) FROM outcomes").fetchone()
    store.close()
    assert outcomes == 1000
