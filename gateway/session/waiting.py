"""The questions a session's tasks wait on, and so each task's `input_required` status.

A task is `input_required` from its first open question until its last is settled: holding
its first question starts the status write (`OnInput`), which a question's delivery waits
for, and settling its last moves the task back to `working`. A question held with a deadline
(`tasks.input_timeout_seconds`) has a timer that hands it back when the deadline passes, for
its default answer. What is asked, where it is delivered and what goes upstream stays with
`Questions` (`questions.py`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterator

from gateway.aio import TaskSet
from gateway.protocol import jsonrpc
from gateway.route import Route
from gateway.session.question import Question

#: Gives a question nobody answered in time its default answer (the question, and why).
Expire = Callable[[Question, str], Awaitable[None]]


class Waiting:
    """The questions tasks wait on, by downstream id, and the status write each task's wait
    began with."""

    def __init__(self, route: Route, tasks: TaskSet) -> None:
        self._route = route
        self._tasks = tasks
        self._questions: dict[jsonrpc.RequestId, Question] = {}
        self._status_writes: dict[str, asyncio.Task[None]] = {}

    def __contains__(self, down_id: object) -> bool:
        return down_id in self._questions

    def __iter__(self) -> Iterator[Question]:
        return iter(self._questions.values())

    def get(self, down_id: jsonrpc.RequestId) -> Question | None:
        return self._questions.get(down_id)

    def pop(self, down_id: jsonrpc.RequestId) -> Question | None:
        return self._questions.pop(down_id, None)

    def waits(self, task_id: str) -> bool:
        """Whether any question of the task is open."""
        return any(q.task_id == task_id for q in self._questions.values())

    def hold(self, question: Question, expire: Expire) -> None:
        """The task waits on `question`: just asked, or its answer could not be relayed. Past
        its deadline, `expire` gives it the default answer. (Given with each question, not
        kept: kept, the `Questions` it belongs to and this table would hold each other, a
        cycle left to the collector that `tests/test_garbage.py` refuses.)"""
        first = not self.waits(question.task_id)
        self._questions[question.down_id] = question
        if first and question.on_input is not None:
            self._status_writes[question.task_id] = question.on_input(True)
        limit = self._route.policy.input_timeout_seconds
        if limit is not None and question.deadline is not None:
            question.timer = self._tasks.spawn(
                self._unanswered(question, limit, question.deadline, expire), "question timer"
            )

    async def committed(self, task_id: str) -> None:
        """Once the status write the task's wait began with, if under way, is done."""
        write = self._status_writes.get(task_id)
        if write is not None:
            await asyncio.shield(write)

    def settled(self, question: Question) -> None:
        """`question`, taken out, no longer waits: its task is `working` again if it was the
        last."""
        if question.timer is not asyncio.current_task():
            question.stop_timer()
        if not self.waits(question.task_id):
            self._status_writes.pop(question.task_id, None)
            if question.on_input is not None:
                question.on_input(False)

    def withdraw(self, task_id: str) -> list[Question]:
        """Take out the task's questions, which it no longer waits on, without settling them."""
        questions = [q for q in self._questions.values() if q.task_id == task_id]
        for question in questions:
            del self._questions[question.down_id]
        self._status_writes.pop(task_id, None)
        return questions

    async def _unanswered(
        self, question: Question, limit: float, deadline: float, expire: Expire
    ) -> None:
        await asyncio.sleep(deadline - asyncio.get_running_loop().time())
        reason = (
            f"the client did not answer {question.method} within {limit:g} s "
            "(tasks.input_timeout_seconds)"
        )
        await expire(question, reason)
