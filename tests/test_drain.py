"""The drain before a stop, and the probes that show it: /livez, /readyz (in-process), and
`listen.serve`'s signals, sent to this process. The whole stop of a real gateway process is
tested in test_shutdown.py.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
from collections.abc import AsyncIterator, Callable
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from gateway.app import create_app
from gateway.config import ListenConfig, Settings
from gateway.http import listen
from gateway.http.keys import RUNNER, STORE
from gateway.http.shutdown import drain
from gateway.protocol.errors import INTERNAL_ERROR
from gateway.tasks.models import TaskStatus

from .helpers import (
    INIT,
    WITH_ELICITATION,
    WITH_TASKS,
    error_of,
    headers,
    modern_rpc,
    raw_session,
    rpc,
    start_task,
)

Served = tuple[web.Application, str]


@pytest.fixture
async def serve(make_settings: Callable[..., Settings]) -> AsyncIterator[Callable[..., Any]]:
    """Starts the gateway for `make_settings(**sections)` on a loopback port; returns the
    app and its base URL."""
    runners: list[web.AppRunner] = []

    async def start(**sections: Any) -> Served:
        settings = make_settings(**sections)
        app = create_app(settings)
        runner = await listen.start(app, ListenConfig(host="127.0.0.1", port=0), settings.http)
        runners.append(runner)
        host, port = runner.addresses[0][:2]
        return app, f"http://{host}:{port}"

    yield start
    for runner in runners:
        await runner.cleanup()


async def probe(http: aiohttp.ClientSession, url: str) -> tuple[int, Any]:
    async with http.get(url) as resp:
        return resp.status, await resp.json()


def call(name: str, **arguments: Any) -> dict[str, Any]:
    return {"name": name, "arguments": arguments}


async def test_livez_and_readyz_answer_ok_on_a_serving_gateway(
    serve: Callable[..., Any],
) -> None:
    _, base = await serve()
    async with aiohttp.ClientSession() as http:
        assert await probe(http, f"{base}/livez") == (200, {"status": "ok"})
        assert await probe(http, f"{base}/readyz") == (200, {"status": "ok"})
        assert await probe(http, f"{base}/readyz?deep=1") == (200, {"status": "ok"})


async def test_readyz_says_unavailable_when_the_store_takes_no_writes_and_livez_stays_ok(
    serve: Callable[..., Any],
) -> None:
    app, base = await serve()
    await app[STORE].close()  # the store goes away under a running gateway
    async with aiohttp.ClientSession() as http:
        ready = await probe(http, f"{base}/readyz?deep=1")
        live = await probe(http, f"{base}/livez")
    assert ready == (503, {"status": "unavailable", "reason": "store"})
    assert live == (200, {"status": "ok"})


async def test_a_drain_refuses_new_sessions_tasks_and_calls_while_open_work_goes_on(
    serve: Callable[..., Any],
) -> None:
    app, base = await serve(shutdown={"drain_seconds": 30})
    url = f"{base}/demo/mcp"
    async with aiohttp.ClientSession() as http:
        session_id, _ = await raw_session(http, url)
        task_id = await start_task(http, url, session_id, "slow", {"seconds": 1.5, "steps": 1})
        _, asked = await modern_rpc(http, url, "tools/call", call("ask"), WITH_ELICITATION)
        async with asyncio.TaskGroup() as group:
            draining = group.create_task(drain(app))
            await asyncio.sleep(0)  # the drain has begun: it flags before its first wait

            assert await probe(http, f"{base}/readyz") == (
                503,
                {"status": "unavailable", "reason": "draining"},
            )
            assert await probe(http, f"{base}/livez") == (200, {"status": "ok"})
            async with http.get(f"{base}/metrics") as resp:
                assert "mcp_gateway_draining 1.0" in await resp.text()

            # New work: a session, a task, a 2026-07-28 call.
            async with http.post(url, json=INIT, headers=headers()) as resp:
                assert resp.status == 503 and resp.headers["Retry-After"] == "5"
                assert (await error_of(resp))["code"] == INTERNAL_ERROR
            task_call = {
                "jsonrpc": "2.0",
                "id": 4,
                "method": "tools/call",
                "params": {**call("slow", seconds=1), "task": {}},
            }
            async with http.post(url, json=task_call, headers=headers(session_id)) as resp:
                assert resp.status == 503 and resp.headers["Retry-After"] == "5"
                assert (await resp.json())["id"] == 4
            status, refused = await modern_rpc(http, url, "tools/call", call("slow"), WITH_TASKS)
            assert (status, refused["error"]["code"]) == (503, INTERNAL_ERROR)

            # The work already here: the open session's requests, its task, a question's answer.
            echoed = await rpc(http, url, session_id, "tools/call", call("echo", text="hi"), 5)
            assert echoed["result"]["content"][0]["text"] == "hi"
            got = await rpc(http, url, session_id, "tasks/get", {"taskId": task_id}, 6)
            assert got["result"]["taskId"] == task_id
            round_ = asked["result"]
            ((key, _),) = round_["inputRequests"].items()
            answer = {"action": "accept", "content": {"name": "Di"}}
            retry = {
                **call("ask"),
                "inputResponses": {key: answer},
                "requestState": round_["requestState"],
            }
            status, done = await modern_rpc(http, url, "tools/call", retry, WITH_ELICITATION)
            assert (status, done["result"]["content"][0]["text"]) == (200, "Hello, Di!")
            result = await rpc(http, url, session_id, "tasks/result", {"taskId": task_id}, 7)
            async with asyncio.timeout(10):
                await draining  # the last task has ended: the drain is over
    assert result["result"]["content"][0]["text"] == "slept 1.5 s"
    task = await app[STORE].get_task(task_id)
    assert task is not None and task.status is TaskStatus.COMPLETED
    assert app[RUNNER].running == 0


async def test_a_drain_with_no_task_running_ends_at_once(serve: Callable[..., Any]) -> None:
    app, _ = await serve(shutdown={"drain_seconds": 30})
    async with asyncio.timeout(1):
        await drain(app)


async def test_a_drain_ends_after_drain_seconds_leaving_the_rest_to_the_stop(
    serve: Callable[..., Any], caplog: pytest.LogCaptureFixture
) -> None:
    app, base = await serve(shutdown={"drain_seconds": 0.3})
    url = f"{base}/demo/mcp"
    async with aiohttp.ClientSession() as http:
        session_id, _ = await raw_session(http, url)
        task_id = await start_task(http, url, session_id, "slow", {"seconds": 30, "steps": 1})
    with caplog.at_level(logging.INFO, logger="gateway.http.drain"):
        async with asyncio.timeout(5):
            await drain(app)
    assert app[RUNNER].running == 1  # failed as interrupted by the stop, not by the drain
    task = await app[STORE].get_task(task_id)
    assert task is not None and task.status is TaskStatus.WORKING
    said = [r.getMessage() for r in caplog.records]
    assert any(m.startswith("draining: 1 task(s) running") for m in said)
    assert any("1 task(s) still running fail as interrupted" in m for m in said)


async def test_serve_drains_at_the_first_signal_and_a_second_cuts_the_drain_short(
    make_settings: Callable[..., Settings], caplog: pytest.LogCaptureFixture
) -> None:
    settings = make_settings()
    started, draining = asyncio.Event(), asyncio.Event()

    async def drain_forever() -> None:
        draining.set()
        await asyncio.Event().wait()  # only the second signal ends it

    address = ListenConfig(host="127.0.0.1", port=0)
    with caplog.at_level(logging.INFO, logger="gateway.http.listen"):
        async with asyncio.timeout(10), asyncio.TaskGroup() as group:
            serving = group.create_task(
                listen.serve(
                    create_app(settings), address, settings.http, started.set, drain_forever
                )
            )
            await started.wait()  # the handlers are in
            os.kill(os.getpid(), signal.SIGTERM)
            await draining.wait()
            os.kill(os.getpid(), signal.SIGINT)
            await serving
    said = [r.getMessage() for r in caplog.records if r.name == "gateway.http.listen"]
    assert said == [
        "SIGTERM received",
        "SIGINT again: stopping now, without waiting for running tasks",
        "shutting down",
    ]  # "stopped" is `run`'s, once the loop is closed


async def test_serve_stops_after_a_drain_that_fails(
    make_settings: Callable[..., Settings], caplog: pytest.LogCaptureFixture
) -> None:
    settings = make_settings()
    started = asyncio.Event()

    async def broken_drain() -> None:
        raise RuntimeError("a defect")

    address = ListenConfig(host="127.0.0.1", port=0)
    async with asyncio.timeout(10), asyncio.TaskGroup() as group:
        serving = group.create_task(
            listen.serve(create_app(settings), address, settings.http, started.set, broken_drain)
        )
        await started.wait()
        os.kill(os.getpid(), signal.SIGTERM)
        await serving
    failed = [r for r in caplog.records if r.getMessage() == "the drain failed; stopping now"]
    assert len(failed) == 1 and failed[0].exc_info is not None
