"""The task state machine and the one function that maps outcomes to statuses."""

from __future__ import annotations

import pytest

from gateway.protocol.outcome import Outcome
from gateway.tasks.models import TERMINAL, TaskStatus, may_transition, status_for

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
