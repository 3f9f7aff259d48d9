"""SIGTERM on a real gateway process: refuse new work, answer everyone, exit within grace."""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import aiohttp

from .conftest import ROOT, free_port, wait_for_port
from .test_mcp_endpoint import headers
from .test_tasks import raw_session, result_request, rpc, start_task


def start(config: Path, port: int) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "gateway", "--config", str(config)],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    wait_for_port(port, proc)
    return proc


async def test_sigterm_answers_waiting_clients_fails_running_tasks_and_exits_in_time(
    tmp_path: Path,
) -> None:
    port = free_port()
    config = tmp_path / "gateway.yaml"
    config.write_text(
        f"listen: {{host: 127.0.0.1, port: {port}}}\n"
        f"store: {{path: {json.dumps(str(tmp_path / 'gateway.db'))}}}\n"
        "http: {shutdown_grace_seconds: 5}\n"
        "auth: {list_tasks_without_auth: true}\n"
        "routes: [{name: demo, upstream: "
        "{transport: stdio, command: [python, -m, gateway.demo]}}]\n"
    )
    url = f"http://127.0.0.1:{port}/demo/mcp"
    proc = start(config, port)
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

    proc = start(config, port)  # the same database: the task's end was recorded
    try:
        async with aiohttp.ClientSession() as http:
            got = await rpc(http, url, session_id, "tasks/get", {"taskId": task_id}, 3)
    finally:
        proc.terminate()
        proc.wait(10)
    assert got["result"]["status"] == "failed"
    assert got["result"]["statusMessage"] == "interrupted: gateway shut down"
