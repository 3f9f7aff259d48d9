"""`CallTaskHost`: the runner's seam (`tasks.host.TaskHost`) for a call made for a caller with
no session that became a task: a 2026-07-28 call of the tasks extension, or a task of either
generation run again after a loss (`recovery.reruns`).

The call is already running when the task is made (it ran through the request's window, or
an MRTR round before it), so the run awaits that call rather than starting one. The
upstream's questions during the task become rows in the store under the call's keys,
committed before the task shows `input_required`, so that whoever reads the task sees them
as `inputRequests`; `tasks/update` answers them through `answer()`. A question nobody answers
within `tasks.input_timeout_seconds` gets the default answer upstream and is withdrawn.
Progress becomes the task's `statusMessage`; there is no stream to send anything on.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from gateway.aio import TaskSet
from gateway.calls.call import Ask, UpstreamCall
from gateway.protocol import jsonrpc
from gateway.protocol.errors import GatewayError
from gateway.protocol.questions import default_answer
from gateway.tasks.inputs import TaskInputs
from gateway.tasks.models import Task
from gateway.upstream import Answer

log = logging.getLogger(__name__)

TIMED_OUT = "nobody answered within tasks.input_timeout_seconds"


def _ignored(params: jsonrpc.JsonObject) -> None:
    """Progress before the run's hooks are set, or after the call ended."""


class CallTaskHost:
    def __init__(
        self,
        call: UpstreamCall,
        owner: str,
        principal: str | None,
        inputs: TaskInputs,
        input_timeout: float | None,
    ) -> None:
        self.call = call
        self._owner = owner
        self._principal = principal
        self._inputs = inputs
        self._input_timeout = input_timeout
        self._tasks = TaskSet("2026-07-28 task")
        self._timers: dict[str, asyncio.Task[None]] = {}
        self._task_id = ""
        self._on_progress: Callable[[jsonrpc.JsonObject], None] = _ignored
        self._on_input: Callable[[bool], asyncio.Task[None]] | None = None
        #: The latest status write for input; the next waits for it, so they land in order.
        self._input_write: asyncio.Task[None] | None = None

    # TaskHost
    @property
    def owner(self) -> str:
        return self._owner

    @property
    def principal(self) -> str | None:
        return self._principal

    @property
    def upstream_session_id(self) -> str | None:
        return self.call.upstream_session_id

    def start_task_call(
        self,
        task: Task,
        request: jsonrpc.Request,
        on_progress: Callable[[jsonrpc.JsonObject], None],
        on_input: Callable[[bool], asyncio.Task[None]],
    ) -> jsonrpc.Request:
        self._task_id = task.task_id
        self._on_progress = on_progress
        self._on_input = on_input
        self._inputs.running(task.task_id, self)
        self.call.hooks = self
        # A question asked after the window closed but before these hooks were set.
        for ask in self.call.pending.values():
            self.asked(ask)
        return self.call.outgoing

    async def run_task_call(self, request: jsonrpc.Request) -> Answer:
        return await self.call.result()

    async def stop_task_call(self, request_id: jsonrpc.RequestId, reason: str) -> None:
        await self.call.stop(reason)

    async def end_task_call(self, upstream_id: jsonrpc.RequestId) -> None:
        self._inputs.ended(self._task_id)
        for timer in self._timers.values():
            timer.cancel()
        await self._tasks.close()
        try:
            await self.call.end(None if not self.call.pending else "the task ended")
        finally:
            # The call and this host refer to each other, and this host to the run's hooks,
            # which refer back: cycles that only a collection frees, each holding the call's
            # request and answer. The call is over, so nothing reports through them now.
            self.call.hooks = None
            self._on_progress = _ignored
            self._on_input = None

    def withdraw_questions(self, task_id: str, reason: str) -> None:
        # The terminal write withdrew the stored rows; the call itself is being stopped.
        for timer in self._timers.values():
            timer.cancel()

    def task_status(self, task: Task) -> None:
        pass  # 2026-07-28 readers poll tasks/get: there is no stream to notify

    # TaskHooks: what the call reports.
    def asked(self, ask: Ask) -> None:
        self._tasks.spawn(self._record(ask), name="task input request")

    def withdrawn(self, ask: Ask) -> None:
        self._tasks.spawn(self._withdraw(ask.key), name="task input withdrawn")

    def progress(self, params: jsonrpc.JsonObject) -> None:
        self._on_progress(params)

    async def _record(self, ask: Ask) -> None:
        recorded = await self._inputs.record(
            self._task_id, ask.key, ask.method, ask.params, ask.upstream_id
        )
        if not recorded:
            return  # the task ended meanwhile
        await self._input_changed(True)
        if self._input_timeout is not None:
            self._timers[ask.key] = self._tasks.spawn(
                self._unanswered(ask, self._input_timeout), name="task input timeout"
            )

    async def _unanswered(self, ask: Ask, limit: float) -> None:
        await asyncio.sleep(limit)
        self._timers.pop(ask.key, None)
        if await self.call.refuse(ask.key, default_answer(ask.upstream_id, ask.method, TIMED_OUT)):
            await self._withdraw(ask.key)

    async def _withdraw(self, key: str) -> None:
        await self._inputs.withdraw(self._task_id, key)
        if not self.call.pending:
            await self._input_changed(False)

    async def answer(self, key: str, response: jsonrpc.JsonObject) -> bool:
        """The client's answer to the question under `key` (tasks/update); False if it is
        not open. The stored row is settled first, so any reader sees it answered."""
        if key not in self.call.pending:
            return False
        if not await self._inputs.record_answer(self._task_id, key, response):
            return False
        timer = self._timers.pop(key, None)
        if timer is not None:
            timer.cancel()
        try:
            delivered = await self.call.answer(key, response)
        except GatewayError as exc:
            log.info("could not deliver an answer upstream: %s", exc.message)
            return False
        if not self.call.pending:
            await self._input_changed(False)
        return delivered

    async def take_stored_answers(self) -> None:
        """Answers another replica stored for the questions still open here go upstream.
        `call.answer` takes a key once, so an answer given here meanwhile is not sent twice."""
        if not self.call.pending:
            return
        answered = await self._inputs.answers(self._task_id)
        for key, response in answered.items():
            if key not in self.call.pending:
                continue
            timer = self._timers.pop(key, None)
            if timer is not None:
                timer.cancel()
            try:
                await self.call.answer(key, response)
            except GatewayError as exc:
                log.info("could not deliver an answer upstream: %s", exc.message)
        if not self.call.pending:
            await self._input_changed(False)

    async def decline(self, key: str, error: jsonrpc.ErrorResponse) -> bool:
        """The client answered the question under `key` with an error: it goes upstream as
        it is, and the question is withdrawn."""
        timer = self._timers.pop(key, None)
        if timer is not None:
            timer.cancel()
        if not await self.call.refuse(key, error):
            return False
        await self._withdraw(key)
        return True

    async def _input_changed(self, waiting: bool) -> None:
        if self._on_input is None:
            return
        previous = self._input_write
        if previous is not None and not previous.done():
            await asyncio.wait({previous})
        self._input_write = self._on_input(waiting)
        await asyncio.wait({self._input_write})
