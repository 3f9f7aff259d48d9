"""An outage of the shared store that every replica sees at once: readiness follows the store
within seconds, and no replica takes it for the others' deaths (their calls' outcomes, in hand
while the store was away, are written when it returns, not replaced by "replica lost")."""

from __future__ import annotations

import asyncio
import json
import subprocess
from pathlib import Path

import aiohttp
import pytest

from .conftest import free_port
from .helpers import open_session, start_process, start_task, task_terminal, write_config
from .test_replicas import Cable

LEASE_SECONDS = 2


async def ready(http: aiohttp.ClientSession, port: int) -> int:
    async with asyncio.timeout(10), http.get(f"http://127.0.0.1:{port}/readyz") as resp:
        return resp.status


async def until_ready_is(http: aiohttp.ClientSession, port: int, status: int) -> float:
    """Seconds until /readyz answers `status`."""
    started = asyncio.get_running_loop().time()
    async with asyncio.timeout(20):
        while await ready(http, port) != status:  # noqa: ASYNC110 - polled, as a balancer polls
            await asyncio.sleep(0.1)
    return asyncio.get_running_loop().time() - started


@pytest.mark.slow
async def test_an_outage_all_replicas_see_fails_readiness_and_loses_no_outcome(
    tmp_path: Path, pg_url: str
) -> None:
    cable, url = await Cable.before(pg_url)
    store = f"{{backend: postgres, url: {json.dumps(url)}, lease_seconds: {LEASE_SECONDS}}}"
    procs: dict[str, subprocess.Popen[bytes]] = {}
    ports: dict[str, int] = {}
    for name in "ab":
        home = tmp_path / name
        home.mkdir()
        ports[name] = free_port()
        config = write_config(home, ports[name], store=store)
        procs[name] = start_process(config, ports[name], log=home / "gateway.log")
    try:
        async with aiohttp.ClientSession() as http:
            running = {}
            for name, port in ports.items():
                route = f"http://127.0.0.1:{port}/demo/mcp"
                session = await open_session(http, route)
                arguments = {"seconds": 2, "steps": 2}  # its call ends while the store is away
                running[name] = (
                    route,
                    session,
                    await start_task(http, route, session, "slow", arguments),
                )
            await cable.cut()
            # Nothing else asks the store meanwhile: the lease rounds find it gone.
            gone = [await until_ready_is(http, port, 503) for port in ports.values()]
            await asyncio.sleep(3 * LEASE_SECONDS)  # every lease lapses
            await cable.mend()
            back = [await until_ready_is(http, port, 200) for port in ports.values()]
            ended = {
                name: await task_terminal(http, route, session, task_id, seconds=20)
                for name, (route, session, task_id) in running.items()
            }
    finally:
        for proc in procs.values():
            proc.terminate()
        # Waiting must not block this loop: the cable it runs carries the gateways' goodbyes.
        for proc in procs.values():
            await asyncio.to_thread(proc.wait, 15)
        await cable.cut()
    assert all(seconds < 2 * LEASE_SECONDS for seconds in gone), gone
    assert all(seconds < 15 for seconds in back), back
    assert {name: task["status"] for name, task in ended.items()} == {
        "a": "completed",
        "b": "completed",
    }
    logs = "".join((tmp_path / name / "gateway.log").read_text() for name in "ab")
    assert "waits for the store" in logs  # the outcomes were in hand during the outage
    assert "replica running it was lost" not in logs
