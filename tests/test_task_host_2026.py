"""`CallTaskHost` (`calls.task_host`): a 2026-07-28 call that became a task, its questions
kept as the task's input requests in a real SQLite store, answered, declined, timed out and
withdrawn.

The host is driven as the runner drives it (`start_task_call` with the runner's callbacks,
`end_task_call` after the terminal write), on a real `HeldCall` over a real held session
whose upstream the test plays at its transport (`fakes.ScriptedUpstream`): the test says when
a question, a withdrawal or the call's answer arrives. `Statuses` is the runner's `on_input`,
writing the task's status as `TaskRunner._record_input` does.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from gateway.aio import TaskSet
from gateway.calls.call import HeldCall, Running
from gateway.calls.held import HeldSessions
from gateway.calls.task_host import CallTaskHost
from gateway.config import Settings
from gateway.observability.metrics import Metrics
from gateway.protocol import jsonrpc
from gateway.protocol.errors import INTERNAL_ERROR, INVALID_PARAMS
from gateway.route import Route
from gateway.tasks.inputs import AnswerHost, TaskInputs
from gateway.tasks.models import Task, TaskStatus
from gateway.tasks.store import TaskStore, open_store
from gateway.upstream.base import Transport

from .fakes import ScriptedRoute, ScriptedUpstream
from .helpers import ANSWERS_ALL

T0 = datetime(2026, 7, 28, 12, 0, tzinfo=UTC)
#: Never started: the route's held sessions get a scripted transport instead.
UNUSED = {"transport": "stdio", "command": ["true"]}
ADA = {"action": "accept", "content": {"name": "Ada"}}
DONE = {"content": [{"type": "text", "text": "done"}]}
#: Longer than any test: a timer that still runs at the end was never stopped.
NEVER = 3600.0
#: The names the host gives its work for a question: the row and status written, the timer,
#: the row withdrawn (`CallTaskHost.asked`, `_record`, `withdrawn`).
RECORD, TIMER, WITHDRAW = "task input request", "task input timeout", "task input withdrawn"


class Inputs(TaskInputs):
    """The store's rows as the host keeps them, and which tasks it says run here."""

    def __init__(self, store: TaskStore, clock: Callable[[], datetime]) -> None:
        super().__init__(store, clock)
        self.hosting: list[str] = []
        self.ended_tasks: list[str] = []

    def running(self, task_id: str, host: AnswerHost) -> None:
        self.hosting.append(task_id)
        super().running(task_id, host)

    def ended(self, task_id: str) -> None:
        self.ended_tasks.append(task_id)
        super().ended(task_id)


def question(upstream_id: jsonrpc.RequestId, method: str = "elicitation/create") -> jsonrpc.Request:
    params = {"message": f"question {upstream_id}?", "requestedSchema": {"type": "object"}}
    return jsonrpc.Request(jsonrpc="2.0", id=upstream_id, method=method, params=params)


def running(name: str) -> set[asyncio.Task[Any]]:
    """The tasks of that name not done yet."""
    return {t for t in asyncio.all_tasks() if t.get_name() == name and not t.done()}


def timers() -> set[asyncio.Task[Any]]:
    """The questions' timers running now."""
    return running(TIMER)


class WatchedUpstream(ScriptedUpstream):
    """A scripted upstream that runs `before_send` (when set) as each message reaches it."""

    before_send: Callable[[jsonrpc.Message], Awaitable[None]] | None = None

    async def send(self, message: jsonrpc.Message) -> None:
        if self.before_send is not None:
            await self.before_send(message)
        await super().send(message)


class WatchedRoute(ScriptedRoute):
    def transport(
        self,
        sink: Any,
        forwarded: Callable[[], Mapping[str, str]],
        principal: str | None = None,
    ) -> Transport:
        self.made.append(WatchedUpstream(sink))
        return self.made[-1]


class Statuses:
    """The runner's `on_input`: each call writes the task's status, after reading which
    questions the store holds for it at that moment (kept in `writes`)."""

    def __init__(self, store: TaskStore, task_id: str) -> None:
        self._store = store
        self._task_id = task_id
        self.writes: list[tuple[bool, list[str]]] = []
        self._tasks = TaskSet("status writes")
        self._changed = asyncio.Event()

    def __call__(self, waiting: bool) -> asyncio.Task[None]:
        return self._tasks.spawn(self._write(waiting), name="status write")

    async def _write(self, waiting: bool) -> None:
        stored = [row.key for row in await self._store.pending_inputs(self._task_id)]
        if waiting:
            status, message = TaskStatus.INPUT_REQUIRED, "waiting for input"
        else:
            status, message = TaskStatus.WORKING, None
        await self._store.update_task(self._task_id, status, message, T0)
        self.writes.append((waiting, stored))
        self._changed.set()
        self._changed = asyncio.Event()

    async def until(self, condition: Callable[[], bool]) -> None:
        while not condition():
            await self._changed.wait()

    async def close(self) -> None:
        await self._tasks.close()


class Hosted:
    """A task whose call the host has, the call's upstream, and what the runner hears."""

    def __init__(
        self,
        store: TaskStore,
        host: CallTaskHost,
        upstream: WatchedUpstream,
        sent: jsonrpc.Request,
        statuses: Statuses,
        progress: list[jsonrpc.JsonObject],
        ended: list[str],
    ) -> None:
        self.store = store
        self.host = host
        assert isinstance(host.call, HeldCall)
        self.call = host.call
        self.upstream = upstream
        self.sent = sent
        self.statuses = statuses
        self.progress = progress
        self.ended = ended

    async def ask(self, upstream_id: jsonrpc.RequestId, method: str = "elicitation/create") -> str:
        """The upstream asks; returns the key, once the host has stored the question."""
        before = set(self.call.pending)
        self.upstream.say(question(upstream_id, method), self.sent.id)
        (key,) = set(self.call.pending) - before
        await self.settled()
        return key

    async def status(self) -> TaskStatus:
        task = await self.store.get_task("t1")
        assert task is not None
        return task.status

    async def settled(self) -> None:
        """Once the host has stored or withdrawn what the upstream asked or took back so far
        (its rows, the task's status and the questions' timers)."""
        async with asyncio.timeout(5):
            while work := running(RECORD) | running(WITHDRAW):
                await asyncio.wait(work)


Host = Callable[..., Awaitable[Hosted]]


@pytest.fixture
async def hosted(make_settings: Callable[..., Settings], tmp_path: Path) -> AsyncIterator[Host]:
    """Makes the task `t1` and hands its running call to a host (`input_timeout=` its
    `tasks.input_timeout_seconds`; `asked_before=`: upstream ids of questions asked after
    the window and before the host took the call)."""
    settings = make_settings([{"name": "r", "upstream": UNUSED}])
    route = Route(settings, settings.routes[0], Metrics(["r"]))
    scripted = route.upstream = WatchedRoute(settings.routes[0])
    pool = HeldSessions(settings.sessions)
    store = await open_store(tmp_path / "tasks.db")
    made: list[Hosted] = []

    async def make(
        input_timeout: float | None = None, asked_before: tuple[str, ...] = ()
    ) -> Hosted:
        task = Task(
            task_id="t1",
            owner="alice",
            route="r",
            tool="work",
            status=TaskStatus.WORKING,
            created_at=T0,
            updated_at=T0,
            ttl_ms=60_000,
            poll_interval_ms=500,
            generation="2026-07-28",
        )
        assert await store.create_task(task)
        lease = await pool.lease(route, "alice", ANSWERS_ALL, {})
        request = jsonrpc.Request(
            jsonrpc="2.0", id=1, method="tools/call", params={"name": "work", "arguments": {}}
        )
        call = HeldCall(lease, request)
        call.start()
        upstream = scripted.made[-1]
        assert isinstance(upstream, WatchedUpstream)
        async with asyncio.timeout(5):
            sent = await upstream.request("tools/call")
            assert isinstance(await call.wait(0), Running)
        for upstream_id in asked_before:
            upstream.say(question(upstream_id), sent.id)
        statuses = Statuses(store, task.task_id)
        progress: list[jsonrpc.JsonObject] = []
        inputs = Inputs(store, lambda: T0)
        host = CallTaskHost(call, "alice", "alice", inputs, input_timeout)
        outgoing = host.start_task_call(task, request, progress.append, statuses)
        assert outgoing is call.outgoing
        assert inputs.hosting == [task.task_id]  # answers given on this process reach it
        ended = inputs.ended_tasks
        made.append(Hosted(store, host, upstream, sent, statuses, progress, ended))
        return made[-1]

    yield make
    for each in made:
        if not each.ended:  # the call ends as it would for a task that completed
            each.upstream.before_send = None
            each.upstream.answer(each.sent, DONE)
            await each.host.end_task_call(each.sent.id)
        await each.statuses.close()
    await store.close()
    await pool.close()
    await route.close()


async def test_a_question_during_the_task_is_stored_before_the_task_shows_input_required(
    hosted: Host,
) -> None:
    """Whoever reads the task when it shows input_required finds the question to answer."""
    task = await hosted()
    key = await task.ask("q1")
    assert task.statuses.writes == [(True, [key])]  # the row was there when the status came
    assert await task.status() is TaskStatus.INPUT_REQUIRED
    (row,) = await task.store.pending_inputs("t1")
    assert (row.key, row.method, row.upstream_id) == (key, "elicitation/create", "q1")
    assert row.params == question("q1").params


async def test_a_question_asked_before_the_task_took_the_call_is_stored_too(
    hosted: Host,
) -> None:
    task = await hosted(asked_before=("q1",))
    await task.settled()
    assert [row.upstream_id for row in await task.store.pending_inputs("t1")] == ["q1"]
    assert await task.status() is TaskStatus.INPUT_REQUIRED


async def test_an_answer_is_settled_in_the_store_before_it_goes_upstream(hosted: Host) -> None:
    task = await hosted()
    key = await task.ask("q1")
    stored_when_sent: list[dict[str, jsonrpc.JsonObject]] = []

    async def look(message: jsonrpc.Message) -> None:
        if isinstance(message, jsonrpc.Response):
            stored_when_sent.append(await task.store.answered_inputs("t1"))

    task.upstream.before_send = look
    assert await task.host.answer(key, ADA)
    assert stored_when_sent == [{key: ADA}]
    assert task.upstream.answers() == [jsonrpc.Response(jsonrpc="2.0", id="q1", result=ADA)]
    assert await task.store.pending_inputs("t1") == []
    assert await task.status() is TaskStatus.WORKING  # nothing left to answer


async def test_an_answer_to_an_unknown_or_closed_key_is_refused(hosted: Host) -> None:
    """Tasks extension: "unknown, answered or superseded keys SHOULD be ignored"."""
    task = await hosted()
    key = await task.ask("q1")
    assert not await task.host.answer("elicitation-99", ADA)
    assert await task.host.answer(key, ADA)
    assert not await task.host.answer(key, {"action": "decline"})
    assert task.upstream.answers() == [jsonrpc.Response(jsonrpc="2.0", id="q1", result=ADA)]
    assert await task.store.answered_inputs("t1") == {key: ADA}


async def test_one_answer_given_twice_at_once_goes_upstream_once(hosted: Host) -> None:
    task = await hosted()
    key = await task.ask("q1")
    given = await asyncio.gather(
        task.host.answer(key, ADA), task.host.answer(key, {"action": "decline"})
    )
    assert sorted(given) == [False, True]
    (sent,) = task.upstream.answers()
    assert sent.id == "q1"
    assert isinstance(sent, jsonrpc.Response)
    assert await task.store.answered_inputs("t1") == {key: sent.result}


async def test_a_declined_question_goes_upstream_as_its_error_and_is_withdrawn(
    hosted: Host,
) -> None:
    task = await hosted(input_timeout=NEVER)
    key = await task.ask("q1")
    started = timers()
    declined = jsonrpc.error_response(7, INVALID_PARAMS, "the user cannot answer this")
    assert await task.host.decline(key, declined)
    (sent,) = task.upstream.answers()
    assert isinstance(sent, jsonrpc.ErrorResponse)
    assert sent.id == "q1" and sent.error.code == INVALID_PARAMS
    assert await task.store.pending_inputs("t1") == []
    assert await task.store.answered_inputs("t1") == {}  # withdrawn, not answered
    await task.settled()
    assert await task.status() is TaskStatus.WORKING
    async with asyncio.timeout(5):
        await asyncio.wait(started)  # its timer was stopped, not left to run for an hour
    assert not await task.host.decline(key, declined)
    assert not await task.host.answer(key, ADA)
    assert len(task.upstream.answers()) == 1


async def test_answers_stored_by_another_replica_go_upstream_once(hosted: Host) -> None:
    """With replicas, an answer lands wherever the client sent it: the store has it, and the
    replica running the call takes it from there (`take_stored_answers`)."""
    task = await hosted(input_timeout=NEVER)
    first = await task.ask("q1")
    second = await task.ask("q2")
    assert await task.store.answer_input("t1", first, ADA, T0) is not None  # another replica
    await task.host.take_stored_answers()
    await task.host.take_stored_answers()
    assert task.upstream.answers() == [jsonrpc.Response(jsonrpc="2.0", id="q1", result=ADA)]
    assert list(task.call.pending) == [second]
    assert await task.status() is TaskStatus.INPUT_REQUIRED  # q2 still waits
    assert await task.host.answer(second, ADA)
    await task.host.take_stored_answers()
    assert [a.id for a in task.upstream.answers()] == ["q1", "q2"]
    await task.settled()
    assert await task.status() is TaskStatus.WORKING
    assert timers() == set()


@pytest.mark.parametrize(
    ("method", "default"),
    [
        (
            "elicitation/create",
            jsonrpc.Response(jsonrpc="2.0", id="q1", result={"action": "cancel"}),
        ),
        ("sampling/createMessage", jsonrpc.error_response("q1", INTERNAL_ERROR, "")),
    ],
)
async def test_an_unanswered_question_gets_the_default_answer_and_is_withdrawn(
    hosted: Host, method: str, default: jsonrpc.Response | jsonrpc.ErrorResponse
) -> None:
    """After `tasks.input_timeout_seconds` the upstream stops waiting: elicitation has its own
    way to say nobody answered (the user dismissed it); any other question gets an error."""
    task = await hosted(input_timeout=0.05)
    key = await task.ask("q1", method)
    (timer,) = timers()
    async with asyncio.timeout(5):
        await asyncio.wait({timer})  # it gave the default answer and withdrew the question
    assert not timer.cancelled()
    (sent,) = task.upstream.answers()
    assert type(sent) is type(default) and sent.id == default.id
    if isinstance(sent, jsonrpc.Response):
        assert sent == default
    else:
        assert isinstance(default, jsonrpc.ErrorResponse)
        assert sent.error.code == default.error.code
    await task.settled()
    assert await task.store.pending_inputs("t1") == []
    assert await task.store.answered_inputs("t1") == {}
    assert await task.status() is TaskStatus.WORKING
    assert not await task.host.answer(key, ADA)  # too late: the upstream has its answer


async def test_an_answer_in_time_stops_its_questions_timer(hosted: Host) -> None:
    task = await hosted(input_timeout=NEVER)
    key = await task.ask("q1")
    (timer,) = timers()
    assert await task.host.answer(key, ADA)
    async with asyncio.timeout(5):
        await asyncio.wait({timer})  # stopped: left to run, it would take an hour
    assert timer.cancelled()


async def test_ending_the_task_call_stops_its_timers_and_abandons_the_call(hosted: Host) -> None:
    """A task that ended (cancelled, say) with a question open: the terminal write withdrew
    its rows, and ending the call stops the timers and tells the upstream it is over."""
    task = await hosted(input_timeout=NEVER)
    await task.ask("q1")
    (timer,) = timers()
    async with asyncio.timeout(5):
        await task.host.end_task_call(task.sent.id)
    assert task.ended == ["t1"]
    assert timer.cancelled() and timers() == set()
    async with asyncio.timeout(5):
        (notice,) = await task.upstream.received("notifications/cancelled")
    assert notice.params == {"requestId": task.sent.id, "reason": "the task ended"}
    assert task.upstream.answers() == []  # no default answer went upstream
    assert task.upstream.closes == 1  # its session is not handed to another call


async def test_a_question_the_upstream_withdraws_is_withdrawn_from_the_task(hosted: Host) -> None:
    task = await hosted(input_timeout=NEVER)
    first = await task.ask("q1")
    await task.ask("q2")
    task.upstream.say(jsonrpc.cancelled("q1", "the tool stopped waiting"), task.sent.id)
    await task.settled()
    assert [row.upstream_id for row in await task.store.pending_inputs("t1")] == ["q2"]
    assert await task.status() is TaskStatus.INPUT_REQUIRED
    assert not await task.host.answer(first, ADA)
    task.upstream.say(jsonrpc.cancelled("q2", "the tool stopped waiting"), task.sent.id)
    await task.settled()
    assert await task.store.pending_inputs("t1") == []
    assert await task.status() is TaskStatus.WORKING
    assert task.upstream.answers() == []


async def test_a_question_withdrawn_before_it_was_stored_leaves_the_task_working(
    hosted: Host,
) -> None:
    task = await hosted()
    task.upstream.say(question("q1"), task.sent.id)
    task.upstream.say(jsonrpc.cancelled("q1", "the tool stopped waiting"), task.sent.id)
    await task.settled()
    assert await task.store.pending_inputs("t1") == []
    assert await task.status() is TaskStatus.WORKING


async def test_progress_during_the_task_goes_to_the_runner(hosted: Host) -> None:
    """The extension has no progress for tasks: the runner makes it the statusMessage."""
    task = await hosted()
    progress = {"progressToken": task.call.token, "progress": 1, "message": "halfway"}
    task.upstream.say(
        jsonrpc.Notification(jsonrpc="2.0", method="notifications/progress", params=progress)
    )
    assert task.progress == [progress]


async def test_an_ended_task_call_lets_go_of_its_host_and_the_runners_hooks(hosted: Host) -> None:
    """The call, its host and the runner's hooks refer to one another while the task runs:
    left so, each task's request and answer would wait for a garbage collection."""
    task = await hosted()
    task.upstream.answer(task.sent, DONE)
    async with asyncio.timeout(5):
        await task.host.end_task_call(task.sent.id)
    assert task.call.hooks is None
    task.host.progress({"progressToken": task.call.token, "progress": 1})
    assert task.progress == []
