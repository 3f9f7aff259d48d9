"""The task state machine, the one function that maps outcomes to statuses, and how a
2026-07-28 reader sees a stored status."""

from __future__ import annotations

import base64
import dataclasses
import time
from datetime import UTC, datetime

import pytest

from gateway.protocol import jsonrpc
from gateway.protocol.outcome import Outcome
from gateway.tasks.creation import new_task, new_task_id
from gateway.tasks.models import (
    INPUT_MESSAGE,
    INPUT_MESSAGE_2026,
    TERMINAL,
    Task,
    TaskStatus,
    may_transition,
    status_2026,
    status_for,
)

WORKING, INPUT, DONE, FAILED, CANCELLED = (
    TaskStatus.WORKING,
    TaskStatus.INPUT_REQUIRED,
    TaskStatus.COMPLETED,
    TaskStatus.FAILED,
    TaskStatus.CANCELLED,
)


@pytest.mark.parametrize(
    ("current", "allowed"),
    [
        (WORKING, {INPUT, DONE, FAILED, CANCELLED}),
        (INPUT, {WORKING, DONE, FAILED, CANCELLED}),
        (DONE, set()),
        (FAILED, set()),
        (CANCELLED, set()),
    ],
)
def test_only_the_spec_lifecycle_transitions_are_allowed(
    current: TaskStatus, allowed: set[TaskStatus]
) -> None:
    # "Tasks with a completed, failed, or cancelled status are in a terminal state and MUST
    # NOT transition to any other status."
    assert {new for new in TaskStatus if may_transition(current, new)} == allowed


def test_completed_failed_and_cancelled_are_the_terminal_statuses() -> None:
    # tasks spec: "completed, failed, or cancelled status are in a terminal state".
    assert TERMINAL == {DONE, FAILED, CANCELLED}
    assert [s for s in TaskStatus if s.terminal] == [DONE, FAILED, CANCELLED]


def test_is_error_tool_result_makes_the_task_failed_with_its_text() -> None:
    # "For tool calls specifically, this includes cases where the tool call result has
    # isError set to true."
    result = {"content": [{"type": "text", "text": "disk full"}], "isError": True}
    assert status_for(Outcome(kind="result", body=result)) == (FAILED, "disk full")


def test_plain_result_completes_and_json_rpc_error_fails_with_its_message() -> None:
    ok = {"content": [{"type": "text", "text": "fine"}], "isError": False}
    assert status_for(Outcome(kind="result", body=ok)) == (DONE, None)
    assert status_for(Outcome.error(-32000, "rate limited")) == (FAILED, "rate limited")
    assert status_for(Outcome(kind="result", body={"isError": True, "content": []})) == (
        FAILED,
        "the tool reported an error",
    )


NOW = datetime(2026, 7, 28, tzinfo=UTC)
TOOL_ERROR = Outcome(kind="result", body={"content": [], "isError": True})
RPC_ERROR = Outcome.error(-32603, "boom")
RESULT = Outcome(kind="result", body={"content": []})


def stored(status: TaskStatus, message: str | None = None) -> Task:
    return Task(
        task_id="t",
        owner="o",
        route="r",
        tool="x",
        status=status,
        status_message=message,
        created_at=NOW,
        updated_at=NOW,
        ttl_ms=None,
        poll_interval_ms=1000,
    )


@pytest.mark.parametrize(
    ("task", "outcome", "seen"),
    [
        pytest.param(stored(WORKING, "3/10"), None, (WORKING, "3/10"), id="progress"),
        pytest.param(stored(WORKING), None, (WORKING, None), id="working"),
        # The runner's wait, in the extension's words (tasks/result does not exist there).
        pytest.param(stored(INPUT, INPUT_MESSAGE), None, (INPUT, INPUT_MESSAGE_2026), id="wait"),
        pytest.param(stored(INPUT, "asking"), None, (INPUT, "asking"), id="progress-while-waiting"),
        pytest.param(stored(DONE), RESULT, (DONE, None), id="completed"),
        # SEP-2663: `completed` → `result` (the original result, including `isError:true` tool
        # results); `failed` → `error` (JSON-RPC errors only).
        pytest.param(stored(FAILED, "bad input"), TOOL_ERROR, (DONE, None), id="tool-error"),
        pytest.param(stored(FAILED, "boom"), RPC_ERROR, (FAILED, "boom"), id="rpc-error"),
        pytest.param(stored(FAILED, "lost"), None, (FAILED, "lost"), id="failed-no-outcome"),
        pytest.param(stored(CANCELLED, "by request"), None, (CANCELLED, "by request"), id="cancel"),
    ],
)
def test_a_2026_reader_sees_the_status_by_the_extension_rules(
    task: Task, outcome: Outcome | None, seen: tuple[TaskStatus, str | None]
) -> None:
    assert status_2026(task, outcome) == seen


def _new(task_id: str) -> Task:
    request = jsonrpc.Request(id=1, method="tools/call", params={"name": "slow", "task": {}})
    return new_task(
        request,
        task_id=task_id,
        now=NOW,
        owner="session:s",
        route="demo",
        ttl=1000,
        poll_interval_ms=1000,
        generation="2025-11-25",
        repeatable=False,
    )


def test_a_task_is_frozen_and_a_changed_copy_leaves_it_as_it_was() -> None:
    # The store hands the same Task to every reader of a task it keeps (a finished task's
    # copy, the row a run last wrote): a reader that could change it would change it for all.
    first = _new("a")
    with pytest.raises(dataclasses.FrozenInstanceError):
        first.status = TaskStatus.COMPLETED  # type: ignore[misc]
    changed = dataclasses.replace(first, status_message="3/10", attempt=2)
    assert (changed.status_message, changed.attempt) == ("3/10", 2)
    assert (first.status_message, first.attempt) == (None, 1)
    # A hundred thousand may be in flight: a task keeps no dict of its own.
    assert not hasattr(first, "__dict__")


def test_task_ids_sort_by_age_and_each_holds_144_random_bits() -> None:
    # "Task IDs MUST be unique among all tasks controlled by the receiver", and without
    # context-binding "cryptographically secure ... with enough entropy to prevent guessing".
    before = time.time_ns() // 1_000_000
    ids = [new_task_id() for _ in range(1000)]
    after = time.time_ns() // 1_000_000
    assert len(set(ids)) == len(ids)
    made_at = [task_id[:11] for task_id in ids]
    assert made_at == sorted(made_at)
    for task_id in ids:
        made, randomness = int(task_id[:11], 16), task_id[11:]
        assert before <= made <= after
        assert len(base64.urlsafe_b64decode(randomness)) * 8 == 144
    # The same millisecond: the random part alone tells them apart, in no order.
    assert len({i[11:] for i in ids}) == len(ids)
