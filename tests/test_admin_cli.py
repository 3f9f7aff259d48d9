"""`mcp-task-gateway tasks ...` and `sessions ...` over real processes: a gateway started as
the command, tasks made by two principals through its MCP endpoint (API keys), and each
command run as its own process with only the admin token in its environment (not the clients'
keys the file also names). Cancel reaches the upstream as the owner's own would, also when the
task runs on another replica; every failure is one line and exit code 2."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp.test_utils import TestServer

from .conftest import ROOT, free_port
from .fakes import FAULT_HOOKS
from .helpers import open_session, rpc, start_process, start_task, task_terminal, write_config

TOKEN = "admin-token-0123456789abcdef"
KEYS = {"alice": "alice-key-0123456789", "bob": "bob-key-0123456789"}
AUTH = (
    "auth: {api_keys: [{principal: alice, key_env: ALICE_KEY}, {principal: bob, key_env: BOB_KEY}]}"
)
TASK_HEADER = ["TASK", "ROUTE", "PRINCIPAL", "STATUS", "TOOL", "CREATED", "UPDATED"]
ROW_KEYS = {"taskId", "route", "principal", "status", "tool", "createdAt", "lastUpdatedAt"}


def operator_env(**changes: str | None) -> dict[str, str]:
    """The operator's shell: the admin token, and none of the clients' keys."""
    env = {k: v for k, v in os.environ.items() if k not in ("ALICE_KEY", "BOB_KEY")}
    env["ADMIN_TOKEN"] = TOKEN
    for name, value in changes.items():
        if value is None:
            env.pop(name, None)
        else:
            env[name] = value
    return env


async def command(*args: str, env: dict[str, str] | None = None) -> tuple[int, str, str]:
    """`python -m gateway ARGS` as its own process: exit code, stdout, stderr."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "gateway",
        *args,
        cwd=ROOT,
        env=env or operator_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode is not None
    assert "Traceback" not in err.decode()
    return proc.returncode, out.decode(), err.decode()


def config_for(home: Path, upstream: str, store: str | None = None) -> tuple[Path, int, int]:
    """A gateway's file (its store in `home` unless `store` says otherwise): its path, port
    and admin port."""
    home.mkdir(exist_ok=True)
    port, admin_port = free_port(), free_port()
    admin = f"admin: {{listen: {{host: 127.0.0.1, port: {admin_port}}}, token_env: ADMIN_TOKEN}}"
    audit = f"audit: {{file: {json.dumps(str(home / 'audit.log'))}}}"
    routes = (
        f"routes:\n  - {{name: h, upstream: {{transport: streamable_http, url: {upstream}}}}}\n"
    )
    config = write_config(home, port, f"{AUTH}\n{admin}\n{audit}", routes, store=store)
    return config, port, admin_port


@asynccontextmanager
async def running(config: Path, port: int) -> AsyncIterator[str]:
    """The gateway as a process, its upstream (in this test's event loop) answering meanwhile;
    yields its route's URL."""
    proc = await asyncio.to_thread(start_process, config, port, config.parent / "gateway.log")
    try:
        yield f"http://127.0.0.1:{port}/h/mcp"
    finally:
        proc.terminate()
        await asyncio.to_thread(proc.wait, 15)


@pytest.fixture
def client_keys(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The gateway processes' environment: the clients' keys and the admin token."""
    monkeypatch.setenv("ADMIN_TOKEN", TOKEN)
    for who, key in KEYS.items():
        monkeypatch.setenv(f"{who.upper()}_KEY", key)
    yield


def as_client(who: str) -> aiohttp.ClientSession:
    return aiohttp.ClientSession(headers={"Authorization": f"Bearer {KEYS[who]}"})


async def hang_called(upstream: TestServer) -> dict[str, Any]:
    """The upstream's one tools/call, once it has come."""
    hooks = upstream.app[FAULT_HOOKS]
    async with asyncio.timeout(30):
        await hooks.arrived["hang"].wait()
    (call,) = [m for m in hooks.received if m.get("method") == "tools/call"]
    return call


async def cancelled_upstream(upstream: TestServer) -> list[dict[str, Any]]:
    received = upstream.app[FAULT_HOOKS].received
    async with asyncio.timeout(30):
        while not [m for m in received if m.get("method") == "notifications/cancelled"]:  # noqa: ASYNC110 - the fake has no event for it
            await asyncio.sleep(0.05)
    return [m for m in received if m.get("method") == "notifications/cancelled"]


async def audited(home: Path, event: str) -> list[dict[str, Any]]:
    """The audit file's `event` lines, once there is one (they are written on a thread)."""
    trail = home / "audit.log"
    async with asyncio.timeout(30):
        while True:
            lines = trail.read_text().splitlines() if trail.exists() else []
            found = [e for e in map(json.loads, lines) if e["event"] == event]
            if found:
                return found
            await asyncio.sleep(0.05)


@pytest.mark.slow
async def test_tasks_list_show_cancel_and_purge_every_principals_tasks(
    tmp_path: Path, faulty_upstream: TestServer, client_keys: None
) -> None:
    config, port, _ = config_for(tmp_path / "gw", str(faulty_upstream.make_url("/mcp")))
    c = ("--config", str(config))
    async with running(config, port) as url, as_client("alice") as alice, as_client("bob") as bob:
        alice_session, bob_session = await open_session(alice, url), await open_session(bob, url)
        hung = await start_task(alice, url, alice_session, "hang")
        hung_call = await hang_called(faulty_upstream)
        still = await start_task(alice, url, alice_session, "hang")
        echoed = await start_task(alice, url, alice_session, "echo", {"text": "a"})
        bobs = await start_task(bob, url, bob_session, "echo", {"text": "b"})
        await task_terminal(alice, url, alice_session, echoed)
        await task_terminal(bob, url, bob_session, bobs)

        code, table, _ = await command("tasks", "list", *c)
        _, alices, _ = await command(
            "tasks", "list", *c, "--principal", "alice", "--status", "working", "--json"
        )
        _, young, _ = await command("tasks", "list", *c, "--older-than", "1h", "--json")
        _, elsewhere, _ = await command("tasks", "list", *c, "--route", "nowhere", "--json")
        _, first, more = await command("tasks", "list", *c, "--limit", "1", "--json")
        _, shown, _ = await command("tasks", "show", bobs, *c)
        _, detail, _ = await command("tasks", "show", bobs, *c, "--json")
        cancel_code, cancelled, _ = await command("tasks", "cancel", hung, *c)
        (note,) = await cancelled_upstream(faulty_upstream)
        seen_by_alice = await task_terminal(alice, url, alice_session, hung)
        again_code, _, again = await command("tasks", "cancel", hung, *c)
        unknown_code, _, unknown = await command("tasks", "cancel", "nope", *c)
        # One id in 64 begins with '-': taken for the id, not for an unknown option.
        dashed_code, _, dashed = await command("tasks", "show", "-nope", *c)
        _, would, _ = await command("tasks", "purge", *c, "--all", "--dry-run")
        _, would_json, _ = await command(
            "tasks", "purge", *c, "--principal", "bob", "--dry-run", "--json"
        )
        _, purged_completed, _ = await command(
            "tasks", "purge", *c, "--status", "completed", "--json"
        )
        _, purged_rest, _ = await command("tasks", "purge", *c, "--all")
        _, left, _ = await command("tasks", "list", *c, "--json")
        wrong_code, _, wrong = await command(
            "tasks", "list", *c, env=operator_env(ADMIN_TOKEN="x" * 32)
        )

    assert code == 0
    lines = table.splitlines()
    assert lines[0].split() == TASK_HEADER
    rows = {line.split()[0]: line.split() for line in lines[1:]}
    assert set(rows) == {hung, still, echoed, bobs}  # whole ids
    assert rows[bobs][1:5] == ["h", "bob", "completed", "echo"]
    assert rows[hung][1:5] == ["h", "alice", "working", "hang"]
    assert lines[0].index("PRINCIPAL") == lines[1].index(rows[lines[1].split()[0]][2])  # aligned
    working = json.loads(alices)
    assert {row["taskId"] for row in working} == {hung, still}
    assert all(set(row) == ROW_KEYS for row in working)
    assert json.loads(young) == [] and json.loads(elsewhere) == []
    assert len(json.loads(first)) == 1 and "more tasks match" in more
    shown_lines = [line.split() for line in shown.splitlines()]
    assert shown_lines[0] == ["FIELD", "VALUE"]
    assert ["principal", "bob"] in shown_lines
    bobs_task = json.loads(detail)
    assert bobs_task["status"] == "completed" and bobs_task["taskId"] == bobs
    # The task's history, and its outcome by kind and size (not its content), both ways.
    assert [change["status"] for change in bobs_task["history"]] == ["working", "completed"]
    assert bobs_task["outcome"] == {"kind": "result", "bytes": bobs_task["outcome"]["bytes"]}
    assert ["outcome", "result,", str(bobs_task["outcome"]["bytes"]), "bytes"] in shown_lines
    history = shown_lines[shown_lines.index(["HISTORY"]) + 1 :]
    assert history[0] == ["AT", "STATUS", "ATTEMPT", "MESSAGE"]
    assert [row[:3] for row in history[1:]] == [
        [change["at"], change["status"], "-"] for change in bobs_task["history"]
    ]
    assert "PENDING QUESTIONS" not in shown and "OUTCOME" not in shown
    assert (
        cancel_code == 0
        and cancelled.strip() == f"cancelled task {hung} (route h, principal alice)"
    )
    assert note["params"]["requestId"] == hung_call["id"]  # the call stopped upstream
    assert seen_by_alice["status"] == "cancelled"
    assert again_code == 2 and again.strip() == (
        f"mcp-task-gateway: task {hung} is cancelled already: only a working or input_required "
        "task can be cancelled"
    )
    assert unknown_code == 2 and unknown.strip() == "mcp-task-gateway: no task nope"
    assert dashed_code == 2 and dashed.strip() == "mcp-task-gateway: no task -nope"
    # A dry run deletes nothing: it counts, and lists as `tasks list` does.
    said = would.splitlines()
    assert said[0] == "would purge 3 finished task(s)" and said[1].split() == TASK_HEADER
    assert {line.split()[0] for line in said[2:5]} == {hung, echoed, bobs}
    assert said[5:] == ["nothing was deleted (--dry-run)"]
    preview = json.loads(would_json)
    assert preview["wouldPurge"] == 1 and preview["more"] is False
    assert [row["taskId"] for row in preview["tasks"]] == [bobs]
    assert json.loads(purged_completed) == {"purged": 2}
    assert purged_rest.strip() == "purged 1 finished task(s)"  # the cancelled one
    assert [row["taskId"] for row in json.loads(left)] == [still]
    assert wrong_code == 2 and "refused the token in ADMIN_TOKEN (401)" in wrong
    (event,) = await audited(tmp_path / "gw", "task_cancelled")
    assert event == {**event, "actor": "operator", "principal": "alice", "task_id": hung}
    purges = await audited(tmp_path / "gw", "tasks_purged")
    assert [(p["count"], p.get("status")) for p in purges] == [(2, "completed"), (1, None)]
    assert TOKEN not in (tmp_path / "gw" / "audit.log").read_text()


@pytest.mark.slow
async def test_sessions_list_and_end_and_the_ended_one_gets_404(
    tmp_path: Path, faulty_upstream: TestServer, client_keys: None
) -> None:
    config, port, _ = config_for(tmp_path / "gw", str(faulty_upstream.make_url("/mcp")))
    c = ("--config", str(config))
    async with running(config, port) as url, as_client("alice") as alice, as_client("bob") as bob:
        alice_session, bob_session = await open_session(alice, url), await open_session(bob, url)

        code, table, _ = await command("sessions", "list", *c)
        _, bobs, _ = await command("sessions", "list", *c, "--principal", "bob", "--json")
        end_code, ended, _ = await command("sessions", "end", alice_session, *c)
        ping = {"jsonrpc": "2.0", "id": 7, "method": "ping"}
        headers = {"Mcp-Session-Id": alice_session, "Accept": "application/json, text/event-stream"}
        async with alice.post(url, json=ping, headers=headers) as after:
            status_after = after.status
        bob_still = await rpc(bob, url, bob_session, "ping", {})
        again_code, _, again = await command("sessions", "end", alice_session, *c, "--json")
        dashed_code, _, dashed = await command("sessions", "end", *c, "-nope")

    assert code == 0
    lines = table.splitlines()
    assert lines[0].split() == ["SESSION", "ROUTE", "PRINCIPAL", "CREATED"]
    assert sorted(line.split()[:3] for line in lines[1:]) == sorted(
        [[alice_session, "h", "alice"], [bob_session, "h", "bob"]]
    )
    (row,) = json.loads(bobs)
    assert set(row) == {"sessionId", "route", "principal", "createdAt"}
    assert row["sessionId"] == bob_session and row["principal"] == "bob"
    assert end_code == 0 and alice_session in ended and "alice" in ended
    assert status_after == 404
    assert bob_still["result"] == {}
    assert again_code == 2 and again.strip() == f"mcp-task-gateway: no session {alice_session}"
    assert dashed_code == 2 and dashed.strip() == "mcp-task-gateway: no session -nope"
    (event,) = await audited(tmp_path / "gw", "session_ended")
    assert event == {**event, "actor": "operator", "principal": "alice", "reason": "deleted"}


@pytest.mark.slow
async def test_each_failure_is_one_line_and_exit_code_2(tmp_path: Path) -> None:
    config, _, admin_port = config_for(tmp_path / "gw", "http://127.0.0.1:9/mcp")
    c = ("--config", str(config))
    plain = tmp_path / "plain.yaml"
    lines = config.read_text().splitlines()
    plain.write_text("\n".join(line for line in lines if not line.startswith("admin:")))

    cases = {
        "no admin section": await command("tasks", "list", "--config", str(plain)),
        "token unset": await command("tasks", "list", *c, env=operator_env(ADMIN_TOKEN=None)),
        # Written with `echo` to a file and read back: no header can carry the newline.
        "token with a newline": await command(
            "tasks", "list", *c, env=operator_env(ADMIN_TOKEN=TOKEN + "\n")
        ),
        "not running": await command("sessions", "list", *c),
        "bad age": await command("tasks", "list", *c, "--older-than", "3w"),
        "bad status": await command("tasks", "purge", *c, "--status", "working"),
        "purge without a filter": await command("tasks", "purge", *c),
        "dry run without a filter": await command("tasks", "purge", *c, "--dry-run"),
        "purge all and a filter": await command("tasks", "purge", *c, "--all", "--route", "h"),
        "no config": await command("tasks", "list"),
        "no file": await command("tasks", "show", "x", "--config", str(tmp_path / "none.yaml")),
    }

    assert {name: code for name, (code, _, _) in cases.items()} == dict.fromkeys(cases, 2)
    said = {name: err for name, (_, _, err) in cases.items()}
    assert said["no admin section"].strip() == (
        f"mcp-task-gateway: {plain} has no admin section: the gateway serves no admin API "
        "(docs/operations.md, admin API: admin: {listen: {host: 127.0.0.1, port: 8081}, token_env: "
        "ADMIN_TOKEN})"
    )
    assert said["token unset"].strip() == (
        f"mcp-task-gateway: configuration error: {config}: admin.token_env: environment "
        "variable ADMIN_TOKEN is not set (or empty)"
    )
    assert said["token with a newline"].strip() == (
        f"mcp-task-gateway: configuration error: {config}: admin.token_env: the token in "
        "ADMIN_TOKEN holds whitespace or a character an HTTP header cannot carry (a trailing "
        "newline?): use printable ASCII only"
    )
    assert said["not running"].startswith(
        f"mcp-task-gateway: cannot reach the admin API at http://127.0.0.1:{admin_port}/admin/"
    )
    assert "is the gateway running with the admin section of" in said["not running"]
    assert "--older-than: invalid _age value" not in said["bad age"]
    assert "'3w' is not an age such as 30s, 15m, 2h or 7d" in said["bad age"]
    assert "invalid choice: 'working'" in said["bad status"]
    # A purge of everything is asked for by name, also to preview it.
    for name in ("purge without a filter", "dry run without a filter"):
        assert said[name] == (
            "mcp-task-gateway: tasks purge: pass a filter (--route, --principal, --status, "
            "--older-than) or --all\n"
        )
    assert said["purge all and a filter"] == (
        "mcp-task-gateway: tasks purge: --all is every finished task: give it or filters, "
        "not both\n"
    )
    assert "the following arguments are required: --config" in said["no config"]
    assert "cannot read the configuration" in said["no file"]
    assert all(TOKEN not in err for err in said.values())


@pytest.mark.slow
async def test_an_operator_on_one_replica_cancels_a_call_running_on_another(
    tmp_path: Path, pg_url: str, faulty_upstream: TestServer, client_keys: None
) -> None:
    upstream = str(faulty_upstream.make_url("/mcp"))
    # A long lease: the call must stop on the wake-up, not because A was taken for dead.
    store = f"{{backend: postgres, url: {json.dumps(pg_url)}, lease_seconds: 60}}"
    config_a, port_a, _ = config_for(tmp_path / "a", upstream, store)
    config_b, port_b, _ = config_for(tmp_path / "b", upstream, store)
    on_b = ("--config", str(config_b))
    async with (
        running(config_a, port_a) as a,
        running(config_b, port_b),
        as_client("alice") as alice,
    ):
        session = await open_session(alice, a)
        hung = await start_task(alice, a, session, "hang")
        call = await hang_called(faulty_upstream)

        _, listed, _ = await command("tasks", "list", *on_b, "--json")
        code, _, _ = await command("tasks", "cancel", hung, *on_b)
        (note,) = await cancelled_upstream(faulty_upstream)
        seen_on_a = await task_terminal(alice, a, session, hung)
        _, sessions, _ = await command("sessions", "list", *on_b, "--json")
        end_code, _, end_said = await command("sessions", "end", session, *on_b)
        ping = {"jsonrpc": "2.0", "id": 7, "method": "ping"}
        headers = {"Mcp-Session-Id": session, "Accept": "application/json, text/event-stream"}
        async with alice.post(a, json=ping, headers=headers) as after:
            status_on_a = after.status

    assert [row["taskId"] for row in json.loads(listed)] == [hung]
    assert code == 0 and note["params"]["requestId"] == call["id"]  # A stopped its call
    assert seen_on_a["status"] == "cancelled"
    assert [row["sessionId"] for row in json.loads(sessions)] == [session]
    assert end_code == 0 and status_on_a == 404, end_said
    (event,) = await audited(tmp_path / "b", "task_cancelled")
    assert event["actor"] == "operator" and event["principal"] == "alice"
