"""The runner against its TaskHost seam: a task's terminal write does not depend on what the
host (the session that started it, which may be gone) does once the call has ended."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from pathlib import Path

import pytest

from gateway.config import Limits, TaskPolicy, UpstreamConfig
from gateway.observability.metrics import Metrics
from gateway.protocol import jsonrpc
from gateway.tasks.models import Task, TaskStatus, utcnow
from gateway.tasks.notifier import Notifier
from gateway.tasks.runner import TaskRunner
from gateway.tasks.store import open_store
from gateway.upstream import UpstreamClient
from gateway.upstream.base import Transport

RESULT = {"content": [{"type": "text", "text": "done"}], "isError": False}


class AnsweringUpstream(Transport):
    """Answers every request at once: initialize with a handshake, anything else with RESULT."""

    def __init__(self, sink: UpstreamClient) -> None:
        super().__init__(sink)
        self.client = sink

    async def start(self) -> None:
        pass

    async def send(self, message: jsonrpc.Message) -> None:
        if isinstance(message, jsonrpc.Request):
            result = {"protocolVersion": "2025-06-18"} if message.method == "initialize" else RESULT
            answer = jsonrpc.Response(jsonrpc="2.0", id=message.id, result=result)
            self.client.on_message(answer, message.id)

    async def close(self) -> None:
        pass


class GoneHost:
    """A host whose every callback after the call fails, as a closed session's streams did."""

    owner = "session:gone"
    principal = None
    busy = False
    listening = False

    def __init__(self) -> None:
        config = UpstreamConfig(transport="stdio", command=("true",))
        self.upstream = UpstreamClient(AnsweringUpstream, config, self)
        self.ended = asyncio.Event()

    def start_task_call(
        self,
        task: Task,
        request: jsonrpc.Request,
        on_progress: Callable[[jsonrpc.JsonObject], None],
        on_input: Callable[[bool], asyncio.Task[None]],
    ) -> jsonrpc.Request:
        return jsonrpc.with_id(request, self.upstream.next_id())

    async def end_task_call(self, upstream_id: jsonrpc.RequestId) -> None:
        self.ended.set()
        raise RuntimeError("the session's streams are closed")

    def withdraw_questions(self, task_id: str, reason: str) -> None:
        raise RuntimeError("the session's streams are closed")

    def task_status(self, task: Task) -> None:
        raise RuntimeError("the session's streams are closed")

    def on_server_message(
        self, message: jsonrpc.Message, related: jsonrpc.RequestId | None
    ) -> None:
        pass

    def on_stream(self, related: jsonrpc.RequestId, interrupted: bool) -> None:
        pass


async def test_the_terminal_write_comes_first_whatever_the_host_does_after(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    store = await open_store(tmp_path / "gateway.db")
    runner = TaskRunner(store, Notifier(), Metrics(["r"]), utcnow)
    host = GoneHost()
    await host.upstream.initialize(
        jsonrpc.Request(jsonrpc="2.0", id=0, method="initialize", params={})
    )
    call = jsonrpc.Request(
        jsonrpc="2.0", id=7, method="tools/call", params={"name": "echo", "task": {}}
    )
    try:
        with caplog.at_level(logging.ERROR, logger="gateway"):
            task = await runner.submit(host, "r", call, TaskPolicy(), Limits())
            async with asyncio.timeout(5):
                await host.ended.wait()  # the last thing a run does
        done = await store.get_task(task.task_id)
        outcome = await store.get_outcome(task.task_id)
    finally:
        await runner.close()
        await store.close()
    assert done is not None and done.status is TaskStatus.COMPLETED
    assert outcome is not None and outcome.body == RESULT
    # The host's failure is not hidden: it is logged where the run's task ends.
    assert "the session's streams are closed" in caplog.text
