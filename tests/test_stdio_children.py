"""stdio upstreams: one child per session, a cap, the child ended with its session, a child
that dies mid-call, and the environment a child gets."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path

import aiohttp
import pytest
from mcp import types
from mcp.shared.exceptions import McpError

from gateway.config import CHILD_ENV_ALLOWED
from gateway.errors import INTERNAL_ERROR

from .conftest import ROOT, StartGateway, mcp_client
from .test_mcp_endpoint import INIT, headers


def route(pid_dir: Path, **upstream: object) -> list[dict[str, object]]:
    command = ["python", str(ROOT / "tests" / "stdio_upstream.py"), "--pid-dir", str(pid_dir)]
    return [{"name": "kids", "upstream": {"transport": "stdio", "command": command, **upstream}}]


@pytest.fixture
def pid_dir(tmp_path: Path) -> Path:
    """Where the upstream children write their pids (the gateway's database is elsewhere)."""
    path = tmp_path / "pids"
    path.mkdir()
    return path


def pids(pid_dir: Path) -> list[int]:
    return sorted(int(p.name) for p in pid_dir.iterdir())


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return (
        Path(f"/proc/{pid}").exists()
        and "zombie" not in Path(f"/proc/{pid}/status").read_text().lower()
    )


async def wait_until_dead(pid: int) -> None:
    async with asyncio.timeout(10):
        while alive(pid):  # noqa: ASYNC110 - another process's exit has no event to await
            await asyncio.sleep(0.05)


async def test_each_session_gets_its_own_child_ended_with_the_session(
    start_gateway: StartGateway, pid_dir: Path
) -> None:
    base = await start_gateway(route(pid_dir))
    async with mcp_client(f"{base}/kids/mcp") as one, mcp_client(f"{base}/kids/mcp") as two:
        await one.call_tool("echo", {"text": "1"})
        await two.call_tool("echo", {"text": "2"})
        children = pids(pid_dir)
        assert len(children) == 2 and all(alive(p) for p in children)
    # Leaving the client context sends DELETE; each child must be gone, not orphaned.
    for pid in children:
        await wait_until_dead(pid)


async def test_children_beyond_the_route_cap_are_refused_clearly(
    start_gateway: StartGateway, pid_dir: Path
) -> None:
    base = await start_gateway(route(pid_dir, max_children=1), sessions={"max_sessions": 2})
    url = f"{base}/kids/mcp"
    async with aiohttp.ClientSession() as http:
        async with http.post(url, json=INIT, headers=headers()) as first:
            assert first.status == 200
            session_id = first.headers["Mcp-Session-Id"]
        for _ in range(2):
            # Refused twice for the child cap: a refused initialize leaves no session behind
            # (else the second refusal would name sessions.max_sessions instead).
            async with http.post(url, json=INIT, headers=headers()) as refused:
                assert refused.status == 503
                assert "max_children" in (await refused.json())["error"]["message"]
        async with http.delete(url, headers={"Mcp-Session-Id": session_id}) as ended:
            assert ended.status == 200
        async with http.post(url, json=INIT, headers=headers()) as third:
            assert third.status == 200  # the slot came back with the ended session


async def test_child_that_dies_mid_call_fails_the_call_and_the_next_call_gets_a_fresh_child(
    start_gateway: StartGateway, pid_dir: Path
) -> None:
    base = await start_gateway(route(pid_dir))
    async with mcp_client(f"{base}/kids/mcp") as client:
        with pytest.raises(McpError) as raised:
            await client.call_tool("crash", {})
        assert raised.value.error.code == INTERNAL_ERROR
        assert "exited with code 3" in raised.value.error.message
        result = await client.call_tool("echo", {"text": "again"})
        block = result.content[0]
        assert isinstance(block, types.TextContent) and block.text == "again"
    first, second = pids(pid_dir)
    assert not alive(first)
    await wait_until_dead(second)


async def test_replacing_a_dead_child_beyond_the_cap_is_a_clear_error_not_a_hang(
    start_gateway: StartGateway, pid_dir: Path
) -> None:
    base = await start_gateway(route(pid_dir, max_children=1))
    async with mcp_client(f"{base}/kids/mcp") as first:
        with pytest.raises(McpError):
            await first.call_tool("crash", {})
        # The dead child's slot goes to another session before `first` calls again.
        async with mcp_client(f"{base}/kids/mcp") as second:
            async with asyncio.timeout(10):
                with pytest.raises(McpError) as raised:
                    await first.call_tool("echo", {"text": "no room"})
            assert raised.value.error.code == INTERNAL_ERROR
            assert "max_children" in raised.value.error.message
            result = await second.call_tool("echo", {"text": "has the slot"})
            block = result.content[0]
            assert isinstance(block, types.TextContent) and block.text == "has the slot"


async def test_a_stdio_child_gets_only_the_allowed_environment_and_its_route_env(
    start_gateway: StartGateway, pid_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Secrets in the gateway's own environment (read by it or not) must stay in the gateway.
    secrets = {
        "TEST_JWT_SECRET": "j" * 40,
        "TEST_API_KEY": "k" * 40,
        "TEST_METRICS_TOKEN": "m" * 40,
    }
    for name, value in secrets.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("TEST_PROXY", "http://proxy.example:3128")
    env = {"CHILD_MODE": "strict", "CHILD_KEY": "${TEST_API_KEY}"}
    base = await start_gateway(
        route(pid_dir, env=env, inherit_env=["TEST_PROXY"]),
        metrics={"bearer_token_env": "TEST_METRICS_TOKEN"},
    )
    async with mcp_client(f"{base}/kids/mcp") as client:
        block = (await client.call_tool("environment", {})).content[0]
    assert isinstance(block, types.TextContent)
    seen: dict[str, str] = json.loads(block.text)
    assert not secrets.keys() & seen.keys()
    assert seen["PATH"] == os.environ["PATH"]
    assert seen["CHILD_MODE"] == "strict" and seen["CHILD_KEY"] == secrets["TEST_API_KEY"]
    assert seen["TEST_PROXY"] == "http://proxy.example:3128"
    assert seen.keys() <= {*CHILD_ENV_ALLOWED, *env, "TEST_PROXY"}
