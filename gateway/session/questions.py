"""What the upstream asks the client: its server requests, and the questions tasks wait on.

A server request gets an id from the session's downstream id space and goes to the stream of
the call it belongs to, else to the GET stream; the client's answer goes back upstream under
the upstream's id. One asked during a task's call is that task's question (elicitation,
sampling, roots): the task is `input_required` from its first open question until its last
is settled. A question carries the related-task meta and is delivered only once that status
is committed, on the task's tasks/result stream or else the GET stream; a later tasks/result
takes it over when the client cannot be reading it where it went. It ends in one of five
ways: the client answers, the upstream cancels it, nobody answers within
`tasks.input_timeout_seconds` or before the session ends (the default answer goes upstream),
or the task's call ends or the task is cancelled (the client is told it was withdrawn).

A task run again after a restart has no session of its own: its questions are rows in the
store. A tasks/result of this session for such a task relays the pending rows as server
requests (`ask_stored`); the answer goes back through the caller's `settle`, not upstream.
With replicas, a task's questions asked here are rows as well (`board`, see
`tasks.inputs`), and their ids say which task and question they are, so that the
client's `tasks/result` and answer may land on any replica.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import TypeVar

from gateway.aio import TaskSet
from gateway.protocol import jsonrpc
from gateway.protocol.errors import INTERNAL_ERROR, GatewayError, UpstreamError, UpstreamTimeout
from gateway.protocol.rewrite import RELATED_TASK
from gateway.route import Route
from gateway.session.streams import EventStream, Streams
from gateway.tasks.inputs import QuestionBoard, stored_id
from gateway.tasks.models import InputRequest
from gateway.upstream import Answer, UpstreamClient

log = logging.getLogger(__name__)

#: Why questions of an ended session get the default answer.
_ENDED = "the client's session ended"

#: Told True when a task starts waiting for the client's input, False when it no longer is;
#: returns the status write, which a question's delivery waits for.
OnInput = Callable[[bool], asyncio.Task[None]]


@dataclass(slots=True)
class Question:
    """A server request a task waits on (elicitation, sampling, roots): input_required."""

    down_id: jsonrpc.RequestId
    up_id: jsonrpc.RequestId
    task_id: str
    method: str
    event: str
    on_input: OnInput | None
    #: Where and as which event it was last delivered; None until it was.
    stream: EventStream | None = None
    seq: int = 0
    timer: asyncio.Task[None] | None = None
    #: When (event loop time) it gets the default answer; None without an input timeout.
    deadline: float | None = None
    #: Its input row's key, when it is kept in a store that replicas share.
    key: str | None = None


#: Takes the client's answer to a stored question (task id, key, answer).
Settle = Callable[[str, str, Answer], Awaitable[bool]]


@dataclass(slots=True)
class StoredQuestion:
    """A stored input request of a re-run task, relayed to this session's client."""

    task_id: str
    key: str
    stream: EventStream
    settle: Settle


class Questions:
    """A session's open server requests by downstream id, and which of them tasks wait on."""

    def __init__(
        self,
        route: Route,
        upstream: UpstreamClient,
        streams: Streams,
        tasks: TaskSet,
        calling: Callable[[str], bool],
        tag: str,
    ) -> None:
        self._route = route
        self._upstream = upstream
        self._streams = streams
        self._tasks = tasks
        #: Whether a task's call is still in flight: only then may its question stay open.
        self._calling = calling
        self._tag = tag
        self._down_ids = itertools.count(1)
        #: Every server request the client may still answer: its upstream id, and its stream.
        self._asked: dict[jsonrpc.RequestId, tuple[jsonrpc.RequestId, EventStream]] = {}
        #: Those a task waits on.
        self._waiting: dict[jsonrpc.RequestId, Question] = {}
        self._status_writes: dict[str, asyncio.Task[None]] = {}
        #: Stored questions relayed here and open, and those answered from here (their task).
        self._stored: dict[str, StoredQuestion] = {}
        self._answered_stored: dict[str, str] = {}
        self._ended = False
        #: With replicas: where a task's questions are kept too (set by the registry).
        self.board: QuestionBoard | None = None
        #: Tasks whose answers the board's hosts route here.
        self._hosted: set[str] = set()

    def ask(self, request: jsonrpc.Request, stream: EventStream) -> None:
        """Relay a server request that no task waits on, on `stream`."""
        if self._ended:
            self._answer_now(request)
            return
        down_id = next(self._down_ids)
        self._asked[down_id] = (request.id, stream)
        self._streams.push(stream, jsonrpc.with_id(request, down_id))

    def ask_for_task(
        self, request: jsonrpc.Request, task_id: str, on_input: OnInput | None
    ) -> None:
        """A task's call asks the client: the task waits for input until it is settled."""
        if self._ended:
            self._answer_now(request)
            return
        number = next(self._down_ids)
        key = None if self.board is None else f"{request.method.split('/', 1)[0]}-{number}"
        down_id: jsonrpc.RequestId = number if key is None else stored_id(task_id, key)
        event = jsonrpc.dump(related_to_task(jsonrpc.with_id(request, down_id), task_id))
        question = Question(down_id, request.id, task_id, request.method, event, on_input)
        question.key = key
        self._asked[down_id] = (request.id, self._streams.standalone)
        limit = self._route.policy.input_timeout_seconds
        if limit is not None:
            question.deadline = asyncio.get_running_loop().time() + limit
        if key is None:
            self._hold(question)
            self._tasks.spawn(self._post(question), "question delivery")
        else:
            self._tasks.spawn(self._share(question, request), "question delivery")

    async def _share(self, question: Question, request: jsonrpc.Request) -> None:
        """Write the question for the other replicas before the task shows input_required
        (a reader there that sees the status finds the row), then hold and deliver it."""
        assert self.board is not None and question.key is not None
        try:
            if not await self.board.asked(question.task_id, question.key, request):
                return  # the task ended meanwhile: its call's end withdraws the question
        except GatewayError as exc:
            # The store is away: the question is still asked, on this replica's streams.
            log.warning("session %s: a task's question is not shared: %s", self._tag, exc.message)
            question.key = None
        if question.down_id not in self._asked:
            if question.key is not None:  # the upstream withdrew it meanwhile
                await self.board.withdrawn(question.task_id, question.key)
            return
        if question.key is not None and question.task_id not in self._hosted:
            self._hosted.add(question.task_id)
            self.board.hosts.running(question.task_id, _TaskAnswers(self, question.task_id))
        self._hold(question)
        await self._post(question)

    def live(self, task_id: str, key: str) -> Question | None:
        """The open question of the task under `key`, asked on this replica."""
        return self._waiting.get(stored_id(task_id, key))

    async def take_stored_answers(self, task_id: str) -> None:
        """Answers stored on other replicas for the task's questions open here go upstream."""
        if self.board is None or not any(q.task_id == task_id for q in self._waiting.values()):
            return
        for key, response in (await self.board.answers(task_id)).items():
            question = self.live(task_id, key)
            if question is None:
                continue
            answer = jsonrpc.Response(jsonrpc="2.0", id=question.down_id, result=response)
            try:
                await self._relay(question.down_id, answer)
            except UpstreamError as exc:
                log.info("session %s: an answer could not be relayed: %s", self._tag, exc.message)

    def redeliver(self, task_id: str, stream: EventStream) -> None:
        """A tasks/result stream opened: the task's questions the client may not be reading
        where they went (a tasks/result stream nobody reads, or still unread on the GET
        stream) move to it."""
        for question in self._waiting.values():
            if question.task_id != task_id or question.stream is None:
                continue  # not delivered yet: its delivery will pick this stream
            if question.stream is self._streams.standalone:
                # Only if the GET stream has not handed it out: it moves, it is not copied.
                lost = self._streams.standalone.retract(question.seq)
            else:
                lost = not question.stream.attached
            if lost:
                stream.push(question.event)
                question.stream, question.seq = stream, stream.pushed
                self._asked[question.down_id] = (question.up_id, stream)

    def ask_stored(self, rows: Iterable[InputRequest], stream: EventStream, settle: Settle) -> None:
        """Relay a re-run task's pending input rows on `stream` (its tasks/result), each once
        under one id, again only if the stream it went on was left unread."""
        for row in rows:
            down_id = stored_id(row.task_id, row.key)
            if down_id in self._waiting or down_id in self._answered_stored:
                continue  # asked by this session itself, or answered from here
            earlier = self._stored.get(down_id)
            if earlier is not None and earlier.stream.attached:
                continue  # being read
            self._stored[down_id] = StoredQuestion(row.task_id, row.key, stream, settle)
            request = jsonrpc.Request(
                jsonrpc="2.0", id=down_id, method=row.method, params=row.params
            )
            self._streams.push(stream, related_to_task(request, row.task_id))

    def forget_stored(self, task_id: str) -> None:
        """The task ended: its stored questions are answered or withdrawn for good."""
        for down_id, stored in list(self._stored.items()):
            if stored.task_id == task_id:
                del self._stored[down_id]
        for down_id, answered_task in list(self._answered_stored.items()):
            if answered_task == task_id:
                del self._answered_stored[down_id]

    async def answer(self, message: Answer) -> bool:
        """The client's answer to a server request: relay it to the upstream. False if no
        request of this session's has its id (a question asked on another replica's).

        Raises:
            UpstreamError: the upstream did not take it. The request then stays open, so
                the client may send the answer again.
        """
        down_id = message.id
        if down_id is None:
            return False
        stored = self._stored.pop(down_id, None) if isinstance(down_id, str) else None
        if stored is not None:
            self._answered_stored[stored_id(stored.task_id, stored.key)] = stored.task_id
            if not await stored.settle(stored.task_id, stored.key, message):
                log.info("session %s: an answer came for a question no longer open", self._tag)
            return True
        if down_id not in self._asked:
            return False
        question = self._waiting.get(down_id)
        if question is not None and not await self._share_answer(question, message):
            # Another replica's answer to it came first: that one goes upstream.
            await self.take_stored_answers(question.task_id)
            return True
        await self._relay(down_id, message)
        return True

    async def _share_answer(self, question: Question, message: Answer) -> bool:
        """Settle a shared question's row before its answer goes upstream; False if it was
        answered on another replica first."""
        if self.board is None or question.key is None:
            return True
        try:
            if isinstance(message, jsonrpc.Response):
                return await self.board.answered(question.task_id, question.key, message.result)
            await self.board.withdrawn(question.task_id, question.key)
        except GatewayError as exc:
            log.warning("session %s: an answer is not shared: %s", self._tag, exc.message)
        return True

    async def _relay(self, down_id: jsonrpc.RequestId, message: Answer) -> None:
        pending = self._asked.pop(down_id, None)
        if pending is None:
            return  # settled meanwhile (a timeout, the upstream's cancel, the call's end)
        question = self._waiting.pop(down_id, None)
        if question is not None:
            # Queue the move back to `working` before the upstream has the answer: the store
            # writes in order, so the task cannot show its final status before `working`.
            self._settled(question)
        try:
            await self._answer_upstream(jsonrpc.with_id(message, pending[0]))
        except UpstreamError:
            # Not relayed, so still unanswered upstream: open it again for the client's retry
            # (unless its call or the session ended meanwhile, which withdrew it).
            if self._ended:
                raise
            if question is None:
                self._asked[down_id] = pending
            elif self._calling(question.task_id):
                self._asked[down_id] = pending
                self._hold(question)
                write = self._status_writes.get(question.task_id)
                if write is not None:
                    # Once told, the client finds the task waiting for input again.
                    await asyncio.shield(write)
            raise

    def cancelled_upstream(self, message: jsonrpc.Notification) -> None:
        """The upstream withdrew one of its requests: tell the client, by our downstream id."""
        for asked_id, (up_id, stream) in list(self._asked.items()):
            if up_id == jsonrpc.param(message, "requestId"):
                del self._asked[asked_id]
                self._streams.push(stream, jsonrpc.with_param(message, "requestId", asked_id))
                question = self._waiting.pop(asked_id, None)
                if question is not None:
                    self._settled(question)
                    self._unshare(question)

    def withdraw(self, task_id: str, reason: str) -> None:
        """The task no longer waits (its call ended or it was cancelled): tell the client."""
        for question in [q for q in self._waiting.values() if q.task_id == task_id]:
            del self._waiting[question.down_id]
            self._asked.pop(question.down_id, None)
            if question.timer is not None:
                question.timer.cancel()
            self._withdraw(question, reason)
        self._status_writes.pop(task_id, None)
        self._release(task_id)

    def _release(self, task_id: str) -> None:
        if task_id in self._hosted and self.board is not None:
            self._hosted.discard(task_id)
            self.board.hosts.ended(task_id)

    def _unshare(self, question: Question) -> None:
        """The question ended here while its task goes on: other replicas stop relaying it."""
        if self.board is not None and question.key is not None:
            withdrawn = self.board.withdrawn(question.task_id, question.key)
            self._tasks.spawn(withdrawn, "question withdrawn")

    def end(self) -> None:
        """The session ended: what the upstream asks from now on gets the default answer."""
        self._ended = True
        for task_id in list(self._hosted):
            self._release(task_id)

    def answer_open_by_default(self) -> None:
        """The upstream stays for running tasks: it must not wait on requests nobody will
        answer, so every open one gets its default answer (on the session's task set)."""
        for question in list(self._waiting.values()):
            self._tasks.spawn(self._expire(question, _ENDED), "default answer")
        for down_id, (up_id, _) in list(self._asked.items()):
            if down_id not in self._waiting:
                del self._asked[down_id]
                answer = jsonrpc.error_response(up_id, INTERNAL_ERROR, _ENDED)
                self._tasks.spawn(self._give_default(answer), "default answer")

    def refuse(self, refusal: Answer) -> None:
        """Answer one of the upstream's requests at once, without asking the client."""
        self._tasks.spawn(self._give_default(refusal), "refused upstream request")

    def _answer_now(self, request: jsonrpc.Request) -> None:
        # Nobody is left to ask: the upstream gets the default answer at once.
        answer = default_answer(request.id, request.method, _ENDED)
        self._tasks.spawn(self._give_default(answer), "default answer")

    def _hold(self, question: Question) -> None:
        """The task waits on `question`: just asked, or its answer could not be relayed."""
        first = not any(q.task_id == question.task_id for q in self._waiting.values())
        self._waiting[question.down_id] = question
        if first and question.on_input is not None:
            self._status_writes[question.task_id] = question.on_input(True)
        limit = self._route.policy.input_timeout_seconds
        if limit is not None and question.deadline is not None:
            question.timer = self._tasks.spawn(
                self._unanswered(question, limit, question.deadline), "question timer"
            )

    async def _post(self, question: Question) -> None:
        # A client must never hold a question while tasks/get still says `working`: deliver
        # only once the input_required status is committed.
        write = self._status_writes.get(question.task_id)
        if write is not None:
            await asyncio.shield(write)
        if question.down_id not in self._waiting:
            return  # answered by a timeout or withdrawn meanwhile
        stream = self._streams.writable(self._streams.of_task(question.task_id))
        if stream is None:
            return  # the session is ending: its close gives the default answer
        stream.push(question.event)
        question.stream, question.seq = stream, stream.pushed
        self._asked[question.down_id] = (question.up_id, stream)

    async def _unanswered(self, question: Question, limit: float, deadline: float) -> None:
        await asyncio.sleep(deadline - asyncio.get_running_loop().time())
        reason = (
            f"the client did not answer {question.method} within {limit:g} s "
            "(tasks.input_timeout_seconds)"
        )
        await self._expire(question, reason)

    async def _expire(self, question: Question, reason: str) -> None:
        """Nobody will answer `question`: the upstream gets the default answer."""
        if self._waiting.pop(question.down_id, None) is None:
            return
        self._asked.pop(question.down_id, None)
        self._withdraw(question, reason)
        self._settled(question)  # before the upstream has the answer, as in answer()
        self._unshare(question)
        await self._give_default(default_answer(question.up_id, question.method, reason))

    async def _give_default(self, answer: Answer) -> None:
        try:
            await self._answer_upstream(answer)
        except GatewayError as exc:
            log.info("session %s: could not give a default answer: %s", self._tag, exc.message)

    async def _answer_upstream(self, answer: Answer) -> None:
        """Send our answer to a request the upstream made, within the route's request timeout.

        Raises:
            UpstreamError: it could not be sent, or not within the timeout.
        """
        limit = self._route.upstream.config.request_timeout_seconds
        try:
            async with asyncio.timeout(limit):
                await self._upstream.notify(answer)
        except TimeoutError as exc:
            raise UpstreamTimeout(
                f"the upstream did not take the answer within {limit:g} s "
                "(upstream.request_timeout_seconds)"
            ) from exc

    def _withdraw(self, question: Question, reason: str) -> None:
        if question.stream is None:
            return  # never delivered: nothing to withdraw
        note = jsonrpc.cancelled(question.down_id, reason)
        self._streams.push(question.stream, related_to_task(note, question.task_id))

    def _settled(self, question: Question) -> None:
        if question.timer is not None and question.timer is not asyncio.current_task():
            question.timer.cancel()
        waiting = any(q.task_id == question.task_id for q in self._waiting.values())
        if not waiting:
            self._status_writes.pop(question.task_id, None)
            if question.on_input is not None:
                question.on_input(False)


def default_answer(up_id: jsonrpc.RequestId, method: str, reason: str) -> Answer:
    """What the upstream is told when nobody answers its request."""
    if method == "elicitation/create":
        # Elicitation has a way to say "nobody answered": the user dismissed the dialog.
        return jsonrpc.Response(jsonrpc="2.0", id=up_id, result={"action": "cancel"})
    return jsonrpc.error_response(up_id, INTERNAL_ERROR, reason)


_Related = TypeVar("_Related", jsonrpc.Request, jsonrpc.Notification)


def related_to_task(message: _Related, task_id: str) -> _Related:
    """The message with `_meta["io.modelcontextprotocol/related-task"]` (spec: MUST)."""
    return jsonrpc.with_meta(message, RELATED_TASK, {"taskId": task_id})


class _TaskAnswers:
    """A task's questions asked here, as the board's hosts reach them (`AnswerHost`): an
    answer given through another session, or stored by another replica."""

    def __init__(self, questions: Questions, task_id: str) -> None:
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
