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

With replicas, a task's questions asked here are rows in the store as well (`board`, the
process's `tasks.inputs.TaskInputs`), under ids that say which task and question they are,
so that the client's `tasks/result` and answer may land on any replica; and the rows of
tasks whose call runs elsewhere are relayed here (`stored_questions`).
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import Callable, Iterable

from gateway.aio import TaskSet
from gateway.protocol import jsonrpc
from gateway.protocol.errors import INTERNAL_ERROR, UpstreamError
from gateway.protocol.questions import default_answer, related_to_task
from gateway.route import Route
from gateway.session.question import Delivery, OnInput, Question, Replies
from gateway.session.stored_questions import Settle, SharedQuestions, StoredRelay
from gateway.session.streams import EventStream, Streams
from gateway.session.waiting import Waiting
from gateway.tasks.inputs import TaskInputs, stored_id
from gateway.tasks.models import InputRequest
from gateway.upstream import Answer, UpstreamSession

log = logging.getLogger(__name__)

#: Why questions of an ended session get the default answer.
_ENDED = "the client's session ended"


class Questions:
    """A session's open server requests by downstream id, and which of them tasks wait on."""

    def __init__(
        self,
        route: Route,
        upstream: UpstreamSession,
        streams: Streams,
        tasks: TaskSet,
        calling: Callable[[str], bool],
        tag: str,
    ) -> None:
        self._route = route
        self._replies = Replies(route, upstream, tasks, tag)
        self._delivery = Delivery(streams)
        self._streams = streams
        self._tasks = tasks
        #: Whether a task's call is still in flight: only then may its question stay open.
        self._calling = calling
        self._tag = tag
        self._down_ids = itertools.count(1)
        #: Every server request the client may still answer: its upstream id, and its stream.
        self._asked: dict[jsonrpc.RequestId, tuple[jsonrpc.RequestId, EventStream]] = {}
        #: Those a task waits on.
        self._waiting = Waiting(route, tasks)
        self._stored = StoredRelay(streams, tag)
        self._ended = False
        #: With replicas: where a task's questions are kept too (see `share`).
        self._shared: SharedQuestions | None = None

    def share(self, board: TaskInputs) -> None:
        """Keep the task questions asked from now on in `board` too (several replicas)."""
        self._shared = SharedQuestions(board, self._tasks, self._tag)

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
        key = None if self._shared is None else f"{request.method.split('/', 1)[0]}-{number}"
        down_id: jsonrpc.RequestId = number if key is None else stored_id(task_id, key)
        event = jsonrpc.dump(related_to_task(jsonrpc.with_id(request, down_id), task_id))
        question = Question(down_id, request.id, task_id, request.method, event, on_input)
        question.key = key
        self._asked[down_id] = (request.id, self._streams.standalone)
        limit = self._route.policy.input_timeout_seconds
        if limit is not None:
            question.deadline = asyncio.get_running_loop().time() + limit
        if key is None:
            self._waiting.hold(question, self._expire)
            self._tasks.spawn(self._post(question), "question delivery")
        else:
            self._tasks.spawn(self._share(question, request), "question delivery")

    async def _share(self, question: Question, request: jsonrpc.Request) -> None:
        """Write the question for the other replicas before the task shows input_required
        (a reader there that sees the status finds the row), then hold and deliver it."""
        assert self._shared is not None
        if not await self._shared.record(question, request):
            return  # the task ended meanwhile: its call's end withdraws the question
        if question.down_id not in self._asked:
            if question.key is not None:  # the upstream withdrew it meanwhile
                await self._shared.board.withdraw(question.task_id, question.key)
            return
        if question.key is not None:
            self._shared.host(question.task_id, self)
        self._waiting.hold(question, self._expire)
        await self._post(question)

    def live(self, task_id: str, key: str) -> Question | None:
        """The open question of the task under `key`, asked on this replica."""
        return self._waiting.get(stored_id(task_id, key))

    async def take_stored_answers(self, task_id: str) -> None:
        """Answers stored on other replicas for the task's questions open here go upstream."""
        if self._shared is None or not self._waiting.waits(task_id):
            return
        for key, response in (await self._shared.board.answers(task_id)).items():
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
        where they went move to it (`Delivery.move`)."""
        for question in self._waiting:
            if question.task_id != task_id or question.stream is None:
                continue  # not delivered yet: its delivery will pick this stream
            if self._delivery.move(question, stream):
                self._asked[question.down_id] = (question.up_id, stream)

    def ask_stored(self, rows: Iterable[InputRequest], stream: EventStream, settle: Settle) -> None:
        """Relay the pending rows of a task whose call has no session here (see
        `StoredRelay`) on `stream`, its tasks/result."""
        self._stored.relay(rows, stream, settle, lambda down_id: down_id in self._waiting)

    def forget_stored(self, task_id: str) -> None:
        self._stored.forget(task_id)

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
        if await self._stored.settle(message):
            return True
        if down_id not in self._asked:
            return False
        question = self._waiting.get(down_id)
        shared = self._shared
        if (
            question is not None
            and shared is not None
            and not await shared.settle(question, message)
        ):
            # Another replica's answer to it came first: that one goes upstream.
            await self.take_stored_answers(question.task_id)
            return True
        await self._relay(down_id, message)
        return True

    async def _relay(self, down_id: jsonrpc.RequestId, message: Answer) -> None:
        pending = self._asked.pop(down_id, None)
        if pending is None:
            return  # settled meanwhile (a timeout, the upstream's cancel, the call's end)
        question = self._waiting.pop(down_id)
        if question is not None:
            # Queue the move back to `working` before the upstream has the answer: the store
            # writes in order, so the task cannot show its final status before `working`.
            self._waiting.settled(question)
        try:
            await self._replies.send(jsonrpc.with_id(message, pending[0]))
        except UpstreamError:
            # Not relayed, so still unanswered upstream: open it again for the client's retry
            # (unless its call or the session ended meanwhile, which withdrew it).
            if self._ended:
                raise
            if question is None:
                self._asked[down_id] = pending
            elif self._calling(question.task_id):
                self._asked[down_id] = pending
                self._waiting.hold(question, self._expire)
                # Once told, the client finds the task waiting for input again.
                await self._waiting.committed(question.task_id)
            raise

    def cancelled_upstream(self, message: jsonrpc.Notification) -> None:
        """The upstream withdrew one of its requests: tell the client, by our downstream id."""
        for asked_id, (up_id, stream) in list(self._asked.items()):
            if up_id == jsonrpc.param(message, "requestId"):
                del self._asked[asked_id]
                self._streams.push(stream, jsonrpc.with_param(message, "requestId", asked_id))
                question = self._waiting.pop(asked_id)
                if question is not None:
                    self._waiting.settled(question)
                    self._unshare(question)

    def withdraw(self, task_id: str, reason: str) -> None:
        """The task no longer waits (its call ended or it was cancelled): tell the client."""
        for question in self._waiting.withdraw(task_id):
            self._asked.pop(question.down_id, None)
            question.stop_timer()
            self._delivery.withdraw(question, reason)
        if self._shared is not None:
            self._shared.release(task_id)

    def end(self) -> None:
        """The session ended: what the upstream asks from now on gets the default answer."""
        self._ended = True
        if self._shared is not None:
            self._shared.release_all()

    def answer_open_by_default(self) -> None:
        """The upstream stays for running tasks: it must not wait on requests nobody will
        answer, so every open one gets its default answer (on the session's task set)."""
        for question in list(self._waiting):
            self._tasks.spawn(self._expire(question, _ENDED), "default answer")
        for down_id, (up_id, _) in list(self._asked.items()):
            if down_id not in self._waiting:
                del self._asked[down_id]
                answer = jsonrpc.error_response(up_id, INTERNAL_ERROR, _ENDED)
                self._replies.give_soon(answer, "default answer")

    def refuse(self, refusal: Answer) -> None:
        """Answer one of the upstream's requests at once, without asking the client."""
        self._replies.give_soon(refusal, "refused upstream request")

    def _answer_now(self, request: jsonrpc.Request) -> None:
        # Nobody is left to ask: the upstream gets the default answer at once.
        answer = default_answer(request.id, request.method, _ENDED)
        self._replies.give_soon(answer, "default answer")

    async def _post(self, question: Question) -> None:
        # A client must never hold a question while tasks/get still says `working`: deliver
        # only once the input_required status is committed.
        await self._waiting.committed(question.task_id)
        if question.down_id not in self._waiting:
            return  # answered by a timeout or withdrawn meanwhile
        stream = self._delivery.post(question)
        if stream is not None:
            self._asked[question.down_id] = (question.up_id, stream)

    async def _expire(self, question: Question, reason: str) -> None:
        """Nobody will answer `question`: the upstream gets the default answer."""
        if self._waiting.pop(question.down_id) is None:
            return
        self._asked.pop(question.down_id, None)
        self._delivery.withdraw(question, reason)
        self._waiting.settled(question)  # before the upstream has the answer, as in answer()
        self._unshare(question)
        await self._replies.give(default_answer(question.up_id, question.method, reason))

    def _unshare(self, question: Question) -> None:
        if self._shared is not None:
            self._shared.unshare(question)
