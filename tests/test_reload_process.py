"""SIGHUP on a real gateway process while 100 tasks run: a rotated API key, a new route, a changed
limit and a rotated upstream header apply to new requests, and every running task completes; an
invalid file changes nothing, and the log says why."""

from __future__ import annotations

import asyncio
import hashlib
import json
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp.test_utils import TestServer

from .conftest import DEMO, ROOT, free_port, wait_for_port
from .fakes import SEEN, recording_upstream
from .helpers import INIT, headers, write_config

OLD_KEY, NEW_KEY = "old-key-0123456789abcdef", "new-key-0123456789abcdef"
TASKS, SESSIONS = 100, 4
#: Long enough for three reloads and their checks to happen while every task runs.
TASK_SECONDS = 4


def _config(
    tmp_path: Path, port: int, keys: list[str], routes: list[dict[str, Any]], **limits: Any
) -> Path:
    auth = {
        "api_keys": [
            {"principal": "alice", "sha256": hashlib.sha256(k.encode()).hexdigest()} for k in keys
        ]
    }
    limits = {
        "requests_per_second": 100000,
        "burst": 100000,
        "sessions_per_principal": 100,
        "max_ttl_ms": 600000,
        **limits,
    }
    extra = f"auth: {json.dumps(auth)}\nlimits: {json.dumps(limits)}"
    return write_config(tmp_path, port, extra, f"routes: {json.dumps(routes)}")


@contextmanager
def _gateway(config: Path, port: int, log: Path) -> Iterator[subprocess.Popen[bytes]]:
    """The command, its log (stderr) in `log` and its audit lines (stdout) beside it in
    `log` + ".audit"."""
    with log.open("ab") as err, log.with_suffix(".audit").open("ab") as audit:
        proc = subprocess.Popen(
            [sys.executable, "-m", "gateway", "--config", str(config)],
            cwd=ROOT,
            stdout=audit,
            stderr=err,
        )
    try:
        wait_for_port(port, proc)
        yield proc
    finally:
        proc.terminate()
        proc.wait(15)


def _auth(key: str, session_id: str | None = None) -> dict[str, str]:
    return headers(session_id, Authorization=f"Bearer {key}")


async def _call(
    http: aiohttp.ClientSession,
    url: str,
    key: str,
    session_id: str,
    method: str,
    params: dict[str, Any],
    request_id: int = 1,
) -> dict[str, Any]:
    """One request in a session; its JSON or SSE answer, decoded."""
    message = {"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}
    async with http.post(url, json=message, headers=_auth(key, session_id)) as resp:
        assert resp.status == 200, resp.status
        if resp.content_type == "application/json":
            return dict(await resp.json())
        async for line in resp.content:
            if line.startswith(b"data: {"):
                data = json.loads(line[6:])
                if data.get("id") == request_id:
                    return dict(data)
    raise AssertionError(f"no answer to {method}")


async def _open(http: aiohttp.ClientSession, url: str, key: str) -> str:
    async with http.post(url, json=INIT, headers=_auth(key)) as resp:
        assert resp.status == 200, resp.status
        session_id = resp.headers["Mcp-Session-Id"]
    note = {"jsonrpc": "2.0", "method": "notifications/initialized"}
    async with http.post(url, json=note, headers=_auth(key, session_id)) as resp:
        assert resp.status == 202
    return session_id


async def _status(http: aiohttp.ClientSession, url: str, key: str) -> int:
    async with http.post(url, json=INIT, headers=_auth(key)) as resp:
        return resp.status


async def _task(http: aiohttp.ClientSession, url: str, key: str, session_id: str) -> dict[str, Any]:
    """A slow task, asking for an hour of ttl (the limit clamps it); the created task."""
    params = {"name": "slow", "arguments": {"seconds": TASK_SECONDS, "steps": 1}}
    params["task"] = {"ttl": 3600000}
    created = await _call(http, url, key, session_id, "tools/call", params)
    return dict(created["result"]["task"])


async def _reloads(http: aiohttp.ClientSession, base: str, outcome: str, count: int) -> None:
    """Return once the gateway counts `count` reloads with `outcome`."""
    line = f'mcp_gateway_config_reloads_total{{outcome="{outcome}"}} {count:.1f}'
    async with asyncio.timeout(10):
        while True:
            async with http.get(f"{base}/metrics") as resp:
                if line in await resp.text():
                    return
            await asyncio.sleep(0.05)


async def test_sighup_applies_a_rotated_key_a_route_a_limit_and_a_header_while_100_tasks_run(
    tmp_path: Path,
) -> None:
    recorder = TestServer(recording_upstream(), host="127.0.0.1")
    await recorder.start_server()
    seen = recorder.app[SEEN]
    recorded = {"transport": "streamable_http", "url": str(recorder.make_url("/mcp"))}
    demo = {"name": "demo", "upstream": DEMO}

    def h(token: str) -> dict[str, Any]:
        return {"name": "h", "upstream": {**recorded, "headers": {"X-Token": token}}}

    extra = {"name": "extra", "upstream": recorded}
    port, log = free_port(), tmp_path / "gateway.log"
    base = f"http://127.0.0.1:{port}"
    demo_url, h_url = f"{base}/demo/mcp", f"{base}/h/mcp"
    config = _config(tmp_path, port, [OLD_KEY], [demo, h("token-1")])
    connector = aiohttp.TCPConnector(limit=0)  # 100 waits and the checks side by side
    try:
        with _gateway(config, port, log) as proc:
            async with aiohttp.ClientSession(connector=connector) as http:
                sessions = [await _open(http, demo_url, OLD_KEY) for _ in range(SESSIONS)]
                created = await asyncio.gather(
                    *(_task(http, demo_url, OLD_KEY, sessions[n % SESSIONS]) for n in range(TASKS))
                )
                assert {task["ttl"] for task in created} == {600000}
                waits = [
                    asyncio.ensure_future(
                        _call(
                            http,
                            demo_url,
                            OLD_KEY,
                            sessions[n % SESSIONS],
                            "tasks/result",
                            {"taskId": task["taskId"]},
                            request_id=2,
                        )
                    )
                    for n, task in enumerate(created)
                ]
                h_session = await _open(http, h_url, OLD_KEY)

                # 1: both keys (the overlap), a new route, a lower ttl limit, a new token.
                routes = [demo, h("token-2"), extra]
                _config(tmp_path, port, [OLD_KEY, NEW_KEY], routes, max_ttl_ms=60000)
                proc.send_signal(signal.SIGHUP)
                await _reloads(http, base, "applied", 1)
                # Probed in the background as at start-up: h (its upstream changed) and extra
                # (added); not demo, which changed only through auth and limits. Awaited here,
                # or the probe's request could be among those `seen` records below.
                async with asyncio.timeout(20):
                    while not _probed(log, h=2, extra=1):  # noqa: ASYNC110 - a log, no event
                        await asyncio.sleep(0.05)
                first = await _call(
                    http, demo_url, NEW_KEY, sessions[0], "tasks/get", created[0], 3
                )
                assert first["result"]["status"] == "working"
                assert await _status(http, demo_url, OLD_KEY) == 200
                assert await _status(http, demo_url, NEW_KEY) == 200
                assert await _status(http, f"{base}/extra/mcp", NEW_KEY) == 200
                assert (await _task(http, demo_url, NEW_KEY, sessions[0]))["ttl"] == 60000
                seen.clear()
                await _open(http, h_url, NEW_KEY)  # a new session: the new token
                assert {headers["X-Token"] for headers in seen} == {"token-2"}
                seen.clear()
                await _call(http, h_url, NEW_KEY, h_session, "tools/list", {})
                assert [headers["X-Token"] for headers in seen] == ["token-1"]

                # 2: the old key withdrawn.
                _config(tmp_path, port, [NEW_KEY], routes, max_ttl_ms=60000)
                proc.send_signal(signal.SIGHUP)
                await _reloads(http, base, "applied", 2)
                assert await _status(http, demo_url, OLD_KEY) == 401
                assert await _status(http, demo_url, NEW_KEY) == 200

                # 3: an invalid file (and a route in it): refused whole.
                _config(tmp_path, port, [OLD_KEY], [*routes, {**extra, "name": "x"}], burst=0)
                proc.send_signal(signal.SIGHUP)
                await _reloads(http, base, "refused", 1)
                assert await _status(http, f"{base}/x/mcp", NEW_KEY) == 404
                assert await _status(http, demo_url, OLD_KEY) == 401
                assert await _status(http, f"{base}/extra/mcp", NEW_KEY) == 200

                async with asyncio.timeout(30):
                    answers = await asyncio.gather(*waits)
    finally:
        await recorder.close()
    texts = [answer["result"]["content"][0]["text"] for answer in answers]
    assert texts == [f"slept {TASK_SECONDS} s"] * TASKS
    stderr = log.read_text()
    assert (
        "routes added: extra; routes changed: demo (auth.api_keys, limits.max_ttl_ms), " in stderr
    )
    assert "h (upstream.headers, auth.api_keys, limits.max_ttl_ms)" in stderr
    refused = "ERROR gateway.reload: configuration reload refused, the running configuration stays"
    assert (
        f"{refused}: {config}: limits.burst: Input should be greater than or equal to 1" in stderr
    )
    audit = log.with_suffix(".audit").read_text()
    events = [json.loads(line) for line in audit.splitlines()]
    reloads = [e["event"] for e in events if e["event"].startswith("config_reload")]
    assert reloads == ["config_reloaded", "config_reloaded", "config_reload_failed"]
    assert OLD_KEY not in stderr + audit and NEW_KEY not in stderr + audit
    assert _probed(log, demo=1)  # at start-up only


def _probed(log: Path, **times: int) -> bool:
    """Whether each route's upstream check was logged as many `times` (route=count)."""
    text = log.read_text()
    return all(text.count(f"route {name}: upstream ") == n for name, n in times.items())


async def test_reloading_twenty_thousand_api_keys_leaves_the_gateway_answering(
    tmp_path: Path,
) -> None:
    """A 2 MB file of 20,000 keys is read and validated off the event loop (and by libyaml):
    it once held /livez for seconds. The reload is applied, and the gateway answers all along."""
    keys = [f"key-{n:05d}-0123456789abcdef" for n in range(20_000)]
    port, log = free_port(), tmp_path / "gateway.log"
    config = _config(tmp_path, port, keys, [{"name": "demo", "upstream": DEMO}])
    assert config.stat().st_size > 1_500_000
    worst, answered = 0.0, 0
    with _gateway(config, port, log) as proc:
        _config(tmp_path, port, [*keys[1:], NEW_KEY], [{"name": "demo", "upstream": DEMO}])
        async with aiohttp.ClientSession() as http:
            proc.send_signal(signal.SIGHUP)
            async with asyncio.timeout(60):
                while "configuration reloaded" not in log.read_text():
                    started = asyncio.get_running_loop().time()
                    async with http.get(f"http://127.0.0.1:{port}/livez") as resp:
                        assert resp.status == 200
                    worst = max(worst, asyncio.get_running_loop().time() - started)
                    answered += 1
                    await asyncio.sleep(0.02)
    assert "routes changed: demo (auth.api_keys)" in log.read_text()
    assert answered >= 3 and worst < 1.0, (answered, worst)
