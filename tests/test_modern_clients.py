"""The mcp 2.3 client, the 2026-07-28 generation's Python SDK, against the gateway.

mcp 2.3 conflicts with the mcp 1.30 this suite runs on, so it runs from its own venv (the one
`.ci/conformance.sh` builds for the conformance suite; `MCP2_PYTHON` may name another) as a
child process running `tests/modern/client.py`.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from .conftest import DEMO, ROOT, StartGateway

MCP2_PYTHON = Path(
    os.environ.get(
        "MCP2_PYTHON", ROOT / ".cache" / "conformance" / "everything-venv" / "bin" / "python"
    )
)

pytestmark = pytest.mark.skipif(
    not MCP2_PYTHON.exists() and not os.environ.get("CI"),
    reason=f"mcp 2.3 not installed at {MCP2_PYTHON} (bash .ci/conformance.sh --setup-only)",
)


def modern_client(url: str, mode: str) -> dict[str, Any]:
    done = subprocess.run(
        [str(MCP2_PYTHON), str(ROOT / "tests" / "modern" / "client.py"), url, mode],
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


async def _run(url: str, mode: str) -> dict[str, Any]:
    return await asyncio.to_thread(modern_client, url, mode)
