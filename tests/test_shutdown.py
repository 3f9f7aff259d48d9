"""SIGTERM on a real gateway process: drain (new work refused, running tasks end), then answer
everyone and exit within grace; with `shutdown.drain_seconds: 0` (the tests' default) at once."""

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

from gateway.tasks.recovery import SHUTDOWN_MESSAGE

from .conftest import free_port
from .fakes import faulty_streamable_app
from .helpers import (
    INIT,
    WITH_TASKS,
    headers,
    modern_rpc,
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


async def readyz_refuses(http: aiohttp.ClientSession, port: int) -> None:
    """Returns once /readyz says the gateway drains (within a second of the signal)."""
    async with asyncio.timeout(1):
        while True:
            async with http.get(f"http://127.0.0.1:{port}/readyz") as resp:
                if resp.status == 503:
                    assert (await resp.json())["reason"] == "draining"
                    return


def task_statuses(db: Path) -> list[tuple[str, str | None, int]]:
    """(status, statusMessage, count) of the tasks in a stopped gateway's store."""
    with sqlite3.connect(db) as store:  # the process is gone: the file is ours to read
        rows = list(
            store.execute("SELECT status, status_message, COUNT(*) FROM tasks GROUP BY 1, 2")
        )
    store.close()
    return rows


async def test_sigterm_drains_a_hundred_running_tasks_to_their_results_then_exits_at_once(
    tmp_path: Path,
) -> None:
    port = free_port()
    config = write_config(tmp_path, port, "limits: {requests_per_second: null}", drain_seconds=30)
    log = tmp_path / "gateway.log"
    url = f"http://127.0.0.1:{port}/demo/mcp"
    slow = {"seconds": 3, "steps": 1}
    proc = start_process(config, port, log)
    try:
        async with aiohttp.ClientSession() as http:
            sessions = await asyncio.gather(*(raw_session(http, url) for _ in range(4)))
            ids = [session_id for session_id, _ in sessions]
            task_ids = await asyncio.gather(
                *(start_task(http, url, ids[n % 4], "slow", slow) for n in range(100))
            )
            wait = result_request(task_ids[-1])
            async with http.post(url, json=wait, headers=headers(ids[-1])) as waiting:
                await waiting.content.readline()  # the stream is open: the client waits
                proc.send_signal(signal.SIGTERM)
                signalled = time.monotonic()
                await readyz_refuses(http, port)
                async with http.post(url, json=INIT, headers=headers()) as resp:
                    new_session = resp.status, resp.headers.get("Retry-After")
                task_call = {**result_request(task_ids[0], 3), "method": "tools/call"}
                task_call["params"] = {"name": "slow", "arguments": slow, "task": {}}
                async with http.post(url, json=task_call, headers=headers(ids[0])) as resp:
                    new_task = resp.status, resp.headers.get("Retry-After")
                modern, _ = await modern_rpc(
                    http, url, "tools/call", {"name": "slow", "arguments": slow}, WITH_TASKS
                )
                polled = await rpc(http, url, ids[1], "tasks/get", {"taskId": task_ids[1]}, 4)
                async with asyncio.timeout(20):
                    answer = (await waiting.content.read()).decode()
            code = await asyncio.to_thread(proc.wait, 20)
            took = time.monotonic() - signalled
    finally:
        if proc.poll() is None:
            proc.kill()
    assert new_session == (503, "5") and new_task == (503, "5") and modern == 503
    assert polled["result"]["taskId"] == task_ids[1]
    assert "slept 3 s" in answer and '"id":2' in answer  # the real result, not an error
    assert code == 0 and took < 10  # when the last task ended, long before drain_seconds
    assert task_statuses(tmp_path / "gateway.db") == [("completed", None, 100)]
    said = log.read_text()
    lines = [
        "gateway.http.listen: SIGTERM received",
        "gateway.http.drain: draining: 100 task(s) running",
        "gateway.http.drain: drained: every task has ended",
        "gateway.http.listen: shutting down",
        "gateway.http.listen: stopped",
    ]
    at = [said.find(line) for line in lines]
    assert -1 not in at and at == sorted(at), said


async def test_tasks_still_running_when_the_drain_time_is_over_fail_with_the_shutdown_message(
    tmp_path: Path,
) -> None:
    port = free_port()
    config = write_config(tmp_path, port, drain_seconds=1)
    url = f"http://127.0.0.1:{port}/demo/mcp"
    proc = start_process(config, port)
    try:
        async with aiohttp.ClientSession() as http:
            session_id, _ = await raw_session(http, url)
            quick = await start_task(http, url, session_id, "slow", {"seconds": 0.5, "steps": 1})
            long = await start_task(http, url, session_id, "slow", {"seconds": 60, "steps": 1})
        proc.send_signal(signal.SIGTERM)
        signalled = time.monotonic()
        code = await asyncio.to_thread(proc.wait, 20)
        took = time.monotonic() - signalled
    finally:
        if proc.poll() is None:
            proc.kill()
    assert code == 0 and 1 <= took < 5

    proc = start_process(config, port)  # the same database: both ends were recorded
    try:
        async with aiohttp.ClientSession() as http:
            done = await rpc(http, url, session_id, "tasks/get", {"taskId": quick}, 3)
            lost = await rpc(http, url, session_id, "tasks/get", {"taskId": long}, 4)
    finally:
        proc.terminate()
        proc.wait(10)
    assert done["result"]["status"] == "completed"
    assert (lost["result"]["status"], lost["result"]["statusMessage"]) == (
        "failed",
        SHUTDOWN_MESSAGE,
    )


async def test_a_second_signal_ends_the_drain_and_stops_at_once(tmp_path: Path) -> None:
    port = free_port()
    config = write_config(tmp_path, port, drain_seconds=30)
    url = f"http://127.0.0.1:{port}/demo/mcp"
    proc = start_process(config, port)
    try:
        async with aiohttp.ClientSession() as http:
            session_id, _ = await raw_session(http, url)
            await start_task(http, url, session_id, "slow", {"seconds": 60, "steps": 1})
            proc.send_signal(signal.SIGTERM)
            await readyz_refuses(http, port)  # the first signal is in: the drain has begun
        proc.send_signal(signal.SIGINT)
        signalled = time.monotonic()
        code = await asyncio.to_thread(proc.wait, 20)
        took = time.monotonic() - signalled
    finally:
        if proc.poll() is None:
            proc.kill()
    assert code == 0 and took < 3
    assert task_statuses(tmp_path / "gateway.db") == [("failed", SHUTDOWN_MESSAGE, 1)]


async def test_sighups_all_through_the_stop_neither_kill_the_process_nor_cut_the_drain(
    tmp_path: Path,
) -> None:
    """Every signal the gateway handles stays handled until it exits: SIGHUPs every 20 ms
    from SIGTERM on (the drain, "shutting down", the cleanup, the loop's close) are logged,
    and the stop ends as it would without them."""
    port = free_port()
    config = write_config(tmp_path, port, drain_seconds=0.5)
    log = tmp_path / "gateway.log"
    url = f"http://127.0.0.1:{port}/demo/mcp"
    proc = start_process(config, port, log=log)
    try:
        async with aiohttp.ClientSession() as http:
            session_id, _ = await raw_session(http, url)
            await start_task(http, url, session_id, "slow", {"seconds": 60, "steps": 1})
        proc.send_signal(signal.SIGTERM)
        hangups = 0
        async with asyncio.timeout(20):
            while proc.poll() is None:
                proc.send_signal(signal.SIGHUP)
                hangups += 1
                await asyncio.sleep(0.02)
    finally:
        if proc.poll() is None:
            proc.kill()
    text = log.read_text()
    assert proc.returncode == 0, text[-2000:]
    assert hangups > 10
    assert "shutting down" in text and text.rstrip().endswith("stopped")
    assert "SIGHUP: the gateway is stopping; the configuration is not reloaded" in text
    assert "Traceback" not in text
    assert task_statuses(tmp_path / "gateway.db") == [("failed", SHUTDOWN_MESSAGE, 1)]
