"""A session's side of the questions kept in the store (`tasks.inputs`).

A task run again after a restart has no session of its own, and with replicas a task's call
may run on another replica than the one the client reads it on: either way its questions are
rows in the store. A tasks/result of this session relays the pending rows as server requests
(`StoredRelay`), each under the id that names its task and question, and the client's answer
goes back through the caller's `settle` (to the call, wherever it runs), not upstream from
here. The other way, with replicas the questions a task's call asks on this session are
rows as well (`SharedQuestions`), written before the task shows `input_required`, so that a
reader on another replica that sees the status finds them; answers given through another
session or replica reach the call here through `TaskAnswers`.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Protocol

from gateway.aio import TaskSet
from gateway.protocol import jsonrpc
from gateway.protocol.errors import GatewayError, UpstreamError
from gateway.protocol.questions import related_to_task
from gateway.session.question import Question
from gateway.session.streams import EventStream, Streams
from gateway.tasks.inputs import TaskInputs, stored_id
from gateway.tasks.models import InputRequest
from gateway.upstream import Answer

log = logging.getLogger(__name__)

#: Takes the client's answer to a stored question (task id, key, answer).
Settle = Callable[[str, str, Answer], Awaitable[bool]]


@dataclass(slots=True)
class StoredQuestion:
    """A stored input request relayed to this session's client."""

    task_id: str
    key: str
    stream: EventStream
    settle: Settle


class StoredRelay:
    """The stored questions relayed on this session's streams, open or answered from here."""

    def __init__(self, streams: Streams, tag: str) -> None:
        self._streams = streams
        self._tag = tag
        self._open: dict[str, StoredQuestion] = {}
        #: Those answered from here, by id, and their task: not relayed again.
        self._answered: dict[str, str] = {}

    def relay(
        self,
        rows: Iterable[InputRequest],
        stream: EventStream,
        settle: Settle,
        asked_here: Callable[[str], bool],
    ) -> None:
        """Relay the pending rows on `stream` (a tasks/result), each once under one id, again
        only if the stream it went on was left unread; none this session asked itself."""
        for row in rows:
            down_id = stored_id(row.task_id, row.key)
            if asked_here(down_id) or down_id in self._answered:
                continue
            earlier = self._open.get(down_id)
            if earlier is not None and earlier.stream.attached:
                continue  # being read
            self._open[down_id] = StoredQuestion(row.task_id, row.key, stream, settle)
            request = jsonrpc.Request(
                jsonrpc="2.0", id=down_id, method=row.method, params=row.params
            )
            self._streams.push(stream, related_to_task(request, row.task_id))

    def forget(self, task_id: str) -> None:
        """The task ended: its stored questions are answered or withdrawn for good."""
        for down_id, stored in list(self._open.items()):
            if stored.task_id == task_id:
                del self._open[down_id]
        for down_id, answered_task in list(self._answered.items()):
            if answered_task == task_id:
                del self._answered[down_id]

    async def settle(self, message: Answer) -> bool:
        """Whether `message` answers a stored question relayed here; if so it is settled."""
        down_id = message.id
        stored = self._open.pop(down_id, None) if isinstance(down_id, str) else None
        if stored is None:
            return False
        self._answered[stored_id(stored.task_id, stored.key)] = stored.task_id
        if not await stored.settle(stored.task_id, stored.key, message):
            log.info("session %s: an answer came for a question no longer open", self._tag)
        return True


class AskedHere(Protocol):
    """The session's questions (`questions.Questions`), as answers given elsewhere reach them."""

    def live(self, task_id: str, key: str) -> Question | None: ...

    async def answer(self, message: Answer) -> bool: ...

    async def take_stored_answers(self, task_id: str) -> None: ...


class TaskAnswers:
    """A task's questions asked on this session, as `tasks.inputs.AnswerHost`: answers given
    through another session, or stored by another replica, reach the call here."""

    def __init__(self, questions: AskedHere, task_id: str) -> None:
        self._questions = questions
        self._task_id = task_id

    async def answer(self, key: str, response: jsonrpc.JsonObject) -> bool:
        question = self._questions.live(self._task_id, key)
        if question is None:
            return False
        answer = jsonrpc.Response(jsonrpc="2.0", id=question.down_id, result=response)
        return await self._give(answer)

    async def decline(self, key: str, error: jsonrpc.ErrorResponse) -> bool:
        question = self._questions.live(self._task_id, key)
        if question is None:
            return False
        return await self._give(jsonrpc.with_id(error, question.down_id))

    async def take_stored_answers(self) -> None:
        await self._questions.take_stored_answers(self._task_id)

    async def _give(self, answer: Answer) -> bool:
        try:
            return await self._questions.answer(answer)
        except UpstreamError as exc:
            log.info("an answer could not be relayed upstream: %s", exc.message)
            return False


class SharedQuestions:
    """With replicas: the rows of the task questions this session asks (in `board`), and the
    tasks whose answers, given elsewhere, the board routes to this session."""

    def __init__(self, board: TaskInputs, tasks: TaskSet, tag: str) -> None:
        self.board = board
        self._tasks = tasks
        self._tag = tag
        self._hosted: set[str] = set()

    async def record(self, question: Question, request: jsonrpc.Request) -> bool:
        """Write the question's row; False if the task ended meanwhile. With the store away
        the question is not shared (its key is dropped): it is still asked here."""
        assert question.key is not None
        try:
            params = request.params or {}
            return await self.board.record(
                question.task_id, question.key, request.method, params, request.id
            )
        except GatewayError as exc:
            log.warning("session %s: a task's question is not shared: %s", self._tag, exc.message)
            question.key = None
            return True

    def host(self, task_id: str, questions: AskedHere) -> None:
        """Answers to the task's questions given elsewhere come to `questions` from now on."""
        if task_id not in self._hosted:
            self._hosted.add(task_id)
            self.board.running(task_id, TaskAnswers(questions, task_id))

    async def settle(self, question: Question, message: Answer) -> bool:
        """Settle the question's row before its answer goes upstream; False if it was
        answered on another replica first."""
        if question.key is None:
            return True
        try:
            if isinstance(message, jsonrpc.Response):
                return await self.board.record_answer(
                    question.task_id, question.key, message.result
                )
            await self.board.withdraw(question.task_id, question.key)
        except GatewayError as exc:
            log.warning("session %s: an answer is not shared: %s", self._tag, exc.message)
        return True

    def unshare(self, question: Question) -> None:
        """The question ended here while its task goes on: other replicas stop relaying it."""
        if question.key is not None:
            withdrawn = self.board.withdraw(question.task_id, question.key)
            self._tasks.spawn(withdrawn, "question withdrawn")

    def release(self, task_id: str) -> None:
        if task_id in self._hosted:
            self._hosted.discard(task_id)
            self.board.ended(task_id)

    def release_all(self) -> None:
        for task_id in list(self._hosted):
            self.release(task_id)
