"""`TaskInputs`: the one owner of tasks' stored questions, and of where their answers go.

An upstream asks its questions (elicitation, sampling, roots) in the middle of a call, on the
process that runs the call; the client's answer may come to any process. Wherever a question
must outlive the request or replica that heard it, it is an input row in the store, written
here before the task shows `input_required` (a reader that sees the status finds the row):

* a 2026-07-28 task's questions, always: `tasks/get` shows them as `inputRequests` and
  `tasks/update` answers them by key (`calls.task_host`);
* a re-run task's, which has no client session of its own (the same host);
* with replicas, a 2025-11-25 session's task questions as well (`session.questions`), so that
  a `tasks/result` on another replica can relay them, under ids that say which task and
  question they are (`stored_id`), and an answer is understood wherever it lands.

The call's process registers an `AnswerHost` per task while the call runs (`running`). An
answer given on this process goes straight to it (`settle`); one that lands on another
replica is stored, and the call's process hears of it (`answered_elsewhere`, from the store's
wake-ups and every lease round) and sends it upstream. This module knows no wire: each
generation's front end turns its messages into these calls.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Protocol

from gateway.protocol import jsonrpc
from gateway.tasks.models import InputRequest, names_nothing_stored
from gateway.tasks.store import TaskStore

#: The downstream id of a question kept in the store: it names the task and the question.
_STORED_PREFIX = "task-input/"


def stored_id(task_id: str, key: str) -> str:
    return f"{_STORED_PREFIX}{task_id}/{key}"


def parse_stored_id(down_id: object) -> tuple[str, str] | None:
    """(task id, key) of an id made by `stored_id`, else None. Neither holds a '/': task ids
    are URL-safe base64, and keys are made by the gateway."""
    if not isinstance(down_id, str) or not down_id.startswith(_STORED_PREFIX):
        return None
    task_id, slash, key = down_id[len(_STORED_PREFIX) :].partition("/")
    if not task_id or not slash or not key or "/" in key or names_nothing_stored(down_id):
        return None
    return task_id, key


class AnswerHost(Protocol):
    """Where the answers to a running task's questions go: the call, on this process."""

    async def answer(self, key: str, response: jsonrpc.JsonObject) -> bool: ...

    async def decline(self, key: str, error: jsonrpc.ErrorResponse) -> bool: ...

    async def take_stored_answers(self) -> None: ...


class TaskInputs:
    """Tasks' questions as rows in the store, and the calls running here that await them."""

    def __init__(self, store: TaskStore, clock: Callable[[], datetime]) -> None:
        self._store = store
        self._clock = clock
        self._hosts: dict[str, AnswerHost] = {}

    # The rows.

    async def record(
        self,
        task_id: str,
        key: str,
        method: str,
        params: jsonrpc.JsonObject,
        upstream_id: jsonrpc.RequestId,
    ) -> bool:
        """Write the question; False if the task ended meanwhile."""
        row = InputRequest(
            task_id=task_id,
            key=key,
            method=method,
            params=params,
            upstream_id=upstream_id,
            created_at=self._clock(),
        )
        return await self._store.add_input(row)

    async def record_answer(self, task_id: str, key: str, response: jsonrpc.JsonObject) -> bool:
        """Settle the row with the client's answer; False if it was not open (unknown, or
        settled already: an answer that landed on another replica came first)."""
        return await self._store.answer_input(task_id, key, response, self._clock()) is not None

    async def withdraw(self, task_id: str, key: str) -> None:
        await self._store.withdraw_inputs(task_id, self._clock(), [key])

    async def answers(self, task_id: str) -> dict[str, jsonrpc.JsonObject]:
        """The answers stored for the task's questions (by any replica)."""
        return await self._store.answered_inputs(task_id)

    async def pending(self, task_id: str) -> list[InputRequest]:
        """The task's open questions, oldest first."""
        return await self._store.pending_inputs(task_id)

    # Where the answers go.

    def running(self, task_id: str, host: AnswerHost) -> None:
        """The task's call runs here: its answers go to `host` until it `ended`."""
        self._hosts[task_id] = host

    def hosted(self, task_id: str) -> bool:
        """Whether answers to `task_id`'s questions go to a call running here."""
        return task_id in self._hosts

    def ended(self, task_id: str) -> None:
        self._hosts.pop(task_id, None)

    async def answer(self, task_id: str, key: str, response: jsonrpc.JsonObject) -> bool:
        """The client's answer to the question under `key`; False if it is not open. Where
        the call runs on another replica (or on none: the row is then withdrawn with the
        task), the answer waits in the store for the replica running the call."""
        if names_nothing_stored(key):
            return False  # no question has such a key: ignored, as an unknown key is
        host = self._hosts.get(task_id)
        if host is not None:
            return await host.answer(key, response)
        return await self.record_answer(task_id, key, response)

    async def settle(self, task_id: str, key: str, answer: jsonrpc.Answer) -> bool:
        """A 2025-11-25 client's answer to a stored question: as `answer`, but a refusal
        (an error response) is relayed only where the call runs."""
        if isinstance(answer, jsonrpc.Response):
            return await self.answer(task_id, key, answer.result)
        host = self._hosts.get(task_id)
        return host is not None and await host.decline(key, answer)

    async def answered_elsewhere(self, task_id: str | None) -> None:
        """Another replica stored answers to questions of a call running here (None: maybe
        to any): they go upstream now."""
        hosts = list(self._hosts.values()) if task_id is None else [self._hosts.get(task_id)]
        for host in hosts:
            if host is not None:
                await host.take_stored_answers()
