"""The one decision after a lost process: which tasks run again, and why the others fail."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from gateway.tasks.models import Task, TaskStatus
from gateway.tasks.recovery import INTERRUPTED_MESSAGE, Bounds, Fail, Rerun, after_loss

T0 = datetime(2025, 3, 4, 5, 6, 7, tzinfo=UTC)
MINUTE = timedelta(minutes=1)
#: max_attempts 3, a 10-minute time limit, and tasks with a 20-minute ttl below.
POLICY = Bounds(max_attempts=3, time_limit_seconds=600)


def make_task(
    *,
    repeatable: bool = True,
    attempt: int = 1,
    status: TaskStatus = TaskStatus.WORKING,
    ttl_ms: int | None = 20 * 60_000,
) -> Task:
    return Task(
        task_id="t",
        owner="alice",
        route="files",
        tool="slow_tool",
        status=status,
        created_at=T0,
        updated_at=T0,
        ttl_ms=ttl_ms,
        poll_interval_ms=500,
        repeatable=repeatable,
        attempt=attempt,
    )


RERUN_2 = Rerun(2, "restarted after the gateway stopped: attempt 2 of 3", time_left=540.0)
NOT_AGAIN = f"{INTERRUPTED_MESSAGE}; not run again"


@pytest.mark.parametrize(
    ("task", "now", "policy", "decision"),
    [
        pytest.param(make_task(), T0 + MINUTE, POLICY, RERUN_2, id="first-attempt-reruns"),
        pytest.param(
            make_task(status=TaskStatus.INPUT_REQUIRED),
            T0 + MINUTE,
            POLICY,
            RERUN_2,
            id="input-required-reruns",
        ),
        pytest.param(
            make_task(attempt=2),
            T0 + 2 * MINUTE,
            POLICY,
            Rerun(3, "restarted after the gateway stopped: attempt 3 of 3", time_left=480.0),
            id="second-attempt-reruns-as-the-last",
        ),
        pytest.param(
            make_task(repeatable=False),
            T0 + MINUTE,
            POLICY,
            Fail(INTERRUPTED_MESSAGE),
            id="not-repeatable-fails-as-before",
        ),
        pytest.param(
            make_task(attempt=3),
            T0 + MINUTE,
            POLICY,
            Fail(f"{NOT_AGAIN} after 3 attempts"),
            id="attempts-used-up",
        ),
        pytest.param(
            make_task(attempt=2),
            T0 + MINUTE,
            Bounds(max_attempts=1, time_limit_seconds=600),
            Fail(f"{NOT_AGAIN} after 2 attempts"),
            id="max-attempts-lowered-since",
        ),
        pytest.param(
            make_task(),
            T0 + 10 * MINUTE,
            POLICY,
            Fail(f"{NOT_AGAIN} past its time limit (tasks.time_limit_seconds)"),
            id="time-limit-counts-from-creation",
        ),
        pytest.param(
            make_task(ttl_ms=5 * 60_000),
            T0 + 5 * MINUTE,
            POLICY,
            Fail(f"{NOT_AGAIN} past its ttl"),
            id="ttl-counts-from-creation",
        ),
        pytest.param(
            make_task(ttl_ms=None),
            T0 + timedelta(days=30),
            Bounds(max_attempts=3, time_limit_seconds=None),
            Rerun(2, "restarted after the gateway stopped: attempt 2 of 3", time_left=None),
            id="no-time-limit-and-no-ttl-never-run-out",
        ),
        pytest.param(
            make_task(status=TaskStatus.COMPLETED),
            T0 + MINUTE,
            POLICY,
            Fail(INTERRUPTED_MESSAGE),
            id="terminal-is-never-rerun",
        ),
    ],
)
def test_a_lost_task_runs_again_only_when_repeatable_and_within_its_bounds(
    task: Task, now: datetime, policy: Bounds, decision: Rerun | Fail
) -> None:
    assert after_loss(task, now, policy) == decision


def test_the_decision_reads_repeatable_from_the_task_not_the_current_config() -> None:
    # Whether a task repeats was decided when it was made: the bounds cannot change it.
    assert isinstance(after_loss(make_task(), T0, POLICY), Rerun)
    assert after_loss(make_task(repeatable=False), T0, POLICY) == Fail(INTERRUPTED_MESSAGE)


def test_every_failure_starts_with_the_message_of_an_interrupted_task() -> None:
    lost = [make_task(repeatable=False), make_task(attempt=3), make_task(ttl_ms=1)]

    decisions = [after_loss(task, T0 + MINUTE, POLICY) for task in lost]

    assert all(isinstance(d, Fail) and d.message.startswith(INTERRUPTED_MESSAGE) for d in decisions)


def test_a_task_not_run_again_fails_with_the_text_clients_already_see() -> None:
    assert INTERRUPTED_MESSAGE == "interrupted: gateway restarted"
