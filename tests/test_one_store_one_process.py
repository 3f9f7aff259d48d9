"""A store belongs to one gateway process: a second one on the same file stops in one line
before it touches the file, whatever port it was given; a killed one leaves nothing held.
Each test starts the real command (`python -m gateway`)."""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
from pathlib import Path

import aiohttp
import pytest

from .conftest import ROOT, free_port
from .helpers import gateway_process, raw_session, rpc, start_process, start_task, write_config


async def wait_until_done(
    http: aiohttp.ClientSession, url: str, session_id: str, task_id: str
) -> dict[str, object]:
    async with asyncio.timeout(15):
        while True:
            got = await rpc(http, url, session_id, "tasks/get", {"taskId": task_id}, 5)
            if got["result"]["status"] != "working":
                return dict(got["result"])
            await asyncio.sleep(0.2)  # polling is what a client does


@pytest.mark.parametrize("port", ["the same port", "another port"])
async def test_a_second_gateway_on_a_store_in_use_stops_in_one_line_and_the_first_task_completes(
    tmp_path: Path, port: str
) -> None:
    with gateway_process(tmp_path) as (base, first_port, _err):
        url = f"{base}/demo/mcp"
        async with aiohttp.ClientSession() as http:
            session_id, _ = await raw_session(http, url)
            task_id = await start_task(http, url, session_id, "slow", {"seconds": 2, "steps": 2})
            config = tmp_path / "gateway.yaml"  # the quick start run twice
            args = [] if port == "the same port" else ["--port", str(free_port())]
            second = await asyncio.to_thread(
                subprocess.run,
                [sys.executable, "-m", "gateway", "--config", str(config), *args],
                cwd=ROOT,
                capture_output=True,
                timeout=30,
            )
            task = await wait_until_done(http, url, session_id, task_id)
    stderr = second.stderr.decode()
    lines = [line for line in stderr.splitlines() if "mcp-task-gateway:" in line]
    assert second.returncode == 2 and len(lines) == 1 and "Traceback" not in stderr
    if port == "the same port":
        assert f"cannot listen on 127.0.0.1:{first_port}: the port is in use" in lines[0]
    else:
        store = tmp_path / "gateway.db"
        assert lines[0].startswith(f"mcp-task-gateway: the store {store} is in use by gateway ")
        assert f"(it holds {store}.lock)" in lines[0] and "another store.path" in lines[0]
    # Recovery never ran in the second process: the first one's task ran to its end.
    assert task["status"] == "completed"


async def test_the_store_of_a_killed_gateway_opens_at_once_and_its_task_fails_as_restarted(
    tmp_path: Path,
) -> None:
    port = free_port()
    config = write_config(tmp_path, port)
    url = f"http://127.0.0.1:{port}/demo/mcp"
    proc = start_process(config, port)
    try:
        async with aiohttp.ClientSession() as http:
            session_id, _ = await raw_session(http, url)
            task_id = await start_task(http, url, session_id, "slow", {"seconds": 60})
        proc.send_signal(signal.SIGKILL)  # no shutdown: the lock goes with the process
        await asyncio.to_thread(proc.wait, 10)
        proc = start_process(config, port)
        async with aiohttp.ClientSession() as http:
            got = await rpc(http, url, session_id, "tasks/get", {"taskId": task_id}, 3)
    finally:
        proc.terminate()
        proc.wait(10)
    assert got["result"]["status"] == "failed"
    assert got["result"]["statusMessage"] == "interrupted: gateway restarted"


@pytest.mark.parametrize(
    ("where", "why"),
    [
        ("not-a-database.db", "file is not a database"),
        ("not-a-database.db/under/it.db", "Not a directory"),
    ],
)
def test_a_store_path_that_cannot_be_a_store_stops_in_one_line_with_exit_2(
    tmp_path: Path, where: str, why: str
) -> None:
    """Once a traceback and exit 1: a file that is something else, a path under a file."""
    (tmp_path / "not-a-database.db").write_text("hello\n")
    path = tmp_path / where
    config = write_config(tmp_path, free_port(), store=f"{{path: {json.dumps(str(path))}}}")
    done = subprocess.run(
        [sys.executable, "-m", "gateway", "--config", str(config)],
        cwd=ROOT,
        capture_output=True,
        timeout=60,
    )
    stderr = done.stderr.decode()
    lines = [line for line in stderr.splitlines() if "mcp-task-gateway:" in line]
    assert done.returncode == 2 and "Traceback" not in stderr, stderr[-2000:]
    assert lines == [f"mcp-task-gateway: store.path: cannot use {path} as the SQLite store: {why}"]
    assert (tmp_path / "not-a-database.db").read_text() == "hello\n"  # left as it was
