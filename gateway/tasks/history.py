"""What a task keeps for its operators beside its row: its latest status changes and its latest
progress, read by the admin API and the console (`TaskStore.get_history`).

Each change is appended by the very statement that moves the task (no write of its own), and
only the latest `HISTORY_KEPT` are kept, so a task that asks a thousand questions costs its row
the same as one that asks a few.
"""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, ConfigDict

from gateway.tasks.models import TaskStatus

#: Status changes a task keeps: the latest ones, the oldest dropped beyond (and counted).
HISTORY_KEPT = 32


class StatusChange(BaseModel):
    """One move of a task's status (or a run begun again: `attempt`), with the statusMessage
    it came with, as an operator reads it."""

    model_config = ConfigDict(frozen=True)

    status: TaskStatus
    at: datetime
    message: str | None = None
    #: The run that began here, for a run begun again after a lost process; else None.
    attempt: int | None = None


class TaskHistory(BaseModel):
    """What a task keeps for its operators beside its row: its latest status changes, oldest
    first, and the latest progress written for it (`tasks.progress`)."""

    model_config = ConfigDict(frozen=True)

    changes: tuple[StatusChange, ...] = ()
    #: Earlier changes no longer kept (beyond `HISTORY_KEPT`); None for a task made before
    #: the store kept histories, whose earlier changes are unknown.
    dropped: int | None = 0
    progress: str | None = None
    progress_at: datetime | None = None
