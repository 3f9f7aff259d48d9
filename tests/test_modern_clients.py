"""The mcp 2.3 client, the 2026-07-28 generation's Python SDK, against the gateway.

mcp 2.3 conflicts with the mcp 1.30 this suite runs on, so it runs from its own venv (the one
`.ci/conformance.sh` builds for the conformance suite; `MCP2_PYTHON` may name another) as a
child process running `tests/modern/client.py`.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
from typing import Any

import pytest

from .conftest import DEMO, ROOT, StartGateway
from .helpers import MCP2_PYTHON, needs_mcp2

#: What tests/modern/client.py's callbacks answer (it runs under mcp 2.3: not importable here).
ANSWERS = {"name": "mcp-2.3", "sampled": "sampled by mcp 2.3", "root": "file:///mcp-2.3"}


pytestmark = needs_mcp2


def modern_client(url: str, mode: str, action: str = "echo") -> dict[str, Any]:
    done = subprocess.run(
        [str(MCP2_PYTHON), str(ROOT / "tests" / "modern" / "client.py"), url, mode, action],
        capture_output=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    return dict(json.loads(done.stdout))


@pytest.mark.parametrize("mode", ["2026-07-28", "auto"])
async def test_a_pinned_or_auto_mcp_2_3_client_is_served_on_the_2026_07_28_path(
    start_gateway: StartGateway, mode: str
) -> None:
    url = f"{await start_gateway()}/demo/mcp"
    outcome = await _run(url, mode)
    assert outcome["protocol_version"] == "2026-07-28"
    assert "echo" in outcome["tools"]
    assert outcome["echo"][0]["text"] == "modern"


async def test_a_legacy_mcp_2_3_client_still_gets_a_session(
    start_gateway: StartGateway,
) -> None:
    url = f"{await start_gateway()}/demo/mcp"
    outcome = await _run(url, "legacy")
    assert outcome["protocol_version"] == "2025-11-25"
    assert "echo" in outcome["tools"]
    assert outcome["echo"][0]["text"] == "modern"


async def test_an_auto_client_falls_back_to_a_session_where_2026_07_28_is_switched_off(
    start_gateway: StartGateway,
) -> None:
    routes = [{"name": "demo", "upstream": DEMO, "generations": ["2025-11-25"]}]
    url = f"{await start_gateway(routes)}/demo/mcp"
    outcome = await _run(url, "auto")
    assert outcome["protocol_version"] == "2025-11-25"
    assert outcome["echo"][0]["text"] == "modern"


@pytest.mark.parametrize("transport", ["stdio", "streamable_http"])
@pytest.mark.parametrize("mode", ["2026-07-28", "auto"])
async def test_an_upstream_elicitation_reaches_the_mcp_2_3_client_as_an_mrtr_round(
    start_gateway: StartGateway, request: pytest.FixtureRequest, mode: str, transport: str
) -> None:
    url = f"{await start_gateway(_routes(request, transport))}/demo/mcp"
    outcome = await _run(url, mode, "ask")
    assert outcome.get("error") is None, outcome
    assert outcome["protocol_version"] == "2026-07-28"
    [asked] = outcome["asked"]  # the callback ran once, for the tool's one question
    assert asked["message"] == "What is your name?"
    assert asked["requestedSchema"]["required"] == ["name"]
    assert outcome["content"][0]["text"] == f"Hello, {ANSWERS['name']}!"
    assert outcome["is_error"] is False


@pytest.mark.parametrize("transport", ["stdio", "streamable_http"])
@pytest.mark.parametrize("mode", ["2026-07-28", "auto"])
async def test_an_upstream_sampling_request_reaches_the_mcp_2_3_client_as_an_mrtr_round(
    start_gateway: StartGateway, request: pytest.FixtureRequest, mode: str, transport: str
) -> None:
    url = f"{await start_gateway(_routes(request, transport))}/demo/mcp"
    outcome = await _run(url, mode, "sample")
    assert outcome.get("error") is None, outcome
    assert outcome["protocol_version"] == "2026-07-28"
    [asked] = outcome["asked"]
    assert asked["messages"][0]["content"]["text"] == "Say something."
    assert outcome["content"][0]["text"] == ANSWERS["sampled"]


async def test_an_upstream_roots_request_reaches_the_mcp_2_3_client_as_an_mrtr_round(
    start_gateway: StartGateway,
) -> None:
    url = f"{await start_gateway()}/demo/mcp"
    outcome = await _run(url, "2026-07-28", "roots")
    assert outcome.get("error") is None, outcome
    assert outcome["asked"] == [{"method": "roots/list"}]
    assert outcome["content"][0]["text"] == ANSWERS["root"]


@pytest.mark.parametrize("action", ["ask", "sample", "roots"])
async def test_the_mcp_2_3_question_actions_work_in_a_legacy_session(
    start_gateway: StartGateway, action: str
) -> None:
    """The same runner over a 2025-11-25 session, where questions are server requests: the
    actions above are sound, so a failure there is the 2026-07-28 path's."""
    url = f"{await start_gateway()}/demo/mcp"
    outcome = await _run(url, "legacy", action)
    assert outcome["protocol_version"] == "2025-11-25"
    assert len(outcome["asked"]) == 1
    expected = {"ask": f"Hello, {ANSWERS['name']}!", "sample": ANSWERS["sampled"]}
    assert outcome["content"][0]["text"] == expected.get(action, ANSWERS["root"])


def _routes(request: pytest.FixtureRequest, transport: str) -> list[dict[str, Any]]:
    """Route `demo` to the bundled demo (stdio) or to the SDK's FastMCP server (Streamable
    HTTP, tests/sdk_upstream.py): both have `ask` and `sample`."""
    if transport == "stdio":
        return [{"name": "demo", "upstream": DEMO}]
    url = request.getfixturevalue("sdk_upstream")
    return [{"name": "demo", "upstream": {"transport": "streamable_http", "url": url}}]


async def _run(url: str, mode: str, action: str = "echo") -> dict[str, Any]:
    return await asyncio.to_thread(modern_client, url, mode, action)
