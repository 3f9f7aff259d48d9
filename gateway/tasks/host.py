"""`TaskHost`: what a run needs of whoever started it.

The runner never imports a caller's side. There is one host per kind of caller: a 2025-11-25
client session's tasks have `session.task_host.SessionTaskHost`; a call made for a caller
with no session (a 2026-07-28 request, or a task run again after a loss, which has no client
at all) has `calls.task_host.CallTaskHost`. A host owns the upstream connection, relays the
call's progress and questions to the client (or stores them as the task's input requests),
and hears of every status change.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any, Protocol

from gateway.protocol import jsonrpc
from gateway.tasks.models import Task
from gateway.upstream import Answer


class TaskHost(Protocol):
    """What a run needs of whoever started it (`SessionTaskHost`, `CallTaskHost`)."""

    @property
    def owner(self) -> str: ...

    @property
    def principal(self) -> str | None: ...

    @property
    def upstream_session_id(self) -> str | None:
        """The upstream's session id the call goes on (HTTP upstreams), kept with a task that
        may run again so the next process can cancel this attempt's call."""

    def start_task_call(
        self,
        task: Task,
        request: jsonrpc.Request,
        on_progress: Callable[[jsonrpc.JsonObject], None],
        on_input: Callable[[bool], asyncio.Task[None]],
    ) -> jsonrpc.Request: ...

    def run_task_call(self, request: jsonrpc.Request) -> Coroutine[Any, Any, Answer]:
        """The answer to the call `start_task_call` returned: the 2025-11-25 session sends it
        now; a 2026-07-28 call was already running when it became a task. (A coroutine: the
        host need not add a frame of its own to every run in flight.)

        Raises:
            GatewayError: no answer could be had.
        """

    async def stop_task_call(self, request_id: jsonrpc.RequestId, reason: str) -> None:
        """The task was cancelled or expired: tell the upstream to stop the call (never
        raises; the task is already terminal)."""

    async def end_task_call(self, upstream_id: jsonrpc.RequestId) -> None:
        """The call ended (after its terminal write); the host may release its upstream."""

    def withdraw_questions(self, task_id: str, reason: str) -> None: ...

    def task_status(self, task: Task) -> None: ...
