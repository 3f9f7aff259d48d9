"""Replicas on one PostgreSQL database, as gateways in this process (real ports, real HTTP, a
real database): the wake-ups between them, and a survivor's lease round settling the tasks of
a replica taken for dead. tests/test_replicas.py runs the same over separate processes."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

import aiohttp
import asyncpg
import pytest

from gateway.config import StoreConfig
from gateway.protocol import jsonrpc
from gateway.tasks.models import Task, TaskStatus, utcnow
from gateway.tasks.recovery import kept_call
from gateway.tasks.store.opening import StoreUnavailable, open_configured
from gateway.tasks.store.postgres import open_postgres_store

from .conftest import StartGateway, free_port
from .fakes import FAULT_HOOKS, JSON_SESSIONS
from .helpers import (
    RELATED,
    WITH_ELICITATION,
    WITH_TASKS,
    get_task,
    headers,
    modern_inputs,
    modern_rpc,
    modern_terminal,
    open_session,
    read_messages,
    result_request,
    rpc,
    start_task,
)
from .test_store_postgres import query

LOST = "interrupted: the gateway replica running it was lost"


def store(pg_url: str, lease: float = 60) -> dict[str, Any]:
    return {"backend": "postgres", "url": pg_url, "lease_seconds": lease}


def http_route(name: str, url: str, **tasks: Any) -> dict[str, Any]:
    return {"name": name, "upstream": {"transport": "streamable_http", "url": url}, "tasks": tasks}


async def two_replicas(pg_url: str, start_gateway: StartGateway, upstream: Any) -> tuple[str, str]:
    """The endpoints of two replicas on `pg_url`, each with one route to the HTTP `upstream`."""
    routes = [http_route("h", str(upstream.make_url("/mcp")))]
    a = f"{await start_gateway(routes, store=store(pg_url))}/h/mcp"
    return a, f"{await start_gateway(routes, store=store(pg_url))}/h/mcp"


async def test_a_cancel_on_b_stops_the_call_on_a(
    pg_url: str, start_gateway: StartGateway, faulty_upstream: Any
) -> None:
    a, b = await two_replicas(pg_url, start_gateway, faulty_upstream)
    received = faulty_upstream.app[FAULT_HOOKS].received
    async with aiohttp.ClientSession() as http:
        session = await open_session(http, a)
        task_id = await start_task(http, a, session, "hang")
        async with asyncio.timeout(10):
            while not any(m.get("method") == "tools/call" for m in received):  # noqa: ASYNC110
                await asyncio.sleep(0.05)
        await rpc(http, b, session, "tasks/cancel", {"taskId": task_id}, request_id=4)
        async with asyncio.timeout(5):
            while not any(m.get("method") == "notifications/cancelled" for m in received):  # noqa: ASYNC110
                await asyncio.sleep(0.05)
    (call,) = [m for m in received if m.get("method") == "tools/call"]
    (note,) = [m for m in received if m.get("method") == "notifications/cancelled"]
    assert note["params"]["requestId"] == call["id"]


async def test_an_http_upstream_session_goes_on_at_another_replica_and_one_delete_ends_it(
    pg_url: str, start_gateway: StartGateway, faulty_upstream: Any
) -> None:
    a, b = await two_replicas(pg_url, start_gateway, faulty_upstream)
    received = faulty_upstream.app[FAULT_HOOKS].received
    upstream_sessions = faulty_upstream.app[JSON_SESSIONS]
    async with aiohttp.ClientSession() as http:
        session = await open_session(http, a)
        echoed = []
        for number, url in enumerate((b, a, b), start=2):
            call = {"name": "echo", "arguments": {"text": f"call {number}"}}
            answer = await rpc(http, url, session, "tools/call", call, request_id=number)
            echoed.append(answer["result"]["content"][0]["text"])
        # B carried A's upstream session on: one handshake upstream, one session there.
        assert echoed == ["call 2", "call 3", "call 4"]
        assert [m["method"] for m in received if m.get("method") == "initialize"] == ["initialize"]
        assert len(upstream_sessions) == 1

        async with http.delete(b, headers=headers(session)) as resp:
            assert resp.status == 200
        assert upstream_sessions == {}
        # Spec: once a session is terminated, requests with its id MUST get 404, on A too.
        call = {"name": "echo", "arguments": {"text": "after"}}
        message = {"jsonrpc": "2.0", "id": 9, "method": "tools/call", "params": call}
        async with asyncio.timeout(5):
            while True:
                async with http.post(a, json=message, headers=headers(session)) as resp:
                    if resp.status == 404:
                        break
                    assert resp.status == 200
                await asyncio.sleep(0.2)
    assert len([m for m in received if m.get("method") == "initialize"]) == 1


async def test_a_request_before_the_news_of_a_delete_elsewhere_opens_no_new_upstream_session(
    pg_url: str, start_gateway: StartGateway, faulty_upstream: Any
) -> None:
    # The race the test above runs into by chance, made certain: the triggers that send the
    # news of a record's end are off, so A's copy of the record still says the session lives.
    a, b = await two_replicas(pg_url, start_gateway, faulty_upstream)
    received = faulty_upstream.app[FAULT_HOOKS].received
    async with aiohttp.ClientSession() as http:
        session = await open_session(http, a)
        call = {"name": "echo", "arguments": {"text": "here"}}
        assert (await rpc(http, a, session, "tools/call", call, request_id=2))["result"]
        # News of the session's own writes may still drop A's copy: let it land, then have A
        # read the record again and keep it (trusted for a second, KEPT_SECONDS).
        await asyncio.sleep(0.3)
        assert (await rpc(http, a, session, "tools/call", call, request_id=5))["result"]
        await query(pg_url, "ALTER TABLE sessions DISABLE TRIGGER USER")
        async with http.delete(b, headers=headers(session)) as resp:
            assert resp.status == 200

        # A meets the upstream's 404 for the ended upstream session: no handshake replayed.
        answer = await rpc(http, a, session, "tools/call", call, request_id=3)
        assert answer["error"]["message"] == "the session ended"
        # Spec: once a session is terminated, requests with its id MUST get 404.
        message = {"jsonrpc": "2.0", "id": 4, "method": "tools/call", "params": call}
        async with http.post(a, json=message, headers=headers(session)) as resp:
            assert resp.status == 404
    assert len([m for m in received if m.get("method") == "initialize"]) == 1


async def questions_asked_on_b_are_answered_through_a_and_c(
    http: aiohttp.ClientSession, a: str, b: str, c: str
) -> None:
    """A 2025-11-25 client with no stickiness at all: its session opened on A, its task's
    call (and so the upstream's questions) on B, its polls on C, its tasks/result on A, one
    answer posted to C and the other to B."""
    session = await open_session(http, a, WITH_ELICITATION)
    task_id = await start_task(http, b, session, "ask_both")
    async with asyncio.timeout(10):
        while (await get_task(http, c, session, task_id))["status"] != "input_required":  # noqa: ASYNC110
            await asyncio.sleep(0.05)
    async with http.post(a, json=result_request(task_id, 7), headers=headers(session)) as stream:
        questions = await read_messages(stream, 2)
        for question, (url, name) in zip(questions, ((c, "Carol"), (b, "Dave")), strict=True):
            reply = {"action": "accept", "content": {"name": name}}
            answer = {"jsonrpc": "2.0", "id": question["id"], "result": reply}
            async with http.post(url, json=answer, headers=headers(session)) as sent:
                assert sent.status == 202
        (final,) = await read_messages(stream, 1)
    # "The receiver MUST include the io.modelcontextprotocol/related-task metadata in the request."
    assert [q["method"] for q in questions] == ["elicitation/create"] * 2
    assert all(q["params"]["_meta"][RELATED] == {"taskId": task_id} for q in questions)
    assert final["id"] == 7
    assert sorted(final["result"]["content"][0]["text"].split()) == ["Carol", "Dave"]
    assert (await get_task(http, c, session, task_id))["status"] == "completed"


async def test_a_2025_tasks_questions_asked_on_b_are_answered_through_a_and_c(
    pg_url: str, start_gateway: StartGateway, sdk_upstream: str
) -> None:
    routes = [http_route("q", sdk_upstream)]
    a, b, c = [f"{await start_gateway(routes, store=store(pg_url))}/q/mcp" for _ in "abc"]
    async with aiohttp.ClientSession() as http:
        await questions_asked_on_b_are_answered_through_a_and_c(http, a, b, c)


async def test_answers_given_on_b_reach_the_call_on_a(
    pg_url: str, start_gateway: StartGateway, sdk_upstream: str
) -> None:
    routes = [http_route("q", sdk_upstream)]
    a = f"{await start_gateway(routes, store=store(pg_url))}/q/mcp"
    b = f"{await start_gateway(routes, store=store(pg_url))}/q/mcp"
    caps = {**WITH_TASKS, **WITH_ELICITATION}
    async with aiohttp.ClientSession() as http:
        call = {"name": "ask_both", "arguments": {}}
        _, created = await modern_rpc(http, a, "tools/call", call, caps)
        task_id = created["result"]["taskId"]
        waiting = await modern_inputs(http, b, task_id, 2)
        answers = {
            key: {"action": "accept", "content": {"name": name}}
            for key, name in zip(sorted(waiting["inputRequests"]), ("Ada", "Byron"), strict=True)
        }
        update = {"taskId": task_id, "inputResponses": answers}
        await modern_rpc(http, b, "tasks/update", update, caps)
        done = await modern_terminal(http, b, task_id)
    assert done["status"] == "completed"
    assert sorted(done["result"]["content"][0]["text"].split()) == ["Ada", "Byron"]


async def test_a_2026_call_that_asks_at_once_becomes_a_task_answered_through_any_replica(
    pg_url: str, start_gateway: StartGateway, sdk_upstream: str
) -> None:
    routes = [http_route("q", sdk_upstream)]
    a = f"{await start_gateway(routes, store=store(pg_url))}/q/mcp"
    b = f"{await start_gateway(routes, store=store(pg_url))}/q/mcp"
    caps = {**WITH_TASKS, **WITH_ELICITATION}
    async with aiohttp.ClientSession() as http:
        # `ask` asks within the sync window. One gateway would park the call for an MRTR
        # retry that must come back to it; replicas make it a task instead.
        _, created = await modern_rpc(http, a, "tools/call", {"name": "ask", "arguments": {}}, caps)
        task_id = created["result"]["taskId"]
        waiting = await modern_inputs(http, b, task_id, 1)
        (key,) = waiting["inputRequests"]
        reply = {key: {"action": "accept", "content": {"name": "Eve"}}}
        await modern_rpc(
            http, b, "tasks/update", {"taskId": task_id, "inputResponses": reply}, caps
        )
        done = await modern_terminal(http, b, task_id)
    assert created["result"]["resultType"] == "task"
    assert waiting["inputRequests"][key]["method"] == "elicitation/create"
    assert done["status"] == "completed"
    assert done["result"]["content"][0]["text"] == "Hello, Eve!"


async def test_a_survivors_lease_round_settles_a_dead_replicas_tasks(
    pg_url: str, start_gateway: StartGateway, sdk_upstream: str
) -> None:
    # The dead replica: a store that made two tasks, one of a tool safe to repeat, then
    # stopped renewing its lease.
    dead = await open_postgres_store(pg_url, "dead-replica", lease_seconds=60)
    now = utcnow()

    def task(task_id: str, tool: str, repeatable: bool) -> Task:
        return Task(
            task_id=task_id,
            owner="session:gone",
            route="r",
            tool=tool,
            status=TaskStatus.WORKING,
            created_at=now,
            updated_at=now,
            ttl_ms=600_000,
            poll_interval_ms=500,
            repeatable=repeatable,
        )

    request = jsonrpc.Request(
        jsonrpc="2.0",
        id=1,
        method="tools/call",
        params={"name": "slow", "arguments": {"steps": 2}},
    )
    await dead.create_task(task("safe", "slow", True), request=kept_call(request, {}))
    await dead.create_task(task("plain", "slow", False))
    await dead.close()  # gives the lease back: as good as expired
    conn = await asyncpg.connect(pg_url)
    try:
        await conn.execute("UPDATE replicas SET lease_until = now() - interval '1 minute'")
    finally:
        await conn.close()
    routes = [http_route("r", sdk_upstream, repeatable=["slow"])]
    await start_gateway(routes, store=store(pg_url, lease=2))
    survivor = await open_postgres_store(pg_url, "reader", lease_seconds=60)
    try:
        async with asyncio.timeout(15):
            while True:
                safe, plain = await survivor.get_task("safe"), await survivor.get_task("plain")
                assert safe is not None and plain is not None
                if safe.status.terminal and plain.status.terminal:
                    break
                await asyncio.sleep(0.1)
        outcome = await survivor.get_outcome("safe")
    finally:
        await survivor.close()
    assert plain.status is TaskStatus.FAILED and plain.status_message == LOST
    assert safe.status is TaskStatus.COMPLETED and safe.attempt == 2
    assert outcome is not None and outcome.body["content"][0]["text"] == "2 steps done"
    # Its time limit and ttl still count from its creation, not from the re-run.
    assert abs(safe.created_at - now) < timedelta(milliseconds=1)


async def test_an_unreachable_database_is_refused_at_open_naming_where() -> None:
    port = free_port()
    config = StoreConfig(backend="postgres", url=f"postgresql://gw@127.0.0.1:{port}/tasks")
    with pytest.raises(StoreUnavailable) as refused:
        await open_configured(config)
    assert str(refused.value).startswith(
        f"store.url: cannot use the PostgreSQL database at 127.0.0.1:{port}/tasks: "
    )
