"""One session (`gateway.session.session`, its `calls` and its `task_host`) between a client
and a scripted upstream: requests relayed under the gateway's ids and answered under the
client's, progress under the client's token, cancellation, what the upstream asks, task calls
and the end."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import pytest

from gateway.config import Settings
from gateway.observability.metrics import Metrics
from gateway.protocol import jsonrpc
from gateway.protocol.errors import INTERNAL_ERROR
from gateway.route import Route
from gateway.session.session import Session
from gateway.tasks.models import SessionRecord, Task, TaskStatus

from .fakes import ScriptedRoute, ScriptedUpstream
from .helpers import ANSWERS_ALL, INITIALIZE, RELATED, last_messages, messages, opened_record

T0 = datetime(2025, 11, 25, 12, 0, tzinfo=UTC)


UPSTREAM = {"transport": "stdio", "command": ["true"]}


def call(request_id: jsonrpc.RequestId, **meta: Any) -> jsonrpc.Request:
    params: dict[str, Any] = {"name": "echo", "arguments": {"text": "hi"}}
    if meta:
        params["_meta"] = meta
    return jsonrpc.Request(jsonrpc="2.0", id=request_id, method="tools/call", params=params)


def task(task_id: str = "t1", token: jsonrpc.RequestId | None = None) -> Task:
    return Task(
        task_id=task_id,
        owner="session:s1",
        route="r",
        tool="echo",
        status=TaskStatus.WORKING,
        created_at=T0,
        updated_at=T0,
        ttl_ms=60_000,
        poll_interval_ms=1000,
        progress_token=token,
    )


def nothing(waiting: bool) -> asyncio.Task[None]:
    raise AssertionError("no question was expected")


class Opened:
    """A session of route `r` past its handshake, and its scripted upstream."""

    def __init__(self, session: Session, upstream: ScriptedUpstream) -> None:
        self.session = session
        self.upstream = upstream


@pytest.fixture
async def route(make_settings: Callable[..., Settings]) -> AsyncIterator[Route]:
    settings = make_settings([{"name": "r", "upstream": UPSTREAM}])
    route = Route(settings, settings.routes[0], Metrics(["r"]))
    route.upstream = ScriptedRoute(settings.routes[0])
    yield route
    await route.close()


@pytest.fixture
async def opened(route: Route, make_settings: Callable[..., Settings]) -> AsyncIterator[Opened]:
    session = Session("s1", route, make_settings().http, None, "127.0.0.1")
    await session.upstream.initialize(INITIALIZE)
    session.record = opened_record(session)
    assert isinstance(route.upstream, ScriptedRoute)
    yield Opened(session, route.upstream.made[-1])
    await session.close()


async def test_a_request_goes_upstream_under_the_gateways_id_and_answers_under_the_clients(
    opened: Opened,
) -> None:
    stream = opened.session.forward(call("client-7"))
    async with asyncio.timeout(5):
        sent = await opened.upstream.request("tools/call")
    assert sent.id != "client-7" and sent.params == call("client-7").params
    result = {"content": [{"type": "text", "text": "hi"}]}
    opened.upstream.answer(sent, result)
    assert await last_messages(stream) == [{"jsonrpc": "2.0", "id": "client-7", "result": result}]


async def test_progress_goes_up_under_the_gateways_token_and_comes_back_under_the_clients(
    opened: Opened,
) -> None:
    stream = opened.session.forward(call(7, progressToken="client-token"))
    async with asyncio.timeout(5):
        sent = await opened.upstream.request("tools/call")
    # The upstream id doubles as the token: unique within the upstream session.
    assert jsonrpc.progress_token(sent) == sent.id
    for token in (sent.id, "client-token", 999):  # only our own token names the call
        progress = {"progressToken": token, "progress": 1, "total": 2}
        opened.upstream.say(
            jsonrpc.Notification(jsonrpc="2.0", method="notifications/progress", params=progress),
            sent.id,
        )
    opened.upstream.answer(sent, {"content": []})
    relayed, answer = await last_messages(stream)
    assert relayed["params"] == {"progressToken": "client-token", "progress": 1, "total": 2}
    assert answer["id"] == 7


async def test_a_cancelled_request_gets_no_answer_and_the_upstream_hears_under_its_own_id(
    opened: Opened,
) -> None:
    stream = opened.session.forward(call(9))
    async with asyncio.timeout(5):
        sent = await opened.upstream.request("tools/call")
        cancel = jsonrpc.Notification(
            jsonrpc="2.0",
            method="notifications/cancelled",
            params={"requestId": 9, "reason": "user gave up"},
        )
        await opened.session.deliver(cancel)
        (heard,) = await opened.upstream.received("notifications/cancelled")
    assert heard.params == {"requestId": sent.id, "reason": "user gave up"}
    opened.upstream.answer(sent, {"content": []})  # too late: nobody waits for it
    assert await last_messages(stream) == []
    assert not opened.session.busy


async def test_a_cancellation_of_an_answered_or_unknown_request_is_ignored(
    opened: Opened,
) -> None:
    stream = opened.session.forward(call(9))
    async with asyncio.timeout(5):
        opened.upstream.answer(await opened.upstream.request("tools/call"), {"content": []})
    assert [m["id"] for m in await last_messages(stream)] == [9]
    for request_id in (9, 10, {"not": "an id"}):
        cancel = jsonrpc.Notification(
            jsonrpc="2.0", method="notifications/cancelled", params={"requestId": request_id}
        )
        await opened.session.deliver(cancel)
    assert "notifications/cancelled" not in opened.upstream.methods()


async def test_a_request_whose_upstream_is_lost_is_answered_with_an_internal_error(
    opened: Opened,
) -> None:
    stream = opened.session.forward(call("c"))
    async with asyncio.timeout(5):
        await opened.upstream.request("tools/call")
    opened.upstream.sink.on_lost("the stdio upstream process exited with code 1")
    (answer,) = await last_messages(stream)
    assert answer["id"] == "c" and answer["error"]["code"] == INTERNAL_ERROR
    assert answer["error"]["message"] == "the stdio upstream process exited with code 1"


async def test_what_the_upstream_asks_during_a_call_goes_to_its_stream_and_the_answer_back(
    opened: Opened,
) -> None:
    stream = opened.session.forward(call("c"))
    async with asyncio.timeout(5):
        sent = await opened.upstream.request("tools/call")
    asked = jsonrpc.Request(jsonrpc="2.0", id="up-1", method="roots/list")
    opened.upstream.say(asked, sent.id)
    (question,) = await messages(stream, 1)
    assert question["method"] == "roots/list" and question["id"] != "up-1"
    answer = jsonrpc.Response(jsonrpc="2.0", id=question["id"], result={"roots": []})
    await opened.session.deliver(answer)
    assert opened.upstream.answers() == [
        jsonrpc.Response(jsonrpc="2.0", id="up-1", result={"roots": []})
    ]
    await opened.session.deliver(answer)  # answered already: dropped, not relayed twice
    assert len(opened.upstream.answers()) == 1


@pytest.mark.parametrize(
    ("method", "capability"),
    [
        ("elicitation/create", "elicitation"),
        ("sampling/createMessage", "sampling"),
        ("roots/list", "roots"),
    ],
)
async def test_a_question_of_a_kind_the_client_never_declared_is_refused_upstream_at_once(
    opened: Opened, method: str, capability: str
) -> None:
    declared: dict[str, Any] = {name: {} for name in ANSWERS_ALL if name != capability}
    initialize = INITIALIZE.model_dump(exclude_unset=True)
    initialize["params"]["capabilities"] = declared
    assert opened.session.record is not None
    opened.session.record = opened.session.record.model_copy(update={"initialize": initialize})
    stream = opened.session.forward(call("c"))
    async with asyncio.timeout(5):
        sent = await opened.upstream.request("tools/call")
    opened.upstream.say(jsonrpc.Request(jsonrpc="2.0", id="up-1", method=method), sent.id)
    opened.upstream.say(jsonrpc.Request(jsonrpc="2.0", id="up-2", method="ping"), sent.id)
    (ping,) = await messages(stream, 1)  # a ping is for every client
    async with asyncio.timeout(5):
        while not opened.upstream.answers():  # noqa: ASYNC110 - the refusal is spawned
            await asyncio.sleep(0.01)
    # Spec (2025-11-25): a client answers a request it does not support with -32601; the
    # gateway says it for the client that never declared the capability, instead of leaving
    # the upstream's call waiting on a question nobody can answer.
    (refusal,) = opened.upstream.answers()
    assert isinstance(refusal, jsonrpc.ErrorResponse) and refusal.id == "up-1"
    assert refusal.error.code == -32601 and capability in refusal.error.message
    assert ping["method"] == "ping"


async def test_what_the_upstream_says_outside_any_call_goes_to_the_get_stream(
    opened: Opened,
) -> None:
    opened.upstream.say(jsonrpc.Request(jsonrpc="2.0", id="up-1", method="ping"))
    opened.upstream.say(
        jsonrpc.Notification(jsonrpc="2.0", method="notifications/tools/list_changed")
    )
    ping, changed = await messages(opened.session.standalone, 2)
    assert ping["method"] == "ping" and changed["method"] == "notifications/tools/list_changed"


async def test_a_request_the_upstream_withdraws_is_withdrawn_from_the_client_too(
    opened: Opened,
) -> None:
    opened.upstream.say(jsonrpc.Request(jsonrpc="2.0", id="up-1", method="roots/list"))
    withdrawn = jsonrpc.Notification(
        jsonrpc="2.0", method="notifications/cancelled", params={"requestId": "up-1"}
    )
    opened.upstream.say(withdrawn)
    question, cancelled = await messages(opened.session.standalone, 2)
    assert cancelled["params"] == {"requestId": question["id"]}  # under the client's id
    late = jsonrpc.Response(jsonrpc="2.0", id=question["id"], result={"roots": []})
    await opened.session.deliver(late)
    assert opened.upstream.answers() == []


async def test_a_tasks_progress_carries_the_clients_token_and_the_related_task(
    opened: Opened,
) -> None:
    heard: list[jsonrpc.JsonObject] = []
    outgoing = opened.session.task_host.start_task_call(
        task(token="p-7"), call(1, progressToken="p-7"), heard.append, nothing
    )
    progress = {"progressToken": outgoing.id, "progress": 1}
    note = jsonrpc.Notification(jsonrpc="2.0", method="notifications/progress", params=progress)
    opened.upstream.say(note, outgoing.id)
    result_stream = opened.session.task_host.open_result_stream("t1")  # now the client waits on it
    opened.upstream.say(note, outgoing.id)
    (on_get,) = await messages(opened.session.standalone, 1)
    (on_result,) = await messages(result_stream, 1)
    for relayed in (on_get, on_result):
        assert relayed["params"]["progressToken"] == "p-7"
        assert relayed["params"]["_meta"][RELATED] == {"taskId": "t1"}
    assert heard == [progress, progress]  # what the runner shows as statusMessage


async def test_a_task_status_goes_to_the_get_stream_without_related_task_meta(
    opened: Opened,
) -> None:
    """Once the client has opened its GET stream; before, statuses are not kept for it (a
    client that only polls never opens one)."""
    stream = opened.session.standalone
    working, done = task(), replace(task(), status=TaskStatus.COMPLETED)
    opened.session.task_host.task_status(working)
    assert stream.pushed == 0
    reading = asyncio.ensure_future(messages(stream, 1))
    await asyncio.sleep(0)  # the GET stream is open now
    opened.session.task_host.task_status(done)
    (note,) = await reading
    assert note["method"] == "notifications/tasks/status" and note["params"] == done.wire()


async def test_initialized_goes_upstream_and_into_the_sessions_record(opened: Opened) -> None:
    saved: list[SessionRecord] = []

    async def persist(record: SessionRecord) -> bool:
        saved.append(record)
        return True

    opened.session.persist = persist
    opened.session.record = SessionRecord(
        session_id="s1",
        route="r",
        protocol_version="2025-11-25",
        initialize=INITIALIZE.model_dump(),
        created_at=T0,
    )
    initialized = jsonrpc.Notification(jsonrpc="2.0", method="notifications/initialized")
    await opened.session.deliver(initialized)
    assert opened.upstream.methods()[-1] == "notifications/initialized"
    assert [r.initialized for r in saved] == [initialized.model_dump(exclude_unset=True)]


async def test_an_ended_session_keeps_its_upstream_until_its_last_task_call_ends(
    opened: Opened,
) -> None:
    first = opened.session.task_host.start_task_call(task("t1"), call(1), lambda _: None, nothing)
    second = opened.session.task_host.start_task_call(task("t2"), call(2), lambda _: None, nothing)
    await opened.session.close()
    assert opened.upstream.closes == 0 and opened.session.standalone.closed
    await opened.session.task_host.end_task_call(first.id)
    assert opened.upstream.closes == 0
    await opened.session.task_host.end_task_call(second.id)
    assert opened.upstream.closes == 1


async def test_draining_answers_every_relayed_request_and_ends_the_get_stream(
    opened: Opened,
) -> None:
    streams = [opened.session.forward(call(n)) for n in (1, 2)]
    async with asyncio.timeout(5):
        await opened.upstream.received("tools/call", 2)
    opened.session.drain("the gateway is shutting down")
    for n, stream in zip((1, 2), streams, strict=True):
        (answer,) = await last_messages(stream)
        assert answer["id"] == n and answer["error"] == {
            "code": INTERNAL_ERROR,
            "message": "the gateway is shutting down",
        }
    assert await last_messages(opened.session.standalone) == []


def test_tasks_belong_to_the_principal_on_the_route_or_else_to_the_session(
    route: Route, make_settings: Callable[..., Settings]
) -> None:
    http = make_settings().http
    alice = Session("s1", route, http, "alice", "r:alice")
    anonymous = Session("s2", route, http, None, "127.0.0.1")
    assert alice.owner == "principal:r:alice" and anonymous.owner == "session:s2"
