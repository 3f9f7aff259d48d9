"""What the upstream asks during a task's call (`gateway.session.questions`), driven through the
session with a scripted upstream: the task is input_required before the client sees the
question, the answer goes back under the upstream's id, an unread question moves to a later
tasks/result, and every question ends once (answered, withdrawn, timed out, or the session
ends) with the upstream never left waiting."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime
from typing import Any

import pytest

from gateway.config import Settings
from gateway.observability.metrics import Metrics
from gateway.protocol import jsonrpc
from gateway.protocol.errors import INTERNAL_ERROR
from gateway.route import Route
from gateway.session.session import Session
from gateway.session.streams import EventStream
from gateway.tasks.models import Task, TaskStatus

from .fakes import ScriptedRoute, ScriptedUpstream
from .helpers import INITIALIZE, RELATED, messages, opened_record, pushed, take

T0 = datetime(2025, 11, 25, 12, 0, tzinfo=UTC)


ELICIT = {"message": "Your name?", "requestedSchema": {"type": "object", "properties": {}}}
NAMED = {"action": "accept", "content": {"name": "Ada"}}


class Inputs:
    """The runner's side of `on_input`: what it was told, and the input_required status write,
    which stays uncommitted until the test calls `commit()`."""

    def __init__(self) -> None:
        self.told: list[bool] = []
        self._committed = asyncio.Event()

    def __call__(self, waiting: bool) -> asyncio.Task[None]:
        self.told.append(waiting)
        return asyncio.ensure_future(self._write(waiting))

    async def _write(self, waiting: bool) -> None:
        if waiting:
            await self._committed.wait()

    def commit(self) -> None:
        self._committed.set()


class TaskCall:
    """A session past its handshake with task t1's call in flight on a scripted upstream."""

    def __init__(self, session: Session, upstream: ScriptedUpstream) -> None:
        self.session = session
        self.upstream = upstream
        self.inputs = Inputs()
        task = Task(
            task_id="t1",
            owner=session.owner,
            route="r",
            tool="ask",
            status=TaskStatus.WORKING,
            created_at=T0,
            updated_at=T0,
            ttl_ms=60_000,
            poll_interval_ms=1000,
        )
        request = jsonrpc.Request(jsonrpc="2.0", id=1, method="tools/call", params={"name": "ask"})
        self.call = session.task_host.start_task_call(task, request, lambda _: None, self.inputs)
        self._asked = 0

    @property
    def get_stream(self) -> EventStream:
        return self.session.standalone

    def ask(self, method: str = "elicitation/create") -> jsonrpc.Request:
        """The upstream asks the client, on the task call's stream."""
        self._asked += 1
        params = ELICIT if method == "elicitation/create" else {}
        request = jsonrpc.Request(
            jsonrpc="2.0", id=f"up-{self._asked}", method=method, params=params
        )
        self.upstream.say(request, self.call.id)
        return request

    async def answer(self, question: dict[str, Any], result: jsonrpc.JsonObject) -> None:
        answer = jsonrpc.Response(jsonrpc="2.0", id=question["id"], result=result)
        await self.session.deliver(answer)

    async def upstream_answers(self, count: int) -> list[jsonrpc.Response | jsonrpc.ErrorResponse]:
        """The answers the upstream got to its questions, once it has `count`."""
        async with asyncio.timeout(5):
            await self.upstream.until(lambda: len(self.upstream.answers()) >= count)
        return self.upstream.answers()


Start = Callable[..., Awaitable[TaskCall]]


@pytest.fixture
async def start(make_settings: Callable[..., Settings]) -> AsyncIterator[Start]:
    """Starts a task call on a route with the task policy given."""
    routes: list[Route] = []
    sessions: list[Session] = []

    async def start(**tasks: Any) -> TaskCall:
        upstream = {"transport": "stdio", "command": ["true"]}
        settings = make_settings([{"name": "r", "upstream": upstream, "tasks": tasks}])
        route = Route(settings, settings.routes[0], Metrics(["r"]))
        scripted = route.upstream = ScriptedRoute(settings.routes[0])
        routes.append(route)
        session = Session("s1", route, settings.http, None, "127.0.0.1")
        sessions.append(session)
        await session.upstream.initialize(INITIALIZE)
        session.record = opened_record(session)
        return TaskCall(session, scripted.made[-1])

    yield start
    for session in sessions:
        await session.close()
    for route in routes:
        await route.close()


async def let_ready_tasks_run() -> None:
    for _ in range(10):
        await asyncio.sleep(0)  # a scheduling point, not a wait for time


async def test_the_task_is_input_required_before_the_client_sees_the_question(
    start: Start,
) -> None:
    task = await start()
    task.ask()
    assert task.inputs.told == [True]
    await let_ready_tasks_run()
    assert task.get_stream.pushed == 0  # tasks/get would still say working
    task.inputs.commit()
    (question,) = await messages(task.get_stream, 1)
    assert question["method"] == "elicitation/create"
    assert question["params"]["_meta"][RELATED] == {"taskId": "t1"}


async def test_the_answer_goes_upstream_under_the_upstreams_id_and_the_task_works_again(
    start: Start,
) -> None:
    task = await start()
    task.inputs.commit()
    task.ask()
    (question,) = await messages(task.get_stream, 1)
    assert question["id"] != "up-1"
    await task.answer(question, NAMED)
    assert await task.upstream_answers(1) == [
        jsonrpc.Response(jsonrpc="2.0", id="up-1", result=NAMED)
    ]
    assert task.inputs.told == [True, False]


async def test_the_task_waits_until_its_last_open_question_is_answered(start: Start) -> None:
    task = await start()
    task.inputs.commit()
    task.ask()
    task.ask("sampling/createMessage")
    first, second = await messages(task.get_stream, 2)
    await task.answer(first, NAMED)
    assert task.inputs.told == [True]
    await task.answer(second, {"role": "assistant", "content": {"type": "text", "text": "x"}})
    assert task.inputs.told == [True, False]
    assert [a.id for a in await task.upstream_answers(2)] == ["up-1", "up-2"]


async def test_a_question_unread_on_the_get_stream_moves_to_a_later_tasks_result(
    start: Start,
) -> None:
    task = await start()
    task.inputs.commit()
    task.ask()
    await pushed(task.get_stream, 1)
    result = task.session.task_host.open_result_stream("t1")
    (moved,) = await messages(result, 1)
    assert moved["method"] == "elicitation/create"
    assert await take(task.get_stream, 0, 1, idle=0.01) == [None]  # moved, not copied


async def test_a_question_the_client_read_on_the_get_stream_is_not_sent_again(
    start: Start,
) -> None:
    task = await start()
    task.inputs.commit()
    task.ask()
    await messages(task.get_stream, 1)
    result = task.session.task_host.open_result_stream("t1")
    assert await take(result, 0, 1, idle=0.01) == [None]


async def test_a_question_on_a_tasks_result_nobody_reads_is_sent_again_on_the_next(
    start: Start,
) -> None:
    task = await start()
    task.inputs.commit()
    dropped = task.session.task_host.open_result_stream("t1")  # its connection went away
    task.ask()
    await pushed(dropped, 1)
    again = task.session.task_host.open_result_stream("t1")
    (question,) = await messages(again, 1)
    (original,) = await messages(dropped, 1)
    assert question == original


async def test_unanswered_questions_get_the_default_answer_after_the_input_timeout(
    start: Start,
) -> None:
    task = await start(input_timeout_seconds=0.05)
    task.inputs.commit()
    task.ask()
    task.ask("sampling/createMessage")
    # Each question has a timer of its own: on a busy machine the second may fire first.
    answers = {answer.id: answer for answer in await task.upstream_answers(2)}
    elicit, sample = answers["up-1"], answers["up-2"]
    # Elicitation can say that nobody answered; anything else gets an error.
    assert elicit == jsonrpc.Response(jsonrpc="2.0", id="up-1", result={"action": "cancel"})
    assert isinstance(sample, jsonrpc.ErrorResponse) and sample.id == "up-2"
    assert sample.error.code == INTERNAL_ERROR
    assert "tasks.input_timeout_seconds" in sample.error.message
    asked = await messages(task.get_stream, 4)
    questions = [m for m in asked if "id" in m]
    withdrawn = [m for m in asked if m.get("method") == "notifications/cancelled"]
    assert sorted(w["params"]["requestId"] for w in withdrawn) == sorted(q["id"] for q in questions)
    assert all(w["params"]["_meta"][RELATED] == {"taskId": "t1"} for w in withdrawn)
    assert task.inputs.told == [True, False]


async def test_withdrawn_questions_are_cancelled_for_the_client_and_a_late_answer_is_dropped(
    start: Start,
) -> None:
    task = await start()
    task.inputs.commit()
    task.ask()
    (question,) = await messages(task.get_stream, 1)
    task.session.task_host.withdraw_questions("t1", "the task was cancelled")
    (withdrawn,) = await messages(task.get_stream, 1, after=1)
    assert withdrawn["method"] == "notifications/cancelled"
    assert withdrawn["params"]["requestId"] == question["id"]
    assert withdrawn["params"]["reason"] == "the task was cancelled"
    await task.answer(question, NAMED)
    assert task.upstream.answers() == []


async def test_a_question_the_upstream_withdraws_no_longer_keeps_the_task_waiting(
    start: Start,
) -> None:
    task = await start()
    task.inputs.commit()
    task.ask()
    (question,) = await messages(task.get_stream, 1)
    cancelled = {"requestId": "up-1"}
    task.upstream.say(
        jsonrpc.Notification(jsonrpc="2.0", method="notifications/cancelled", params=cancelled)
    )
    (withdrawn,) = await messages(task.get_stream, 1, after=1)
    assert withdrawn["params"]["requestId"] == question["id"]
    assert task.inputs.told == [True, False]


async def test_when_the_session_ends_its_questions_get_the_default_answer_at_once(
    start: Start,
) -> None:
    task = await start()
    task.inputs.commit()
    task.ask()
    await messages(task.get_stream, 1)
    await task.session.close()  # the task's call runs on, so the upstream stays
    task.ask("roots/list")  # asked after the end: nobody is left to answer
    first, second = await task.upstream_answers(2)
    assert first == jsonrpc.Response(jsonrpc="2.0", id="up-1", result={"action": "cancel"})
    assert isinstance(second, jsonrpc.ErrorResponse) and second.id == "up-2"
    assert second.error.code == INTERNAL_ERROR
