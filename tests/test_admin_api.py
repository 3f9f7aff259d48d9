"""The admin API in-process, over real HTTP on its own port: its token and nobody else's, no
trace of it on the gateway's port, 400 (never 500) for what a caller makes up, and what it
does to tasks and sessions: every principal's, cancelled as their owner would, ended as a
client's DELETE would, audited as the operator's. (The commands over real processes are in
test_admin_cli.py; the store's part on both backends in test_store_admin.py.)"""

from __future__ import annotations

import asyncio
import json
import logging
import re
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml

from gateway.commands import admin as admin_cli
from gateway.config import AdminConfig, ConfigError, load_settings, parse_settings
from gateway.http import admin_guard

from .conftest import DEMO, ROOT, StartGateway, free_port
from .helpers import (
    WITH_ELICITATION,
    WITH_TASKS,
    answered_and_closed,
    audit_events,
    get_task,
    modern_inputs,
    modern_rpc,
    open_session,
    rpc,
    start_task,
    task_terminal,
)

TOKEN = "admin-token-0123456789abcdef"
KEYS = {"alice": "alice-key-0123456789", "bob": "bob-key-0123456789"}
AUTH = {"api_keys": [{"principal": who, "key_env": f"{who.upper()}_KEY"} for who in KEYS]}
ROUTES = [{"name": "demo", "upstream": DEMO}]


@dataclass
class Gateway:
    mcp: str
    main: str
    admin: str
    http: aiohttp.ClientSession

    def client(self, who: str) -> aiohttp.ClientSession:
        return aiohttp.ClientSession(headers={"Authorization": f"Bearer {KEYS[who]}"})

    async def ask(
        self, method: str, path: str, token: str = TOKEN, **params: str
    ) -> tuple[int, Any]:
        headers = {"Authorization": f"Bearer {token}"}
        url = f"{self.admin}{path}"
        async with self.http.request(method, url, params=params, headers=headers) as resp:
            assert resp.content_type == "application/json"
            return resp.status, await resp.json()


async def start_admin(
    start_gateway: StartGateway,
    monkeypatch: pytest.MonkeyPatch,
    http: aiohttp.ClientSession,
    routes: list[dict[str, Any]] = ROUTES,
    **options: Any,
) -> Gateway:
    """A gateway with the admin API (and `options` in its section) on a port of its own."""
    monkeypatch.setenv("ADMIN_TOKEN", TOKEN)
    for who, key in KEYS.items():
        monkeypatch.setenv(f"{who.upper()}_KEY", key)
    port = free_port()
    admin = {"listen": {"host": "127.0.0.1", "port": port}, **options}
    base = await start_gateway(routes, auth=AUTH, admin=admin)
    return Gateway(f"{base}/demo/mcp", base, f"http://127.0.0.1:{port}", http)


@pytest.fixture
async def gateway(
    start_gateway: StartGateway, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[Gateway]:
    async with aiohttp.ClientSession() as http:
        yield await start_admin(start_gateway, monkeypatch, http)


async def test_only_the_admin_token_opens_it_and_the_gateways_port_has_none_of_it(
    gateway: Gateway, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, "gateway.audit")
    async with gateway.http.get(f"{gateway.admin}/admin/tasks") as anonymous:
        assert anonymous.status == 401
        assert anonymous.headers["WWW-Authenticate"] == "Bearer"
        assert "Bearer" in (await anonymous.json())["error"]
    for wrong in (KEYS["alice"], TOKEN + "x", TOKEN[:-1], "", f"{TOKEN}{TOKEN}"):
        status, body = await gateway.ask("GET", "/admin/tasks", token=wrong)
        assert status == 401, wrong
    async with gateway.http.get(
        f"{gateway.admin}/admin/tasks", headers={"Authorization": f"Basic {TOKEN}"}
    ) as basic:
        assert basic.status == 401
    # Unknown paths and methods are told apart only with the token.
    assert (await gateway.ask("GET", "/admin/nothing", token="x"))[0] == 401
    assert (await gateway.ask("GET", "/admin/nothing"))[0] == 404
    assert (await gateway.ask("GET", "/metrics"))[0] == 404
    status, body = await gateway.ask("PUT", "/admin/tasks")
    assert status == 405 and "PUT /admin/tasks" in body["error"]
    for path in ("/admin/tasks", "/admin/sessions"):
        headers = {"Authorization": f"Bearer {TOKEN}"}
        async with gateway.http.get(f"{gateway.main}{path}", headers=headers) as on_main:
            assert on_main.status == 404
    failures = [r.getMessage() for r in caplog.records if "admin_auth_failed" in r.getMessage()]
    assert len(failures) == 8
    assert TOKEN not in caplog.text and KEYS["alice"] not in caplog.text


WITH_TOKEN = f"Authorization: Bearer {TOKEN}".encode()


@pytest.mark.parametrize(
    ("method", "path", "lines", "status"),
    [
        ("POST", "/admin/tasks/purge?status=completed", [], 401),
        ("POST", "/admin/tasks/purge?status=completed", [b"Authorization: Bearer x"], 401),
        ("PUT", "/admin/tasks", [], 401),  # no route for the method: the router's own answer
        ("POST", "/admin/nothing", [], 401),  # nor for the path
        ("POST", "/admin/tasks/purge?status=completed", [WITH_TOKEN], 200),
        ("PUT", "/admin/tasks", [WITH_TOKEN], 405),
        ("POST", "/admin/nothing", [WITH_TOKEN], 404),
    ],
    ids=["no-token", "wrong-token", "method", "path", "token", "token-method", "token-path"],
)
async def test_the_admin_api_answers_expect_100_continue_without_asking_for_the_body(
    gateway: Gateway, method: str, path: str, lines: list[bytes], status: int
) -> None:
    """aiohttp sent `100 Continue` before the token check: a client was told to send its
    body, and only then refused. The API reads no body, so it answers at once."""
    await answered_and_closed(f"{gateway.admin}{path}", lines, status, method=method)


async def test_refused_tokens_are_rate_limited_per_address_and_the_right_one_still_works(
    gateway: Gateway, caplog: pytest.LogCaptureFixture
) -> None:
    # Guessing the token, or flooding the audit trail with its refusals, stops at the burst:
    # past it the answer is 429 and nothing more is written. The operator's own token is not
    # locked out by someone else's guesses from the same (loopback) address.
    caplog.set_level(logging.INFO, "gateway.audit")
    statuses = []
    for guess in range(admin_guard.FAILURE_BURST + 5):
        status, body = await gateway.ask("GET", "/admin/tasks", token=f"guess-{guess}")
        statuses.append(status)
    assert statuses == [401] * admin_guard.FAILURE_BURST + [429] * 5
    async with gateway.http.get(
        f"{gateway.admin}/admin/tasks", headers={"Authorization": "Bearer again"}
    ) as limited:
        assert limited.status == 429
        assert int(limited.headers["Retry-After"]) >= 1
        assert "too many refused requests" in (await limited.json())["error"]
    assert len(audit_events(caplog, "admin_auth_failed")) == admin_guard.FAILURE_BURST
    status, body = await gateway.ask("GET", "/admin/tasks")
    assert status == 200 and body["tasks"] == []


@pytest.mark.parametrize(
    ("method", "path", "params", "says"),
    [
        ("GET", "/admin/tasks", {"status": "done"}, "status: one of working"),
        ("GET", "/admin/tasks", {"older_than": "1w"}, "not an age such as 30s"),
        ("GET", "/admin/tasks", {"older_than": "-1d"}, "not an age"),
        ("GET", "/admin/tasks", {"older_than": "1.5h"}, "not an age"),
        ("GET", "/admin/tasks", {"older_than": "10s\n"}, "not an age"),
        ("GET", "/admin/tasks", {"older_than": "١٠s"}, "not an age"),  # Arabic-Indic digits
        ("GET", "/admin/tasks", {"older_than": "999999999d"}, "at most 36500d"),
        ("GET", "/admin/tasks", {"older_than": ""}, "must be 1 to 1000 characters"),
        ("GET", "/admin/tasks", {"limit": "0"}, "limit: a whole number from 1 to 10000"),
        ("GET", "/admin/tasks", {"limit": "10001"}, "limit: a whole number"),
        ("GET", "/admin/tasks", {"limit": "9" * 5000}, "limit"),
        ("GET", "/admin/tasks", {"limit": "-1"}, "limit: a whole number"),
        ("GET", "/admin/tasks", {"limit": "²"}, "limit: a whole number"),
        ("GET", "/admin/tasks", {"principal": "a\x00b"}, "without NUL"),
        ("GET", "/admin/tasks", {"principal": "a" * 1001}, "1 to 1000 characters"),
        ("GET", "/admin/tasks", {"owner": "alice"}, "unknown parameter 'owner'"),
        ("GET", "/admin/sessions", {"status": "working"}, "unknown parameter 'status'"),
        ("GET", "/admin/sessions", {"limit": "many"}, "limit: a whole number"),
        ("POST", "/admin/tasks/purge", {"status": "working"}, "finished tasks only"),
        ("POST", "/admin/tasks/purge", {"limit": "5"}, "unknown parameter 'limit'"),
        ("POST", "/admin/tasks/purge", {"dry_run": "yes"}, "dry_run: 1, given once"),
        ("POST", "/admin/tasks/purge", {"dry_run": "1", "route": "a\x00b"}, "without NUL"),
        ("POST", "/admin/tasks/purge", {"dry_run": "1", "status": "working"}, "finished tasks"),
    ],
)
async def test_what_a_caller_makes_up_is_a_400_that_says_why(
    gateway: Gateway, method: str, path: str, params: dict[str, str], says: str
) -> None:
    status, body = await gateway.ask(method, path, **params)

    assert status == 400
    assert says in body["error"]


async def test_a_parameter_given_twice_and_text_no_database_holds_are_400s(
    gateway: Gateway,
) -> None:
    headers = {"Authorization": f"Bearer {TOKEN}"}
    for query in ("route=a&route=b", "principal=%00"):
        async with gateway.http.get(f"{gateway.admin}/admin/tasks?{query}", headers=headers) as r:
            assert r.status == 400, query
    # Invalid UTF-8 reaches the handler decoded with replacement characters: nobody's name.
    async with gateway.http.get(
        f"{gateway.admin}/admin/tasks?principal=%ED%A0%80", headers=headers
    ) as r:
        assert r.status == 200 and (await r.json())["tasks"] == []
    for path in ("/admin/tasks/a%00b", "/admin/tasks/%ED%A0%80/cancel", "/admin/sessions/%00"):
        method = "DELETE" if "sessions" in path else "POST" if "cancel" in path else "GET"
        async with gateway.http.request(method, f"{gateway.admin}{path}", headers=headers) as r:
            assert r.status in (400, 404), path


async def test_unknown_ids_are_404s_that_name_them(gateway: Gateway) -> None:
    assert await gateway.ask("GET", "/admin/tasks/nope") == (404, {"error": "no task nope"})
    assert (await gateway.ask("POST", "/admin/tasks/nope/cancel"))[0] == 404
    assert await gateway.ask("DELETE", "/admin/sessions/nope") == (
        404,
        {"error": "no session nope"},
    )


async def test_an_operator_sees_every_principal_and_cancels_as_the_owner_would(
    gateway: Gateway, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, "gateway.audit")
    async with gateway.client("alice") as alice, gateway.client("bob") as bob:
        alice_session = await open_session(alice, gateway.mcp)
        bob_session = await open_session(bob, gateway.mcp)
        slow = await start_task(alice, gateway.mcp, alice_session, "slow", {"seconds": 60})
        echo = await start_task(bob, gateway.mcp, bob_session, "echo", {"text": "hi"})

        _, everything = await gateway.ask("GET", "/admin/tasks")
        _, bobs = await gateway.ask("GET", "/admin/tasks", principal="bob")
        _, first = await gateway.ask("GET", "/admin/tasks", limit="1")
        status, cancelled = await gateway.ask("POST", f"/admin/tasks/{slow}/cancel")
        seen_by_alice = await get_task(alice, gateway.mcp, alice_session, slow)
        again, refused = await gateway.ask("POST", f"/admin/tasks/{slow}/cancel")
        # Nothing of the clients' binding changed: bob still cannot read alice's task.
        foreign = await rpc(bob, gateway.mcp, bob_session, "tasks/get", {"taskId": slow})
        _, shown = await gateway.ask("GET", f"/admin/tasks/{slow}")

    rows = {row["taskId"]: row for row in everything["tasks"]}
    assert set(rows) == {slow, echo} and everything["more"] is False
    assert rows[slow]["principal"] == "alice" and rows[echo]["principal"] == "bob"
    assert set(rows[slow]) == {
        "taskId",
        "route",
        "principal",
        "status",
        "tool",
        "createdAt",
        "lastUpdatedAt",
    }
    assert [row["taskId"] for row in bobs["tasks"]] == [echo]
    assert len(first["tasks"]) == 1 and first["more"] is True
    assert status == 200 and cancelled["status"] == "cancelled" and cancelled["taskId"] == slow
    assert seen_by_alice["status"] == "cancelled"
    assert again == 409 and "is cancelled already" in refused["error"]
    assert foreign["error"]["code"] == -32602
    assert shown["status"] == "cancelled" and shown["tool"] == "slow"
    assert shown["statusMessage"] == "The task was cancelled by request."
    events = audit_events(caplog)
    (cancel,) = [e for e in events if e["event"] == "task_cancelled"]
    assert cancel["actor"] == "operator" and cancel["principal"] == "alice"
    assert cancel["task_id"] == slow
    listed = [e for e in events if e["event"] == "admin_tasks_listed"]
    assert listed[1] == {**listed[1], "actor": "operator", "principal": "bob", "count": 1}


#: The keys `GET /admin/tasks/{id}` answered with before the task page's: scripts read them
#: (DESIGN.md, "The operators' console (names to keep)").
DETAIL_KEYS = {
    *("taskId", "route", "principal", "status", "tool", "createdAt", "lastUpdatedAt"),
    *("statusMessage", "ttl", "expiresAt", "generation", "attempt"),
}


#: What the demo's slow tool reports, as the task's progress keeps it.
PROGRESS = r"([0-9]+)/600: step \1/600"


async def shown_when(gateway: Gateway, task_id: str, ready: Callable[[Any], bool]) -> Any:
    """The task's detail once `ready` holds for it (progress is written a moment later)."""
    async with asyncio.timeout(10):
        while True:
            status, shown = await gateway.ask("GET", f"/admin/tasks/{task_id}")
            assert status == 200, shown
            if ready(shown):
                return shown
            await asyncio.sleep(0.05)


async def show_command(
    gateway: Gateway, tmp_path: Path, capsys: pytest.CaptureFixture[str], task_id: str
) -> str:
    """What `mcp-task-gateway tasks show` prints of the task (its code, on a thread)."""
    port = gateway.admin.rsplit(":", 1)[1]
    config = tmp_path / "admin.yaml"
    config.write_text(f"admin: {{listen: {{host: 127.0.0.1, port: {port}}}}}\n")
    code = await asyncio.to_thread(
        admin_cli.main, ["tasks", "show", task_id, "--config", str(config)]
    )
    out, err = capsys.readouterr()
    assert (code, err) == (0, "")
    return out


async def test_a_tasks_detail_has_its_history_progress_questions_and_outcome_but_no_content(
    start_gateway: StartGateway,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """DESIGN.md: a task's page shows "its status history with times, latest progress, pending
    questions, attempts, outcome kind and size, never the result's content unless
    `admin.console_shows_results: true`". A question shows its method and when it was asked,
    never what it asks (a caller's data, as the result is)."""
    routes = [{"name": "demo", "upstream": DEMO, "tasks": {"tools": {"ask": "required"}}}]
    async with (
        aiohttp.ClientSession() as http,
        aiohttp.ClientSession(headers={"Authorization": f"Bearer {KEYS['alice']}"}) as alice,
    ):
        gateway = await start_admin(start_gateway, monkeypatch, http, routes)
        session = await open_session(alice, gateway.mcp)
        slow = await start_task(alice, gateway.mcp, session, "slow", {"seconds": 60, "steps": 600})
        tasks = {}
        for tool in ("echo", "fail", "error"):
            arguments = {"text": "secret"} if tool == "echo" else {}
            tasks[tool] = await start_task(alice, gateway.mcp, session, tool, arguments)
            await task_terminal(alice, gateway.mcp, session, tasks[tool])
        both = {**WITH_TASKS, **WITH_ELICITATION}
        params = {"name": "ask", "arguments": {"question": "your secret?"}}
        _, created = await modern_rpc(alice, gateway.mcp, "tools/call", params, both)
        asking = created["result"]["taskId"]
        await modern_inputs(alice, gateway.mcp, asking, 1)

        running = await shown_when(gateway, slow, lambda shown: shown["progress"] is not None)
        waiting = await shown_when(gateway, asking, lambda shown: shown["questions"] != [])
        printed_running = await show_command(gateway, tmp_path, capsys, slow)
        printed_waiting = await show_command(gateway, tmp_path, capsys, asking)
        finished = {
            tool: (await gateway.ask("GET", f"/admin/tasks/{t}"))[1] for tool, t in tasks.items()
        }
        await gateway.ask("POST", f"/admin/tasks/{slow}/cancel")
        _, cancelled = await gateway.ask("GET", f"/admin/tasks/{slow}")

    assert DETAIL_KEYS <= set(running) and running["status"] == "working"
    assert running["history"] == [{"status": "working", "at": running["createdAt"]}]
    assert running["historyDropped"] == 0
    assert re.fullmatch(PROGRESS, running["progress"]["message"])
    assert running["questions"] == [] and running["outcome"] == {"kind": "none", "bytes": 0}
    (question,) = waiting["questions"]
    assert question["method"] == "elicitation/create" and set(question) == {
        "key",
        "method",
        "askedAt",
    }
    assert [change["status"] for change in waiting["history"]] == ["working", "input_required"]
    assert waiting["generation"] == "2026-07-28"
    echo = finished["echo"]
    assert [change["status"] for change in echo["history"]] == ["working", "completed"]
    assert echo["outcome"]["kind"] == "result" and echo["outcome"]["bytes"] > 0
    assert finished["fail"]["outcome"]["kind"] == "tool_error"
    assert finished["fail"]["history"][-1]["status"] == "failed"
    assert finished["error"]["outcome"]["kind"] == "error"
    for shown in (running, waiting, *finished.values()):
        assert "content" not in shown["outcome"]
        assert "secret" not in json.dumps(shown)
    assert cancelled["history"][-1] == {
        "status": "cancelled",
        "at": cancelled["lastUpdatedAt"],
        "message": "The task was cancelled by request.",
    }
    lines = [line.split() for line in printed_running.splitlines()]
    assert ["outcome", "none,", "0", "bytes"] in lines
    (progress,) = [line for line in lines if line[:1] == ["progress"]]
    assert " ".join(progress[1:]).startswith(running["progress"]["message"])
    printed = printed_waiting.split("\nPENDING QUESTIONS\n", 1)[1].splitlines()
    assert printed[0].split() == ["KEY", "METHOD", "ASKED"]
    assert printed[1].split() == [question["key"], "elicitation/create", question["askedAt"]]
    assert "secret" not in printed_waiting
    # The progress outlives the statusMessage the terminal write replaced.
    assert re.fullmatch(PROGRESS, cancelled["progress"]["message"])


async def test_the_results_content_is_shown_only_where_the_operator_turned_it_on(
    start_gateway: StartGateway,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    async with (
        aiohttp.ClientSession() as http,
        aiohttp.ClientSession(headers={"Authorization": f"Bearer {KEYS['alice']}"}) as alice,
    ):
        gateway = await start_admin(start_gateway, monkeypatch, http, console_shows_results=True)
        session = await open_session(alice, gateway.mcp)
        echo = await start_task(alice, gateway.mcp, session, "echo", {"text": "shown"})
        done = await task_terminal(alice, gateway.mcp, session, echo)
        result = await rpc(alice, gateway.mcp, session, "tasks/result", {"taskId": echo})
        _, shown = await gateway.ask("GET", f"/admin/tasks/{echo}")
        printed = await show_command(gateway, tmp_path, capsys, echo)

    assert done["status"] == "completed"
    content = shown["outcome"]["content"]
    assert content["content"] == result["result"]["content"]
    assert shown["outcome"]["bytes"] == len(json.dumps(content).encode())
    assert json.loads(printed.split("\nOUTCOME\n", 1)[1]) == content


async def test_a_purge_removes_finished_tasks_and_an_ended_session_answers_404(
    gateway: Gateway, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, "gateway.audit")
    async with gateway.client("alice") as alice, gateway.client("bob") as bob:
        alice_session = await open_session(alice, gateway.mcp)
        bob_session = await open_session(bob, gateway.mcp)
        slow = await start_task(alice, gateway.mcp, alice_session, "slow", {"seconds": 60})
        finished = await start_task(alice, gateway.mcp, alice_session, "fail")
        await rpc(alice, gateway.mcp, alice_session, "tasks/result", {"taskId": finished})

        _, purged = await gateway.ask("POST", "/admin/tasks/purge")
        _, left = await gateway.ask("GET", "/admin/tasks")
        _, sessions = await gateway.ask("GET", "/admin/sessions")
        _, alices = await gateway.ask("GET", "/admin/sessions", principal="alice")
        status, ended = await gateway.ask("DELETE", f"/admin/sessions/{alice_session}")
        note = {"jsonrpc": "2.0", "id": 5, "method": "ping"}
        headers = {"Mcp-Session-Id": alice_session, "Accept": "application/json, text/event-stream"}
        async with alice.post(gateway.mcp, json=note, headers=headers) as after:
            assert after.status == 404
        assert (await rpc(bob, gateway.mcp, bob_session, "ping", {}))["result"] == {}

    assert purged == {"purged": 1}
    assert [row["taskId"] for row in left["tasks"]] == [slow]
    assert {(s["sessionId"], s["principal"]) for s in sessions["sessions"]} == {
        (alice_session, "alice"),
        (bob_session, "bob"),
    }
    assert [s["sessionId"] for s in alices["sessions"]] == [alice_session]
    assert status == 200 and ended["sessionId"] == alice_session
    events = audit_events(caplog)
    (purge,) = [e for e in events if e["event"] == "tasks_purged"]
    assert purge["count"] == 1 and purge["actor"] == "operator"
    (end,) = [e for e in events if e["event"] == "session_ended"]
    assert end == {**end, "actor": "operator", "principal": "alice", "reason": "deleted"}


ADMIN_ENV = {"ADMIN_TOKEN": TOKEN, "ALICE_KEY": KEYS["alice"]}


@pytest.mark.parametrize(
    ("sections", "env", "says"),
    [
        ({"admin": {}}, {}, "admin.token_env: environment variable ADMIN_TOKEN is not set"),
        ({"admin": {}}, {"ADMIN_TOKEN": ""}, "admin.token_env: environment variable"),
        ({"admin": {}}, {"ADMIN_TOKEN": "short"}, "shorter than 16 characters"),
        ({"admin": {}}, {"ADMIN_TOKEN": TOKEN + "\n"}, "(a trailing newline?)"),
        ({"admin": {}}, {"ADMIN_TOKEN": "a token with spaces in"}, "holds whitespace"),
        ({"admin": {"listen": {"port": 8080}}}, ADMIN_ENV, "admin.listen.port: 8080 is listen"),
        ({"admin": {"listen": {"port": 0}}}, ADMIN_ENV, "admin.listen.port: must be a fixed"),
        ({"admin": {"listen": {"port": -1}}}, ADMIN_ENV, "admin.listen.port: Input should be"),
        ({"admin": {"listen": "x"}}, ADMIN_ENV, "admin.listen: Input should be"),
        ({"admin": {"token_env": "A-B"}}, ADMIN_ENV, "admin.token_env: String should match"),
        ({"admin": {"token": TOKEN}}, ADMIN_ENV, "admin.token: unknown key"),
        (
            {"admin": {"listen": {"port": 9464}}, "metrics": {"listen": {"port": 9464}}},
            ADMIN_ENV,
            "admin.listen.port: 9464 is metrics.listen.port already",
        ),
        (
            {"admin": {"token_env": "ALICE_KEY"}, "auth": {"api_keys": AUTH["api_keys"][:1]}},
            ADMIN_ENV,
            "admin.token_env: ALICE_KEY holds a client API key",
        ),
    ],
)
def test_an_admin_section_that_cannot_be_used_is_refused_naming_the_key(
    sections: dict[str, Any], env: dict[str, str], says: str
) -> None:
    with pytest.raises(ConfigError) as refused:
        parse_settings({**sections, "routes": ROUTES}, "gateway.yaml", env=env)

    assert says in str(refused.value)
    assert TOKEN not in str(refused.value)


def test_an_admin_section_with_its_defaults_listens_on_loopback_8081() -> None:
    settings = parse_settings({"admin": {}, "routes": ROUTES}, "gateway.yaml", env=ADMIN_ENV)

    assert settings.admin is not None
    assert (settings.admin.listen.host, settings.admin.listen.port) == ("127.0.0.1", 8081)
    assert settings.admin.token == TOKEN
    assert parse_settings({"routes": ROUTES}, "gateway.yaml", env={}).admin is None


def test_the_shipped_config_leaves_admin_off_and_its_example_is_one_the_gateway_takes() -> None:
    path = ROOT / "config" / "gateway.yaml"
    section = path.read_text().split("\nadmin:", 1)[1].split("\nroutes:", 1)[0]
    example = next(line for line in section.splitlines() if "# admin: {" in line)

    assert load_settings(path).admin is None
    assert {key for key in AdminConfig.model_fields if f"{key}:" not in section} == set()
    written = yaml.safe_load(example.split("#", 1)[1])
    settings = parse_settings({**written, "routes": ROUTES}, "gateway.yaml", env=ADMIN_ENV)
    assert settings.admin is not None and settings.admin.listen.port == 8081


async def test_the_commands_in_process_print_tables_json_and_one_line_failures(
    gateway: Gateway,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The commands' own code, run on a thread beside this gateway (test_admin_cli.py runs
    them as processes)."""
    port = int(gateway.admin.rsplit(":", 1)[1])
    config = tmp_path / "admin.yaml"
    config.write_text(f"admin: {{listen: {{host: 127.0.0.1, port: {port}}}}}\nroutes: [{{}}]\n")
    c = ["--config", str(config)]

    async def run(*argv: str) -> tuple[int, str, str]:
        code = await asyncio.to_thread(admin_cli.main, list(argv))
        out, err = capsys.readouterr()
        return code, out, err

    async with gateway.client("alice") as alice:
        session = await open_session(alice, gateway.mcp)
        slow = await start_task(alice, gateway.mcp, session, "slow", {"seconds": 60})
        done = await start_task(alice, gateway.mcp, session, "echo", {"text": "x"})
        await rpc(alice, gateway.mcp, session, "tasks/result", {"taskId": done})

        listed = await run("tasks", "list", *c, "--limit", "1")
        as_json = await run("tasks", "list", *c, "--json", "--status", "working")
        shown = await run("tasks", "show", slow, *c)
        cancelled = await run("tasks", "cancel", *c, slow)
        again = await run("tasks", "cancel", slow, *c, "--json")
        purged = await run("tasks", "purge", *c, "--all", "--json")
        sessions = await run("sessions", "list", *c, "--principal", "alice")
        ended = await run("sessions", "end", session, *c, "--json")
        unknown = await run("sessions", "end", "-nope", *c)
        monkeypatch.setenv("ADMIN_TOKEN", "x" * 20)
        refused = await run("tasks", "list", *c)

    code, out, err = listed
    assert code == 0 and out.splitlines()[0].split()[:3] == ["TASK", "ROUTE", "PRINCIPAL"]
    assert out.splitlines()[1].split()[0] == slow and "more tasks match" in err
    assert [row["taskId"] for row in json.loads(as_json[1])] == [slow]
    assert shown[0] == 0 and ["status", "working"] in [
        line.split() for line in shown[1].splitlines()
    ]
    assert cancelled == (0, f"cancelled task {slow} (route demo, principal alice)\n", "")
    assert again[0] == 2 and "is cancelled already" in again[2]
    assert json.loads(purged[1]) == {"purged": 2}
    assert sessions[0] == 0 and session in sessions[1]
    assert json.loads(ended[1])["sessionId"] == session
    assert unknown == (2, "", "mcp-task-gateway: no session -nope\n")
    assert refused[0] == 2 and "refused the token in ADMIN_TOKEN (401)" in refused[2]
    monkeypatch.setenv("ADMIN_TOKEN", TOKEN)
    closed = tmp_path / "closed.yaml"
    closed.write_text(f"admin: {{listen: {{host: 0.0.0.0, port: {free_port()}}}}}\n")
    code, _, err = await run("sessions", "list", "--config", str(closed))
    assert code == 2 and err.startswith(
        "mcp-task-gateway: cannot reach the admin API at http://127.0.0.1:"
    )
    (tmp_path / "none.yaml").write_text("routes: []\n")
    code, _, err = await run("tasks", "list", "--config", str(tmp_path / "none.yaml"))
    assert code == 2 and "has no admin section" in err
    (tmp_path / "list.yaml").write_text("- admin\n")
    code, _, err = await run("tasks", "list", "--config", str(tmp_path / "list.yaml"))
    assert code == 2 and "the top level must be a mapping of keys" in err
    for text, says in (
        ("admin: {listen: {port: 0}}", "admin.listen.port: must be a fixed port"),
        ("admin: {token_env: '${NOPE_VAR}'}", "admin.token_env: environment variable NOPE_VAR"),
    ):
        (tmp_path / "bad.yaml").write_text(text)
        code, _, err = await run("tasks", "list", "--config", str(tmp_path / "bad.yaml"))
        assert code == 2 and f"{tmp_path / 'bad.yaml'}: {says}" in err, err
