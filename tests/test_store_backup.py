"""`mcp-task-gateway store backup PATH --config FILE`, beside a running gateway process."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import aiohttp
import pytest

from gateway.commands import store as store_cli
from gateway.tasks.models import TaskStatus
from gateway.tasks.store import open_store

from .conftest import ROOT, free_port
from .helpers import get_task, open_session, start_process, start_task, task_terminal, write_config


def backup(*args: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "gateway", "store", "backup", *args]
    return subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=60)


async def test_a_backup_of_a_running_store_opens_with_its_tasks_and_sessions(
    tmp_path: Path,
) -> None:
    port = free_port()
    config = write_config(tmp_path, port)
    url = f"http://127.0.0.1:{port}/demo/mcp"
    proc = start_process(config, port)
    try:
        async with aiohttp.ClientSession() as http:
            session = await open_session(http, url)
            done = await start_task(http, url, session, "echo", {"text": "kept"})
            await task_terminal(http, url, session, done)
            running = await start_task(http, url, session, "slow", {"seconds": 60, "steps": 1})
            copied = backup(str(tmp_path / "backup.db"), "--config", str(config))
            # The gateway went on serving through the copy.
            assert (await get_task(http, url, session, running))["status"] == "working"
    finally:
        proc.terminate()
        proc.wait(15)
    assert copied.returncode == 0, copied.stderr
    assert "2 task(s), 1 session(s)" in copied.stdout
    store = await open_store(tmp_path / "backup.db")
    try:
        finished = await store.get_task(done)
        assert finished is not None and finished.status is TaskStatus.COMPLETED
        outcome = await store.get_outcome(done)
        assert outcome is not None and outcome.body["content"][0]["text"] == "kept"
        working = await store.get_task(running)
        assert working is not None and working.status is TaskStatus.WORKING
        assert await store.get_session(session) is not None
    finally:
        await store.close()


def refused(capsys: pytest.CaptureFixture[str], *args: str) -> str:
    """The command run in this process (its coverage counts), refusing: what it said."""
    assert store_cli.main(["backup", *args]) == 2
    return capsys.readouterr().err


def test_a_backup_refuses_to_overwrite_and_says_what_to_do(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = str(write_config(tmp_path, free_port()))
    missing = refused(capsys, str(tmp_path / "b.db"), "--config", config)
    assert f"there is no store at {tmp_path / 'gateway.db'} (store.path)" in missing
    (tmp_path / "gateway.db").write_bytes(b"")
    taken = tmp_path / "taken.db"
    taken.write_text("an earlier backup")
    said = refused(capsys, str(taken), "--config", config)
    assert "exists already: give the backup a new path" in said
    assert taken.read_text() == "an earlier backup"
    (tmp_path / "gateway.db").write_text("not a database")
    assert "could not copy" in refused(capsys, str(tmp_path / "c.db"), "--config", config)


def test_a_postgres_store_is_pointed_at_pg_dump(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = "{backend: postgres, url: 'postgresql://gateway@127.0.0.1:5432/gateway'}"
    config = str(write_config(tmp_path, free_port(), store=store))
    assert "pg_dump" in refused(capsys, str(tmp_path / "b.db"), "--config", config)


def test_a_bad_config_is_named_before_anything_is_copied(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "bad.yaml"
    config.write_text("store: {pth: x}\n")
    assert "bad.yaml: store.pth" in refused(capsys, str(tmp_path / "b.db"), "--config", str(config))


async def test_a_backup_made_in_process_counts_what_it_copied(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = str(write_config(tmp_path, free_port()))
    store = await open_store(tmp_path / "gateway.db")  # a gateway's open store, lock and all
    try:
        assert store_cli.main(["backup", str(tmp_path / "copy.db"), "--config", config]) == 0
    finally:
        await store.close()
    assert "0 task(s), 0 session(s)" in capsys.readouterr().out
