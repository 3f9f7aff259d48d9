"""Stored questions at their seams: `tasks.inputs.TaskInputs`, the one owner of tasks' input
rows and of where their answers go, on a real SQLite file and a real PostgreSQL database (two
replicas on one database there); and `session.stored_questions.StoredRelay`, which relays
stored rows to a 2025-11-25 session's client. End to end they are proven by the journeys in
test_input_required.py, test_modern_tasks.py, test_reruns.py and test_replicas*.py; here each
rule is pinned where it lives.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import pytest

from gateway.protocol import jsonrpc
from gateway.protocol.questions import default_answer, related_to_task
from gateway.session.stored_questions import StoredRelay
from gateway.session.streams import EventStream, Streams
from gateway.tasks.inputs import TaskInputs, parse_stored_id, stored_id
from gateway.tasks.models import InputRequest, TaskStatus
from gateway.tasks.store import TaskStore
from gateway.upstream import Answer

from .test_store import Backend
from .test_store_inputs import make_task

NOW = datetime(2025, 3, 4, 5, 6, 7, tzinfo=UTC)
SCHEMA = {"type": "object", "properties": {"name": {"type": "string"}}}
QUESTION = {"message": "Your name?", "requestedSchema": SCHEMA}
ANSWER = {"action": "accept", "content": {"name": "Ada"}}


def clock() -> datetime:
    return NOW


@dataclass
class Call:
    """Stands in for the call a task host holds: the seam is what `TaskInputs` tells it, and
    the real calls behind it (a session's, a 2026-07-28 call) have journey tests of their own."""

    open_keys: set[str]
    answered: list[tuple[str, jsonrpc.JsonObject]] = field(default_factory=list)
    declined: list[tuple[str, int]] = field(default_factory=list)
    took_stored: int = 0

    async def answer(self, key: str, response: jsonrpc.JsonObject) -> bool:
        if key not in self.open_keys:
            return False
        self.open_keys.discard(key)
        self.answered.append((key, response))
        return True

    async def decline(self, key: str, error: jsonrpc.ErrorResponse) -> bool:
        if key not in self.open_keys:
            return False
        self.open_keys.discard(key)
        self.declined.append((key, error.error.code))
        return True

    async def take_stored_answers(self) -> None:
        self.took_stored += 1


@pytest.fixture(params=["sqlite", "postgres"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Backend:
    return Backend.of(request, tmp_path)


@pytest.fixture
async def store(backend: Backend) -> AsyncIterator[TaskStore]:
    opened: TaskStore = await backend.open()
    await opened.create_task(make_task("t"))
    yield opened
    await opened.close()


async def ask(inputs: TaskInputs, key: str, task_id: str = "t") -> bool:
    return await inputs.record(task_id, key, "elicitation/create", QUESTION, 7)


async def test_a_recorded_question_is_pending_until_answered_once(store: TaskStore) -> None:
    inputs = TaskInputs(store, clock)
    assert await ask(inputs, "elicitation-1") is True
    [row] = await inputs.pending("t")
    assert (row.key, row.method, row.params, row.upstream_id) == (
        "elicitation-1",
        "elicitation/create",
        QUESTION,
        7,
    )

    assert await inputs.record_answer("t", "elicitation-1", ANSWER) is True
    # A second answer (one that landed on another replica too) is not taken.
    assert await inputs.record_answer("t", "elicitation-1", {"action": "decline"}) is False
    assert await inputs.pending("t") == []
    assert await inputs.answers("t") == {"elicitation-1": ANSWER}


async def test_no_question_is_recorded_for_an_unknown_or_finished_task(store: TaskStore) -> None:
    inputs = TaskInputs(store, clock)
    await store.create_task(make_task("done", status=TaskStatus.COMPLETED))
    assert await ask(inputs, "k", task_id="unknown") is False
    assert await ask(inputs, "k", task_id="done") is False


async def test_a_withdrawn_question_takes_no_answer(store: TaskStore) -> None:
    inputs = TaskInputs(store, clock)
    await ask(inputs, "k")
    await inputs.withdraw("t", "k")
    assert await inputs.pending("t") == []
    assert await inputs.answer("t", "k", ANSWER) is False
    assert await inputs.answers("t") == {}


async def test_an_answer_goes_to_the_call_running_here_and_nowhere_once_it_ended(
    store: TaskStore,
) -> None:
    inputs = TaskInputs(store, clock)
    await ask(inputs, "k")
    call = Call({"k"})
    inputs.running("t", call)

    assert await inputs.answer("t", "k", ANSWER) is True
    assert call.answered == [("k", ANSWER)]
    assert await inputs.answer("t", "k", ANSWER) is False  # taken once

    inputs.ended("t")
    await ask(inputs, "k2")
    # No call here: the answer waits in the store for the replica running the call.
    assert await inputs.answer("t", "k2", ANSWER) is True
    assert call.answered == [("k", ANSWER)]
    assert await inputs.answers("t") == {"k2": ANSWER}


async def test_a_refusal_reaches_only_the_call_running_here(store: TaskStore) -> None:
    inputs = TaskInputs(store, clock)
    await ask(inputs, "k")
    refusal = jsonrpc.error_response(stored_id("t", "k"), -32600, "no")

    # Nowhere to relay it: an error cannot wait in the store as an answer.
    assert await inputs.settle("t", "k", refusal) is False
    call = Call({"k"})
    inputs.running("t", call)
    assert await inputs.settle("t", "k", refusal) is True
    assert call.declined == [("k", -32600)]


@pytest.mark.parametrize("key", ["", "nope", "task-input/t/k", "../k", "k\x00", "k" * 5000])
async def test_keys_no_question_has_are_ignored(store: TaskStore, key: str) -> None:
    """SEP-2663: an answer under a key that names no open request is ignored, not an error;
    a key with a NUL (which PostgreSQL's text cannot hold) never reaches the store."""
    inputs = TaskInputs(store, clock)
    await ask(inputs, "k")
    assert await inputs.answer("t", key, ANSWER) is False
    assert await inputs.answers("t") == {}
    call = Call({"k\x00"})
    inputs.running("t", call)
    assert await inputs.answer("t", "k\x00", ANSWER) is False
    assert call.answered == []


async def test_answers_stored_elsewhere_reach_the_calls_running_here(store: TaskStore) -> None:
    inputs = TaskInputs(store, clock)
    here, other = Call({"k"}), Call({"k"})
    inputs.running("t", here)
    inputs.running("other", other)

    await inputs.answered_elsewhere("t")
    assert (here.took_stored, other.took_stored) == (1, 0)
    await inputs.answered_elsewhere(None)  # the news may have been lost: every call looks
    assert (here.took_stored, other.took_stored) == (2, 1)
    await inputs.answered_elsewhere("not-running-here")
    assert (here.took_stored, other.took_stored) == (2, 1)


async def test_two_replicas_one_answer_wins_and_the_runner_finds_it(
    backend: Backend,
) -> None:
    """Replica A runs the call and asked; the client's answer lands on replica B, where no
    call runs: it is stored there and read on A; a second answer on A then loses."""
    if backend.url is None:
        pytest.skip("replicas share PostgreSQL only")
    a_store, b_store = await backend.open("replica-a"), await backend.open("replica-b")
    try:
        await a_store.create_task(make_task("t"))
        on_a, on_b = TaskInputs(a_store, clock), TaskInputs(b_store, clock)
        await ask(on_a, "k")
        on_a.running("t", Call({"k"}))

        assert await on_b.answer("t", "k", ANSWER) is True
        assert await on_a.answers("t") == {"k": ANSWER}
        assert await on_a.record_answer("t", "k", {"action": "decline"}) is False
    finally:
        await a_store.close()
        await b_store.close()


def test_a_stored_id_names_its_task_and_key_and_nothing_else_parses() -> None:
    assert parse_stored_id(stored_id("abc_-123", "elicitation-4")) == ("abc_-123", "elicitation-4")
    for hostile in [
        None,
        7,
        "elicitation-4",
        "task-input/",
        "task-input/abc",
        "task-input/abc/",
        "task-input//k",
        "task-input/abc/k/extra",
        ["task-input/abc/k"],
    ]:
        assert parse_stored_id(hostile) is None, hostile


def test_the_default_answer_dismisses_an_elicitation_and_fails_anything_else() -> None:
    dismissed = default_answer(3, "elicitation/create", "nobody answered")
    assert isinstance(dismissed, jsonrpc.Response)
    assert (dismissed.id, dismissed.result) == (3, {"action": "cancel"})
    failed = default_answer("s-1", "sampling/createMessage", "nobody answered")
    assert isinstance(failed, jsonrpc.ErrorResponse)
    assert (failed.id, failed.error.code, failed.error.message) == (
        "s-1",
        -32603,
        "nobody answered",
    )


def test_a_tasks_question_carries_the_related_task_meta() -> None:
    """Spec (tasks): such a request "MUST include the io.modelcontextprotocol/related-task
    metadata"."""
    request = jsonrpc.Request(jsonrpc="2.0", id=1, method="roots/list", params={"_meta": {"a": 1}})
    marked = related_to_task(request, "t")
    assert marked.params == {
        "_meta": {"a": 1, "io.modelcontextprotocol/related-task": {"taskId": "t"}}
    }
    assert request.params == {"_meta": {"a": 1}}  # a copy: the original is left alone


# The session's relay of stored rows.


def row(key: str, task_id: str = "t") -> InputRequest:
    return InputRequest(
        task_id=task_id,
        key=key,
        method="elicitation/create",
        params=QUESTION,
        upstream_id=7,
        created_at=NOW,
    )


class Settled:
    def __init__(self, result: bool = True) -> None:
        self.calls: list[tuple[str, str, Answer]] = []
        self.result = result

    async def __call__(self, task_id: str, key: str, answer: Answer) -> bool:
        self.calls.append((task_id, key, answer))
        return self.result


def first(stream: EventStream) -> jsonrpc.JsonObject:
    event = stream.first_event()
    assert event is not None
    message: jsonrpc.JsonObject = json.loads(event)
    return message


async def test_a_stored_row_is_relayed_once_under_its_id_with_the_related_task_meta() -> None:
    streams = Streams(64, "s")
    relay, settle = StoredRelay(streams, "s"), Settled()
    result = streams.open_result("t")

    relay.relay([row("k")], result, settle, asked_here=lambda _: False)
    result.attached = True  # the client reads it
    relay.relay([row("k")], result, settle, asked_here=lambda _: False)

    assert result.pushed == 1
    message = first(result)
    assert message["id"] == stored_id("t", "k")
    assert message["method"] == "elicitation/create"
    assert message["params"]["_meta"] == {"io.modelcontextprotocol/related-task": {"taskId": "t"}}


async def test_a_row_left_unread_goes_again_and_one_asked_here_never() -> None:
    streams = Streams(64, "s")
    relay, settle = StoredRelay(streams, "s"), Settled()
    earlier = streams.open_result("t")
    relay.relay([row("k"), row("mine")], earlier, settle, lambda i: i == stored_id("t", "mine"))
    # Nobody read the first stream (the client gave up that tasks/result): a new one gets it.
    second = streams.open_result("t")
    relay.relay([row("k")], second, settle, asked_here=lambda _: False)

    assert (earlier.pushed, first(earlier)["id"]) == (1, stored_id("t", "k"))
    assert (second.pushed, first(second)["id"]) == (1, stored_id("t", "k"))


async def test_the_answer_to_a_relayed_row_is_settled_once_and_not_relayed_again() -> None:
    streams = Streams(64, "s")
    relay, settle = StoredRelay(streams, "s"), Settled()
    stream = streams.open_result("t")
    relay.relay([row("k")], stream, settle, asked_here=lambda _: False)
    answer = jsonrpc.Response(jsonrpc="2.0", id=stored_id("t", "k"), result=ANSWER)

    assert await relay.settle(answer) is True
    assert await relay.settle(answer) is False  # a repeat is not this relay's any more
    assert [(t, k) for t, k, _ in settle.calls] == [("t", "k")]
    # Until the task ends, its row (pending a moment longer in the store) is not asked again.
    later = streams.open_result("t")
    relay.relay([row("k")], later, settle, asked_here=lambda _: False)
    assert later.pushed == 0

    relay.forget("t")
    relay.relay([row("k")], later, settle, asked_here=lambda _: False)
    assert later.pushed == 1


async def test_an_answer_nobody_relayed_is_not_the_relays() -> None:
    relay = StoredRelay(Streams(64, "s"), "s")
    for down_id in [stored_id("t", "k"), 5, "other"]:
        answer = jsonrpc.Response(jsonrpc="2.0", id=down_id, result=ANSWER)
        assert await relay.settle(answer) is False
