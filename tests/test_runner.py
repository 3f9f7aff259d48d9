"""The runner (`gateway.tasks.runner`) on a real store, against the TaskHost seam with a
scripted upstream: a task is recorded before its call starts, and every run ends in exactly one
terminal write, whoever gets there first (the upstream's answer, tasks/cancel, the time limit,
a lost upstream, shutdown, expiry), whatever the host does afterwards."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from gateway.config import Limits, TaskPolicy, UpstreamConfig
from gateway.observability.metrics import Metrics
from gateway.protocol import jsonrpc
from gateway.protocol.errors import (
    INTERNAL_ERROR,
    INVALID_PARAMS,
    SERVER_ERROR,
    GatewayError,
    TaskError,
)
from gateway.tasks import landing as landing_module
from gateway.tasks.models import INPUT_MESSAGE, TERMINAL, Task, TaskStatus
from gateway.tasks.notifier import Notifier
from gateway.tasks.recovery import INTERRUPTED_MESSAGE, SHUTDOWN_MESSAGE, Bounds
from gateway.tasks.runner import TaskRunner
from gateway.tasks.stops import CANCELLED_MESSAGE
from gateway.tasks.store import TaskStore, open_store
from gateway.upstream import Answer, UpstreamClient

from .fakes import ScriptedUpstream
from .helpers import FakeClock

RESULT = {"content": [{"type": "text", "text": "done"}], "isError": False}
INITIALIZE = jsonrpc.Request(jsonrpc="2.0", id=0, method="initialize", params={})


class Host:
    """The session side of the seam: its upstream is scripted, and it keeps what the runner
    tells it."""

    owner = "session:s1"
    principal = None
    busy = False
    listening = False

    def __init__(self) -> None:
        config = UpstreamConfig(transport="stdio", command=("true",))
        self.upstream = UpstreamClient(self._transport, config, self)
        self.statuses: list[TaskStatus] = []
        self.withdrawn: list[tuple[str, str]] = []
        self.ended: list[jsonrpc.RequestId] = []
        self._ended_changed = asyncio.Event()
        self.on_input: Callable[[bool], asyncio.Task[None]] | None = None

    def _transport(self, sink: UpstreamClient) -> ScriptedUpstream:
        self.scripted = ScriptedUpstream(sink)
        return self.scripted

    def start_task_call(
        self,
        task: Task,
        request: jsonrpc.Request,
        on_progress: Callable[[jsonrpc.JsonObject], None],
        on_input: Callable[[bool], asyncio.Task[None]],
    ) -> jsonrpc.Request:
        self.on_input = on_input
        return jsonrpc.with_id(request, self.upstream.next_id())

    @property
    def upstream_session_id(self) -> str | None:
        return None

    async def run_task_call(self, request: jsonrpc.Request) -> Answer:
        return await self.upstream.call(request, bounded=False)

    async def stop_task_call(self, request_id: jsonrpc.RequestId, reason: str) -> None:
        with contextlib.suppress(GatewayError):
            await self.upstream.notify(jsonrpc.cancelled(request_id, reason))

    async def end_task_call(self, upstream_id: jsonrpc.RequestId) -> None:
        self.ended.append(upstream_id)
        self._ended_changed.set()
        self._ended_changed = asyncio.Event()

    def withdraw_questions(self, task_id: str, reason: str) -> None:
        self.withdrawn.append((task_id, reason))

    def task_status(self, task: Task) -> None:
        self.statuses.append(task.status)

    def on_server_message(
        self, message: jsonrpc.Message, related: jsonrpc.RequestId | None
    ) -> None:
        pass

    def on_stream(self, related: jsonrpc.RequestId, interrupted: bool) -> None:
        pass

    async def call(self) -> jsonrpc.Request:
        """The task's tools/call, once it reached the upstream."""
        async with asyncio.timeout(5):
            return await self.scripted.request("tools/call")

    async def runs_ended(self, count: int = 1) -> None:
        """Return once `count` runs ended: their call's end is the last thing a run does."""
        async with asyncio.timeout(5):
            while len(self.ended) < count:
                await self._ended_changed.wait()


class GoneHost(Host):
    """A host whose every callback after the call fails, as a closed session's streams did."""

    async def end_task_call(self, upstream_id: jsonrpc.RequestId) -> None:
        await super().end_task_call(upstream_id)
        raise RuntimeError("the session's streams are closed")

    def withdraw_questions(self, task_id: str, reason: str) -> None:
        raise RuntimeError("the session's streams are closed")

    def task_status(self, task: Task) -> None:
        raise RuntimeError("the session's streams are closed")


@dataclass
class Parts:
    store: TaskStore
    runner: TaskRunner
    clock: FakeClock


@pytest.fixture
async def parts(tmp_path: Path) -> AsyncIterator[Parts]:
    store = await open_store(tmp_path / "gateway.db")
    clock = FakeClock()
    runner = TaskRunner(store, Notifier(), Metrics(["r"]), clock.now)
    yield Parts(store, runner, clock)
    await runner.close()
    await store.close()


async def connected(host: Host | None = None) -> Host:
    host = host or Host()
    await host.upstream.initialize(INITIALIZE)
    return host


def tool_call(ttl: object = None, **params: object) -> jsonrpc.Request:
    task = {} if ttl is None else {"ttl": ttl}
    return jsonrpc.Request(
        jsonrpc="2.0",
        id=7,
        method="tools/call",
        params={"name": "echo", "arguments": {"text": "x"}, "task": task, **params},
    )


async def submit(
    parts: Parts,
    host: Host,
    policy: TaskPolicy | None = None,
    limits: Limits | None = None,
    request: jsonrpc.Request | None = None,
) -> Task:
    return await parts.runner.submit(
        host, "r", request or tool_call(), policy or TaskPolicy(), limits or Limits()
    )


async def status_of(parts: Parts, task: Task) -> TaskStatus | None:
    stored = await parts.store.get_task(task.task_id)
    return None if stored is None else stored.status


# -- submit and the answer


async def test_a_task_is_recorded_working_before_its_call_is_answered_then_completed(
    parts: Parts,
) -> None:
    host = await connected()
    task = await submit(parts, host)
    assert await status_of(parts, task) is TaskStatus.WORKING
    assert task.created_at == parts.clock.now() and task.owner == "session:s1"
    call = await host.call()
    # The upstream gets a plain tools/call: the task field is the gateway's business.
    assert call.params == {"name": "echo", "arguments": {"text": "x"}}
    host.scripted.answer(call, RESULT)
    await host.runs_ended()
    outcome = await parts.store.get_outcome(task.task_id)
    assert await status_of(parts, task) is TaskStatus.COMPLETED
    assert outcome is not None and outcome.kind == "result" and outcome.body == RESULT
    assert host.statuses == [TaskStatus.COMPLETED] and host.ended == [call.id]


async def test_a_json_rpc_error_from_the_upstream_fails_the_task_and_is_kept_as_it_came(
    parts: Parts,
) -> None:
    host = await connected()
    task = await submit(parts, host)
    call = await host.call()
    host.scripted.say(jsonrpc.error_response(call.id, -32000, "rate limited", {"retry": 5}))
    await host.runs_ended()
    stored = await parts.store.get_task(task.task_id)
    outcome = await parts.store.get_outcome(task.task_id)
    assert stored is not None and stored.status is TaskStatus.FAILED
    assert stored.status_message == "rate limited"
    assert outcome is not None and outcome.kind == "error"
    assert outcome.body == {"code": -32000, "message": "rate limited", "data": {"retry": 5}}


@pytest.mark.parametrize("ttl", [-1, "600", True])
async def test_a_ttl_that_is_not_a_non_negative_number_is_refused_before_anything_is_stored(
    parts: Parts, ttl: object
) -> None:
    host = await connected()
    with pytest.raises(TaskError) as refused:
        await submit(parts, host, request=tool_call(ttl))
    assert refused.value.code == INVALID_PARAMS
    assert await parts.store.list_tasks(host.owner, None, 10, parts.clock.now()) == []
    assert "tools/call" not in host.scripted.methods()


async def test_the_ttl_is_clamped_to_the_policys_maximum_and_the_default_fills_in(
    parts: Parts,
) -> None:
    host = await connected()
    policy = TaskPolicy(default_ttl_ms=2000, max_ttl_ms=5000)
    clamped = await submit(parts, host, policy, request=tool_call(60_000))
    defaulted = await submit(parts, host, policy, request=tool_call())
    tighter = await submit(parts, host, policy, Limits(max_ttl_ms=3000), tool_call(60_000))
    assert (clamped.ttl_ms, defaulted.ttl_ms, tighter.ttl_ms) == (5000, 2000, 3000)


async def test_a_caller_at_its_active_task_limit_is_refused_until_one_ends(parts: Parts) -> None:
    host = await connected()
    limits = Limits(active_tasks_per_principal=1)
    first = await submit(parts, host, limits=limits)
    with pytest.raises(TaskError) as refused:
        await submit(parts, host, limits=limits)
    assert refused.value.code == SERVER_ERROR
    host.scripted.answer(await host.call(), RESULT)
    await host.runs_ended()
    assert await status_of(parts, first) is TaskStatus.COMPLETED
    await submit(parts, host, limits=limits)


# -- exactly one terminal write


async def test_cancel_writes_cancelled_first_and_the_upstreams_late_answer_changes_nothing(
    parts: Parts,
) -> None:
    host = await connected()
    task = await submit(parts, host)
    call = await host.call()
    cancelled = await parts.runner.cancel(task)
    assert cancelled.status is TaskStatus.CANCELLED
    (heard,) = await host.scripted.received("notifications/cancelled")
    assert heard.params == {"requestId": call.id, "reason": "the task was cancelled"}
    assert host.withdrawn == [(task.task_id, "the task was cancelled")]
    host.scripted.answer(call, RESULT)  # the upstream answers anyway
    await host.runs_ended()
    outcome = await parts.store.get_outcome(task.task_id)
    assert await status_of(parts, task) is TaskStatus.CANCELLED
    assert outcome is not None and outcome.body == {
        "code": INTERNAL_ERROR,
        "message": CANCELLED_MESSAGE,
    }
    assert host.statuses == [TaskStatus.CANCELLED]


async def test_a_cancel_that_loses_the_race_to_the_answer_is_refused_and_the_result_stays(
    parts: Parts,
) -> None:
    host = await connected()
    task = await submit(parts, host)  # the caller still holds it as working
    host.scripted.answer(await host.call(), RESULT)
    await host.runs_ended()
    with pytest.raises(TaskError) as refused:
        await parts.runner.cancel(task)
    assert refused.value.code == INVALID_PARAMS
    assert refused.value.message == "Cannot cancel task: already in terminal status 'completed'"
    assert await status_of(parts, task) is TaskStatus.COMPLETED
    assert "notifications/cancelled" not in host.scripted.methods()


async def test_a_call_past_the_time_limit_fails_the_task_and_tells_the_upstream_nothing_more(
    parts: Parts,
) -> None:
    host = await connected()
    task = await submit(parts, host, TaskPolicy(time_limit_seconds=0.05))
    call = await host.call()
    await host.runs_ended()
    stored = await parts.store.get_task(task.task_id)
    outcome = await parts.store.get_outcome(task.task_id)
    assert stored is not None and stored.status is TaskStatus.FAILED
    assert stored.status_message is not None and "tasks.time_limit_seconds" in stored.status_message
    assert outcome is not None and outcome.body["code"] == INTERNAL_ERROR
    host.scripted.answer(call, RESULT)  # too late to count
    assert await status_of(parts, task) is TaskStatus.FAILED


async def test_an_upstream_lost_mid_call_fails_the_task_with_the_reason(parts: Parts) -> None:
    host = await connected()
    task = await submit(parts, host)
    await host.call()
    host.upstream.on_lost("the stdio upstream process exited with code 3")
    await host.runs_ended()
    stored = await parts.store.get_task(task.task_id)
    assert stored is not None and stored.status is TaskStatus.FAILED
    assert stored.status_message == "the stdio upstream process exited with code 3"
    assert host.statuses == [TaskStatus.FAILED]


async def test_the_terminal_write_comes_first_whatever_the_host_does_after(
    parts: Parts, caplog: pytest.LogCaptureFixture
) -> None:
    host = await connected(GoneHost())
    with caplog.at_level(logging.ERROR, logger="gateway"):
        task = await submit(parts, host)
        host.scripted.answer(await host.call(), RESULT)
        await parts.runner.idle()  # the run's task is done, and its failure handed on
    outcome = await parts.store.get_outcome(task.task_id)
    assert await status_of(parts, task) is TaskStatus.COMPLETED
    assert outcome is not None and outcome.body == RESULT
    # The host's failure is not hidden: it is logged where the run's task ends.
    assert "the session's streams are closed" in caplog.text


async def test_interrupt_all_fails_every_running_task_and_their_runs_write_nothing_more(
    parts: Parts,
) -> None:
    host = await connected()
    tasks = [await submit(parts, host) for _ in range(3)]
    calls = await host.scripted.received("tools/call", 3)
    await parts.runner.interrupt_all(SHUTDOWN_MESSAGE)
    for call in calls:  # answers that arrive during shutdown
        assert isinstance(call, jsonrpc.Request)
        host.scripted.answer(call, RESULT)
    await host.runs_ended(3)
    for task in tasks:
        stored = await parts.store.get_task(task.task_id)
        outcome = await parts.store.get_outcome(task.task_id)
        assert stored is not None and stored.status is TaskStatus.FAILED
        assert stored.status_message == SHUTDOWN_MESSAGE
        assert outcome is not None and outcome.body["code"] == INTERNAL_ERROR
    assert host.statuses == [TaskStatus.FAILED] * 3
    await parts.runner.interrupt_all(SHUTDOWN_MESSAGE)  # nothing runs: nothing to do
    assert host.statuses == [TaskStatus.FAILED] * 3


async def test_what_a_closed_runner_left_running_fails_at_the_next_start(parts: Parts) -> None:
    host = await connected()
    running = await submit(parts, host)
    done = await submit(parts, host)
    calls = await host.scripted.received("tools/call", 2)
    assert isinstance(calls[1], jsonrpc.Request)
    host.scripted.answer(calls[1], RESULT)
    await host.runs_ended()
    await parts.runner.close()  # a crash or kill: the run is gone, its task still working
    assert await status_of(parts, running) is TaskStatus.WORKING
    restarted = TaskRunner(parts.store, Notifier(), Metrics(["r"]), parts.clock.now)
    assert await restarted.recover(lambda route: Bounds(3, None)) == []  # not repeatable
    await restarted.close()
    stored = await parts.store.get_task(running.task_id)
    assert stored is not None and stored.status is TaskStatus.FAILED
    assert stored.status_message == INTERRUPTED_MESSAGE
    assert await status_of(parts, done) is TaskStatus.COMPLETED


# -- expiry and input


async def test_sweep_deletes_expired_tasks_and_stops_a_running_one(parts: Parts) -> None:
    host = await connected()
    short = await submit(parts, host, request=tool_call(1000))
    long = await submit(parts, host, request=tool_call(60_000))
    short_call, _ = await host.scripted.received("tools/call", 2)
    assert isinstance(short_call, jsonrpc.Request)
    await parts.runner.sweep()
    assert await status_of(parts, short) is TaskStatus.WORKING  # its ttl has not passed
    parts.clock.advance(1)
    await parts.runner.sweep()
    assert await parts.store.get_task(short.task_id) is None
    assert await parts.store.get_outcome(short.task_id) is None
    assert await status_of(parts, long) is TaskStatus.WORKING
    (heard,) = await host.scripted.received("notifications/cancelled")
    assert heard.params == {"requestId": short_call.id, "reason": "the task expired"}
    assert host.withdrawn == [(short.task_id, "the task expired")]


async def test_a_task_waiting_for_input_is_input_required_until_told_otherwise(
    parts: Parts,
) -> None:
    host = await connected()
    task = await submit(parts, host)
    await host.call()
    assert host.on_input is not None
    async with asyncio.timeout(5):
        await host.on_input(True)
    stored = await parts.store.get_task(task.task_id)
    assert stored is not None and stored.status is TaskStatus.INPUT_REQUIRED
    assert stored.status_message == INPUT_MESSAGE
    async with asyncio.timeout(5):
        await host.on_input(False)
    assert await status_of(parts, task) is TaskStatus.WORKING
    assert host.statuses == [TaskStatus.INPUT_REQUIRED, TaskStatus.WORKING]
    assert not TERMINAL & set(host.statuses)


# -- a read while the terminal write is under way


def hold_terminal_writes(
    parts: Parts, monkeypatch: pytest.MonkeyPatch
) -> tuple[asyncio.Event, asyncio.Event]:
    """Terminal writes wait for the first event once they have set the second (begun)."""
    gate, writing = asyncio.Event(), asyncio.Event()
    finish_task = parts.store.finish_task

    async def held(*args: Any, **kwargs: Any) -> Task | None:
        writing.set()
        await gate.wait()
        return await finish_task(*args, **kwargs)

    monkeypatch.setattr(parts.store, "finish_task", held)
    return gate, writing


async def test_a_read_while_the_terminal_write_is_under_way_gets_the_written_task(
    parts: Parts, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The outcome is in hand and being made durable: a tasks/get then waits those
    milliseconds and reads `completed`, instead of `working` and a poll more; a write that
    takes too long leaves the read with the status as last written."""
    monkeypatch.setattr(landing_module, "_FINISH_WAIT", 0.2)
    host = await connected()
    # (No poll window: the call's own wait is test_poll_window's.)
    task = await submit(parts, host, TaskPolicy(poll_window_ms=0))
    gate, writing = hold_terminal_writes(parts, monkeypatch)
    landing = parts.runner.landing(task.task_id)
    assert landing is None  # the call runs: nothing to wait for
    call = await host.call()
    host.scripted.answer(call, RESULT)
    await writing.wait()
    late = await parts.runner.current(task, parts.runner.landing(task.task_id))
    assert late is task  # past the wait: as last written
    assert late.status is TaskStatus.WORKING
    reading = asyncio.ensure_future(parts.runner.current(task, parts.runner.landing(task.task_id)))
    # A read whose client goes away meanwhile is cancelled; the others still get theirs.
    leaving = asyncio.ensure_future(parts.runner.current(task, parts.runner.landing(task.task_id)))
    await asyncio.sleep(0.05)
    assert not reading.done()
    leaving.cancel()
    gate.set()
    latest = await reading
    assert latest.status is TaskStatus.COMPLETED
    assert leaving.cancelled()


async def test_the_owners_read_of_a_young_call_waits_for_its_end_and_no_longer_than_its_window(
    parts: Parts,
) -> None:
    host = await connected()
    task = await submit(parts, host, TaskPolicy(poll_window_ms=5000))
    now = task.created_at
    # Another caller's read is not held (it reads, and finds nothing of its own).
    assert await parts.runner.early_end(task.task_id, "someone else", now) is None
    reading = asyncio.ensure_future(parts.runner.early_end(task.task_id, task.owner, now))
    call = await host.call()
    await asyncio.sleep(0.05)
    assert not reading.done()
    host.scripted.answer(call, RESULT)
    async with asyncio.timeout(5):
        ended = await reading
    assert ended is not None and ended.status is TaskStatus.COMPLETED
    longer = await submit(parts, host, TaskPolicy(poll_window_ms=50))
    async with asyncio.timeout(5):
        # The window closed first: the caller reads the task itself, and so do later reads.
        assert await parts.runner.early_end(longer.task_id, longer.owner, now) is None
    assert await parts.runner.early_end(longer.task_id, longer.owner, now) is None
    assert parts.runner.landing(longer.task_id) is None
    # A closed window is forgotten when the next run begins, though its call still runs.
    young = parts.runner._landings._young
    assert longer.task_id in young
    await submit(parts, host, TaskPolicy(poll_window_ms=0))
    assert longer.task_id not in young


async def test_the_owners_read_during_the_terminal_write_waits_for_it_without_a_read(
    parts: Parts, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A poll that comes once the call has ended, its write still under way (milliseconds
    on a busy shared store), is the owner's: it waits for the write, as a read would after
    reading (`current`), and spares the store that read; whatever the window (none here)."""
    monkeypatch.setattr(landing_module, "_FINISH_WAIT", 0.2)
    host = await connected()
    task = await submit(parts, host, TaskPolicy(poll_window_ms=0))
    now = task.created_at
    gate, writing = hold_terminal_writes(parts, monkeypatch)
    host.scripted.answer(await host.call(), RESULT)
    await writing.wait()
    assert await parts.runner.early_end(task.task_id, "someone else", now) is None
    # A write that takes longer than the wait: the caller reads the task itself.
    assert await parts.runner.early_end(task.task_id, task.owner, now) is None
    reading = asyncio.ensure_future(parts.runner.early_end(task.task_id, task.owner, now))
    await asyncio.sleep(0.05)
    assert not reading.done()
    reads = 0
    get_task = parts.store.get_task

    async def counted(*args: Any) -> Task | None:
        nonlocal reads
        reads += 1
        return await get_task(*args)

    monkeypatch.setattr(parts.store, "get_task", counted)
    gate.set()
    async with asyncio.timeout(5):
        ended = await reading
    assert ended is not None and ended.status is TaskStatus.COMPLETED
    assert reads == 0
    # Once landed, nothing is under way: later reads go to the store.
    assert await parts.runner.early_end(task.task_id, task.owner, now) is None


async def test_a_read_begun_before_the_terminal_write_landed_and_answered_after_it_is_terminal(
    parts: Parts, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The write under way is noticed before the read (`landing`): one landing between the
    read and the answer cannot leave a poll that came after the call's end with `working`."""
    host = await connected()
    task = await submit(parts, host)
    gate, writing = hold_terminal_writes(parts, monkeypatch)
    host.scripted.answer(await host.call(), RESULT)
    await writing.wait()
    landing = parts.runner.landing(task.task_id)
    read = await parts.store.get_task(task.task_id)  # the read, before the write lands
    assert read is not None and read.status is TaskStatus.WORKING
    gate.set()
    await host.runs_ended()  # the write has landed: no wake-up is left to wait for
    async with asyncio.timeout(0.5):  # far under _FINISH_WAIT: the landing was heard
        latest = await parts.runner.current(read, landing)
    assert latest.status is TaskStatus.COMPLETED
    await host.runs_ended()
    stored = await parts.store.get_task(task.task_id)
    assert stored is not None and stored.status is TaskStatus.COMPLETED
