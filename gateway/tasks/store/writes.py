"""What both backends' writes share: the checks of their arguments, the statuses each move
may start from, the history entry it appends, and the outcome of a task failed while it ran.

A backend checks before it writes, so a refused argument writes nothing; then its move is
conditional on the task's status being one of those given here, in the statement's WHERE,
so that check and write are one statement and a terminal task never moves again.
"""

from __future__ import annotations

import json
from datetime import datetime

from gateway.protocol.errors import INTERNAL_ERROR
from gateway.protocol.jsonrpc import JsonObject
from gateway.protocol.outcome import Outcome
from gateway.tasks.models import Task, TaskStatus, epoch_us, sources_of

#: The characters of a statusMessage a history entry keeps: an upstream's error message may
#: be long, and the row keeps it whole already.
_MESSAGE_KEPT = 500


def change(
    status: TaskStatus, now: datetime, message: str | None, attempt: int | None = None
) -> str:
    """A history entry as each backend's write appends it to the task's row (JSON text, as
    `rows.history_from_row` reads it back).

    Written out as `json.dumps` writes the object, character for character: the encoder's
    walk of a dict cost each write some 10,000 instructions, two writes a task. Only the
    message is free text, and `json.dumps` of a string alone escapes it as that walk would."""
    entry = f'{{"status": "{status.value}", "at": {epoch_us(now)}'
    if message is not None:
        entry += f', "message": {json.dumps(message[:_MESSAGE_KEPT])}'
    if attempt is not None:
        entry += f', "attempt": {int(attempt)}'
    return entry + "}"


def check_request(task: Task, request: JsonObject | None) -> None:
    """Raises: ValueError if `request` is given for a task that is not repeatable (no other
    task's arguments are ever kept)."""
    if request is not None and not task.repeatable:
        raise ValueError("only a repeatable task's request is kept")


def update_sources(status: TaskStatus) -> tuple[TaskStatus, ...]:
    """The statuses `update_task` moves a task to `status` from: `status` itself (a
    message-only update) and those that may move to it.

    Raises: ValueError if `status` is terminal (that is `finish_task`'s job).
    """
    if status.terminal:
        raise ValueError(f"{status} is terminal: use finish_task")
    return (status, *sources_of(status))


def finish_sources(status: TaskStatus) -> tuple[TaskStatus, ...]:
    """The statuses `finish_task` ends a task in `status` from.

    Raises: ValueError if `status` is not terminal.
    """
    if not status.terminal:
        raise ValueError(f"{status} is not terminal: use update_task")
    return sources_of(status)


def failure(message: str) -> Outcome:
    """The outcome `fail_running` gives each task it fails: an internal error, `message`."""
    return Outcome.error(INTERNAL_ERROR, message)
