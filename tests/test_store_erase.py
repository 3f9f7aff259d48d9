"""`mcp-task-gateway store erase --principal P`: a data-protection request on a stopped
gateway's store, their name in the audit file kept or pseudonymised as the operator says. (The
store's part, `TaskStore.erase_principal`, is tested on both backends in test_store.py.)"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gateway.commands import store as store_cli
from gateway.tasks.store import open_store
from gateway.tasks.store.sqlite import schema as sqlite_schema

from .conftest import ROOT, free_port
from .helpers import write_config
from .test_store import fill


async def filled(path: Path) -> None:
    opened = await open_store(path)
    await fill(opened)
    await opened.close()


async def read_back(path: Path) -> tuple[bool, bool]:
    """Whether a2 (alice's) and b1 (bob's) are still there."""
    opened = await open_store(path)
    try:
        return await opened.get_task("a2") is not None, await opened.get_task("b1") is not None
    finally:
        await opened.close()


# Not coroutines: the command runs its own event loop, as it does from a shell.
def test_the_command_erases_a_stopped_stores_principal_and_pseudonymises_the_audit(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trail = tmp_path / "audit.log"
    config = write_config(tmp_path, free_port(), f"audit: {{file: {json.dumps(str(trail))}}}")
    asyncio.run(filled(tmp_path / "gateway.db"))
    lines = [
        {"event": "task_created", "principal": "alice", "task_id": "a1"},
        {"event": "task_created", "principal": "bob", "task_id": "b1"},
        {"event": "auth_failed", "reason": "unknown API key"},
    ]
    trail.write_text("".join(json.dumps(line) + "\n" for line in lines) + "not json\n")
    (tmp_path / "audit.log.1").write_text(json.dumps(lines[0]) + "\n")
    args = ["erase", "--principal", "alice", "--audit", "pseudonymise", "--config", str(config)]
    assert store_cli.main(args) == 0
    said = capsys.readouterr().out
    assert "erased principal 'alice': 2 task(s), 1 session(s)" in said
    assert "2 audit line(s) in 2 file(s)" in said
    assert asyncio.run(read_back(tmp_path / "gateway.db")) == (False, True)
    rewritten = trail.read_text().splitlines()
    assert "alice" not in trail.read_text() + (tmp_path / "audit.log.1").read_text()
    assert json.loads(rewritten[0])["principal"] == store_cli.pseudonym("alice")
    assert json.loads(rewritten[1])["principal"] == "bob" and rewritten[3] == "not json"


def test_the_command_refuses_a_store_a_running_gateway_holds(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = write_config(tmp_path, free_port())
    asyncio.run(filled(tmp_path / "gateway.db"))
    # The file's lock, as a running gateway holds it (see sqlite_schema._lock).
    held = sqlite_schema._lock(tmp_path / "gateway.db")
    try:
        assert store_cli.main(["erase", "--principal", "alice", "--config", str(config)]) == 2
    finally:
        os.close(held)
    said = capsys.readouterr().err
    assert "is in use by" in said and "an erasure runs on a stopped gateway's store" in said
    # Stopped, it is erased: the command as an operator runs it, in a process of its own.
    command = [sys.executable, "-m", "gateway", "store", "erase", "--principal", "alice"]
    done = subprocess.run(
        [*command, "--config", str(config)], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert "2 task(s), 1 session(s); audit lines kept" in done.stdout
