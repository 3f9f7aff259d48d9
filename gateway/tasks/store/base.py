"""`TaskStore`: the one interface every backend implements and every caller types against.

It speaks only `tasks.models`, so the runner, the task APIs, the session registry and the
health check never learn which database holds their rows (DESIGN.md, decisions 5 and 9).
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from datetime import datetime
from typing import Protocol

from gateway.protocol.jsonrpc import JsonObject, RequestId
from gateway.protocol.outcome import Outcome
from gateway.tasks.history import TaskHistory
from gateway.tasks.models import (
    AttemptCall,
    InputRequest,
    SessionRecord,
    Task,
    TaskFilter,
    TaskStatus,
)


class TaskStore(Protocol):
    """Durable tasks, their outcomes and sessions. Each write is committed before it returns.

    Every member has a caller in production: the runner (task writes, attempts, recovery,
    expiry), the task and admin APIs (reads, answers, purges), a running call's questions
    (input requests), the session registry (session records), the replicas' lease and wake-ups
    (`renew_lease`, `watch`), list cursors (`secret`), the health check (`check_writable`,
    `last_commit`) and `store erase` (`erase_principal`).

    With several replicas on one database (PostgreSQL), each live task has a runner: the
    replica that created or claimed it (`claim_orphans`). The runner's writes (`update_task`,
    `note_task`, `finish_task` but for `cancelled`, `add_input`, `withdraw_inputs`,
    `begin_attempt`, `note_upstream_call`, `fail_running`) take effect only while this replica
    is that runner, and otherwise answer as for an unknown task; a client's writes (a cancel,
    an answer) and every read take effect on any replica. With SQLite, one process has the
    file, and runs every task in it.
    """

    async def create_task(
        self, task: Task, max_active: int | None = None, request: JsonObject | None = None
    ) -> bool:
        """Insert a task, durable on return. With `max_active`, only while its owner has fewer
        live tasks than that, checked in the same transaction; False if refused. `request` is
        what a repeatable task runs again from (`get_request`), kept until its terminal write.

        Raises: ValueError if `request` is given for a task that is not repeatable (no other
        task's arguments are ever kept).
        """

    async def get_task(self, task_id: str) -> Task | None:
        """Any owner's task, expired or not: callers decide what they may see."""

    async def find_task(self, task_id: str, owner: str) -> Task | None:
        """The owner's task, expired or not; None for an unknown id and another owner's alike,
        found by one indexed query either way so that the two cannot be told apart by time."""

    async def list_tasks(
        self, owner: str, after: tuple[datetime, str] | None, limit: int, now: datetime
    ) -> list[Task]:
        """Up to `limit` of the owner's unexpired tasks past `after`, by (created_at, task_id)."""

    async def query_tasks(self, choice: TaskFilter) -> list[Task]:
        """Every owner's tasks `choice` picks, expired or not, oldest first (by created_at,
        then task_id), at most `choice.limit` of them: what an operator sees."""

    async def purge_tasks(self, choice: TaskFilter) -> list[str]:
        """Deletes up to `choice.limit` of the finished tasks `choice` picks, oldest first
        (never a live one: whatever `choice.status` says), their outcomes with them; their ids."""

    async def update_task(
        self, task_id: str, status: TaskStatus, status_message: str | None, now: datetime
    ) -> Task | None:
        """A lifecycle move or a message-only update; None if the task is unknown or may not move.

        Raises: ValueError if `status` is terminal (that is `finish_task`'s job).
        """

    async def note_task(self, task_id: str, status_message: str, now: datetime) -> Task | None:
        """Set a running task's statusMessage, leaving its status as it is; None if terminal.

        Progress uses this: a message must never move a task back from input_required. The
        message is kept as the task's latest progress too (`get_history`).
        """

    async def finish_task(
        self,
        task_id: str,
        status: TaskStatus,
        status_message: str | None,
        outcome: Outcome | None,
        now: datetime,
    ) -> Task | None:
        """The one terminal write, with its outcome; None if the task is unknown or already final.
        The task's pending input requests are withdrawn, and its stored request and upstream
        call (`get_request`, `get_upstream_call`) deleted, in the same transaction.

        Raises: ValueError if `status` is not terminal.
        """

    async def get_outcome(self, task_id: str) -> Outcome | None: ...

    async def get_history(self, task_id: str) -> TaskHistory | None:
        """What an operator reads of a task beyond its row (any owner's; None if unknown):
        every status move and re-run appends a change in the very statement that makes it,
        the latest `HISTORY_KEPT` kept; `note_task` keeps its message as the progress."""

    async def erase_principal(self, principal: str) -> tuple[int, int]:
        """Delete every task of `principal` on any route (their results, questions and kept
        requests go with them) and every session record of theirs; the counts of both."""

    async def stored_bytes(self, owner: str) -> int:
        """The bytes `owner`'s tasks keep: their results, and the kept requests of tools safe
        to repeat."""

    async def add_input(self, request: InputRequest) -> bool:
        """Record a pending input request of a live task; False if the task is unknown or
        terminal, or the key is taken (keys are never reused within a task)."""

    async def pending_inputs(self, task_id: str) -> list[InputRequest]:
        """The task's unanswered input requests, oldest first."""

    async def answered_inputs(self, task_id: str) -> dict[str, JsonObject]:
        """The task's answered input requests: each key and the answer it got. With replicas,
        an answer lands wherever the client sent it; the replica running the call reads it
        here to send it upstream."""

    async def answer_input(
        self, task_id: str, key: str, response: JsonObject, now: datetime
    ) -> InputRequest | None:
        """Mark a pending input request answered, keeping `response`; None if the key is
        unknown, already answered or withdrawn (the extension says such answers are ignored)."""

    async def withdraw_inputs(
        self, task_id: str, now: datetime, keys: Collection[str] | None = None
    ) -> list[InputRequest]:
        """The task's still-pending input requests named by `keys` (all when None) are
        withdrawn: its call ended, or a question got the default answer after
        `tasks.input_timeout_seconds`. Returns those it withdrew."""

    async def delete_expired(self, now: datetime) -> list[str]:
        """Deletes tasks (and outcomes) whose expiry is at or before `now`; returns their ids."""

    async def fail_running(
        self, task_ids: Collection[str], message: str, now: datetime
    ) -> list[Task]:
        """Those of `task_ids` still live fail with `message` and an internal-error outcome,
        a terminal write as `finish_task`'s, all in one transaction; returns the tasks it moved
        (a later terminal write is refused). Used at shutdown, and at start-up for the tasks
        `recovery.after_loss` fails."""

    async def get_request(self, task_id: str) -> JsonObject | None:
        """The request a repeatable task was created with; None for any other task, and once
        the task has ended (the terminal write deletes it)."""

    async def begin_attempt(
        self, task_id: str, attempt: int, status_message: str, now: datetime
    ) -> Task | None:
        """Record that run `attempt` of a live task starts, durable before the run does: the
        task is `working` with `status_message`, and its pending input requests (the earlier
        attempt's questions) are withdrawn, in one transaction. None, writing nothing, if the
        task is unknown or terminal or its attempt is already `attempt` or later."""

    async def note_upstream_call(
        self, task_id: str, session_id: str | None, request_id: RequestId
    ) -> None:
        """Record the upstream request of a live task's current attempt (an HTTP upstream's
        `Mcp-Session-Id`, None without one, and the request's id), replacing the one noted
        before; nothing for an unknown or terminal task."""

    async def get_upstream_call(self, task_id: str) -> AttemptCall | None:
        """The upstream request last noted for a live task, which may belong to an earlier
        attempt than the task's (`begin_attempt` keeps it, so that a later process can still
        cancel that call); None if none was noted, and once the task has ended."""

    async def claim_orphans(self) -> list[Task]:
        """Every live task no running process runs, of any owner, now this process's to settle,
        oldest first: at start-up (or a takeover), the tasks a lost process left running.

        SQLite (one process per file, locked): every `working` or `input_required` task.
        PostgreSQL: the live tasks whose runner's lease has expired or whose runner's row is
        gone (it stopped), made this replica's in one statement so that no task is claimed
        twice; never a task this replica runs. Also forgets the replicas long dead that run
        nothing.
        """

    async def renew_lease(self) -> int:
        """PostgreSQL: this replica's lease runs `lease_seconds` from now on the database's
        clock (one statement; also done on opening); returns how many replicas hold a lease
        that runs now, this one included, by that clock. SQLite: nothing, one process per
        file (1)."""

    async def watch(self, changed: Callable[[str | None], None]) -> None:
        """Until `close()`, `changed(task_id)` hears of the writes that are news here: a status
        or attempt moved, a question answered or withdrawn (not a statusMessage alone), by
        another replica or an operator, to a task this process runs or has heeded
        (`heed_task`); and every task deleted. (It may hear of more: news sent for one replica
        reaches all.) `changed(None)`: news may have been lost (the listener reconnected),
        re-read whatever is waited on. SQLite: nothing, one process per file.

        Raises: RuntimeError if the store is watched already; what the backend raises when it
        cannot start listening.
        """

    async def heed_task(self, task_id: str) -> Task | None:
        """This process is about to wait for `task_id`'s changes, and no call of it runs here:
        from now on every write to it reaches `watch` here, whoever writes it. Returns the task
        as it is from then on (with whatever was written before), None if there is none.
        PostgreSQL marks the task's row for it (a write); SQLite reads the task, since no
        other process writes to the file."""

    async def save_session(self, record: SessionRecord) -> None:
        """Insert or update a record; an update keeps the record's last-seen time."""

    async def update_session(self, record: SessionRecord) -> bool:
        """Rewrite an existing record (never bring back one deleted meanwhile: the session
        was ended, maybe by another replica); False if there was none."""

    async def get_session(self, session_id: str, fresh: bool = False) -> SessionRecord | None:
        """`fresh`: read from the database itself, not from a copy a replica keeps (which
        hears of a record deleted on another replica only within a notification)."""

    async def query_sessions(
        self, route: str | None, principal: str | None, limit: int
    ) -> list[SessionRecord]:
        """The session records of `route` and `principal` (None: any), oldest first, at most
        `limit`: what an operator sees."""

    async def caller_sessions(self, route: str, principal: str, limit: int) -> list[str]:
        """The ids of `principal`'s session records on `route`, least recently seen first, at
        most `limit`: with replicas, the sessions the whole deployment holds for a caller."""

    async def delete_session(self, session_id: str) -> None: ...

    async def prune_sessions(
        self, live: Collection[str], now: datetime, idle_before: datetime
    ) -> list[str]:
        """Mark the `live` sessions seen at `now`, then delete every record last seen before
        `idle_before`; returns the deleted ids. One transaction."""

    async def secret(self) -> bytes:
        """32 random bytes made once per database, for signing list cursors."""

    async def check_writable(self) -> None:
        """One durable write, for health checks. Raises if it cannot."""

    @property
    def last_commit(self) -> float:
        """`time.monotonic()` of the latest successful commit (0.0 before the first; -inf
        after the store was found unreachable, until the next commit)."""

    async def close(self) -> None: ...
