"""Nothing the gateway keeps grows without bound: session records of clients that never come
back are pruned, and a chatty upstream's progress costs a few status writes, not one each.
The gateway runs in-process on a real port with its real store, runner and sessions."""

from __future__ import annotations

import asyncio
import logging
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from gateway.aio import TaskSet
from gateway.app import create_app
from gateway.config import ListenConfig, Settings
from gateway.demo.server import Message, Tool, ToolContext, text_result
from gateway.demo.tools import NoArgs
from gateway.http import listen
from gateway.http.keys import STORE
from gateway.protocol.errors import StoreUnreachable
from gateway.tasks.notifier import Notifier
from gateway.tasks.progress import ProgressNotes

from .conftest import DEMO
from .fakes import legacy_sse_app
from .helpers import headers, raw_session, route, rpc, start_task, store_commits


async def serve(settings: Settings) -> tuple[web.AppRunner, str]:
    app = create_app(settings)
    runner = await listen.start(app, ListenConfig(host="127.0.0.1", port=0), settings.http)
    host, port = runner.addresses[0][:2]
    return runner, f"http://{host}:{port}/t/mcp"


async def test_records_of_sessions_that_never_return_are_pruned_and_busy_ones_kept(
    make_settings: Any, tmp_path: Path
) -> None:
    runner, url = await serve(make_settings(route(DEMO)))
    async with aiohttp.ClientSession() as http:
        busy, _ = await raw_session(http, url)
        gone, _ = await raw_session(http, url)  # the younger record of the two
    await runner.cleanup()  # a restart: both records stay, neither session is live

    store_section = {"path": str(tmp_path / "gateway.db"), "sweep_interval_seconds": 0.1}
    settings = make_settings(route(DEMO), sessions={"idle_timeout_seconds": 1}, store=store_section)
    runner, url = await serve(settings)
    store = runner.app[STORE]
    try:
        async with aiohttp.ClientSession() as http:
            # `busy` comes back and starts a long task: it is live, so its record stays.
            task_id = await start_task(http, url, busy, "slow", {"seconds": 30})
            async with asyncio.timeout(5):
                while await store.get_session(gone) is not None:  # noqa: ASYNC110
                    await asyncio.sleep(0.05)  # the sweeper has no event to await
            # Older than the pruned one, yet kept: its session is live again.
            assert await store.get_session(busy) is not None
            got = await rpc(http, url, busy, "tasks/get", {"taskId": task_id}, 2)
            assert got["result"]["status"] == "working"
            ping = {"jsonrpc": "2.0", "id": 3, "method": "ping"}
            async with http.post(url, json=ping, headers=headers(gone)) as resp:
                assert resp.status == 404  # its client comes back too late
            await rpc(http, url, busy, "tasks/cancel", {"taskId": task_id}, 4)
    finally:
        await runner.cleanup()


async def test_a_burst_of_progress_is_a_few_status_writes_and_the_latest_message_wins(
    make_settings: Any,
) -> None:
    release = asyncio.Event()

    async def chatty(ctx: ToolContext, args: NoArgs) -> Message:
        for step in range(1, 51):  # a second of progress, 50 a second
            await ctx.progress(step, 50, f"step {step}")
            await asyncio.sleep(0.02)
        await release.wait()
        return text_result("done")

    upstream = TestServer(legacy_sse_app([Tool("chatty", "Much progress.", NoArgs, chatty)]))
    await upstream.start_server()
    upstream_route = {"transport": "sse", "url": str(upstream.make_url("/sse"))}
    runner, url = await serve(make_settings(route(upstream_route)))
    try:
        async with aiohttp.ClientSession() as http:
            session_id, _ = await raw_session(http, url)
            params = {"name": "chatty", "arguments": {}, "task": {}, "_meta": {"progressToken": 7}}
            created = await rpc(http, url, session_id, "tools/call", params)
            task_id = created["result"]["task"]["taskId"]
            commits, started = store_commits(runner.app), time.monotonic()
            async with asyncio.timeout(5):
                while True:
                    got = await rpc(http, url, session_id, "tasks/get", {"taskId": task_id}, 2)
                    if got["result"].get("statusMessage") == "50/50: step 50":
                        break
                    await asyncio.sleep(0.05)  # polling is what this client does
            # The first written at once, then at most one a second: not one fsync each.
            assert store_commits(runner.app) - commits <= 2 + (time.monotonic() - started)
            assert got["result"]["status"] == "working"
            release.set()
            async with asyncio.timeout(5):
                while got["result"]["status"] == "working":
                    await asyncio.sleep(0.05)
                    got = await rpc(http, url, session_id, "tasks/get", {"taskId": task_id}, 3)
            assert got["result"]["status"] == "completed"
    finally:
        release.set()
        await runner.cleanup()
        await upstream.close()


async def test_progress_that_finds_the_store_unreachable_is_one_warning_and_the_next_is_kept(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # A database outage, not a defect: the latest message is lost (a newer one follows), and
    # the operator reads one line per lost write rather than a traceback from the task set.
    class Outage:
        def __init__(self) -> None:
            self.down = True
            self.noted: list[str] = []

        async def note_task(self, task_id: str, message: str, now: datetime) -> object:
            if self.down:
                raise StoreUnreachable("the task store cannot be reached")
            self.noted.append(message)
            return object()

    store, tasks = Outage(), TaskSet("task runner")
    notes = ProgressNotes(store, Notifier(), lambda: datetime.now(UTC), tasks, 0.0)  # type: ignore[arg-type]
    notes.heard("t1", {"progress": 1, "total": 2})
    await asyncio.sleep(0.05)
    store.down = False
    notes.heard("t1", {"progress": 2, "total": 2})
    await asyncio.sleep(0.05)
    await tasks.close()
    assert store.noted == ["2/2"]
    warnings = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert [(r.levelname, r.exc_info) for r in warnings] == [("WARNING", None)]
    assert "store is unreachable" in warnings[0].getMessage()
