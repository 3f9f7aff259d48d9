"""`start_task()` and `resume_task()`: the task itself, across restarts of caller and server."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest
from conftest import Gateway, kill, route, run_gateway
from mcp import Client, MCPError
from mcp.types import CallToolResult, TextContent

from mcp_tasks_client import TaskCancelledError, TaskHandle, TasksExtension, resume_task, start_task

pytestmark = pytest.mark.anyio


def text(result: CallToolResult) -> str:
    block = result.content[0]
    assert isinstance(block, TextContent)
    return block.text


async def wait_until_ended(handle: TaskHandle) -> str:
    with anyio.fail_after(10):
        while (status := (await handle.status()).status) in ("working", "input_required"):  # noqa: ASYNC110
            await anyio.sleep(0.05)
    return status


async def test_start_task_gives_a_handle_with_status_and_result(gateway: Gateway) -> None:
    async with Client(gateway.url("required"), extensions=[TasksExtension()]) as client:
        task = await start_task(client, "slow", {"seconds": 0.5, "steps": 1})
        first = await task.status()
        result = await task.result()
        again = await task.result()

    assert task.id is not None and first.task_id == task.id
    assert first.status in ("working", "completed")
    assert first.created_at and first.last_updated_at
    assert text(result) == "slept 0.5 s"
    assert again == result


async def test_cancel_ends_the_task_cancelled_and_its_result_raises(gateway: Gateway) -> None:
    async with Client(gateway.url("required"), extensions=[TasksExtension()]) as client:
        task = await start_task(client, "slow", {"seconds": 60, "steps": 60})
        await task.cancel()
        status = await wait_until_ended(task)
        with pytest.raises(TaskCancelledError):
            await task.result()

    assert status == "cancelled"


async def test_a_call_answered_at_once_gives_a_handle_without_a_task(gateway: Gateway) -> None:
    async with Client(gateway.url(), extensions=[TasksExtension()]) as client:
        task = await start_task(client, "echo", {"text": "at once"})
        result = await task.result()
        await task.cancel()
        with pytest.raises(RuntimeError):
            await task.status()

    assert task.id is None
    assert text(result) == "at once"


async def test_resume_task_of_an_unknown_id_raises_invalid_params(gateway: Gateway) -> None:
    async with Client(gateway.url(), extensions=[TasksExtension()]) as client:
        with pytest.raises(MCPError) as unknown:
            await resume_task(client, "no-such-task").status()

    assert unknown.value.code == -32602


async def test_handle_needs_the_extension_on_the_client(gateway: Gateway) -> None:
    async with Client(gateway.url()) as client:
        with pytest.raises(ValueError):
            resume_task(client, "any")
        with pytest.raises(ValueError):
            await start_task(client, "echo", {"text": "x"})


async def test_resume_task_after_gateway_crash_and_caller_restart_gets_the_result(
    tmp_path: Path,
) -> None:
    routes = route("demo", "default: required, repeatable: [slow]")
    with run_gateway(tmp_path, routes) as first:
        async with Client(first.url(), extensions=[TasksExtension()]) as client:
            task = await start_task(client, "slow", {"seconds": 1, "steps": 2})
        assert task.id is not None
        kill(first)

    with run_gateway(tmp_path, routes, store=first.store) as second:
        async with Client(second.url(), extensions=[TasksExtension()]) as client:
            resumed = resume_task(client, task.id)
            result = await resumed.result()

    assert text(result) == "slept 1 s"


async def test_resume_task_of_a_task_the_restart_interrupted_raises_its_failure(
    tmp_path: Path,
) -> None:
    routes = route("demo", "default: required")
    with run_gateway(tmp_path, routes) as first:
        async with Client(first.url(), extensions=[TasksExtension()]) as client:
            task = await start_task(client, "slow", {"seconds": 60, "steps": 60})
            finished = await start_task(client, "slow", {"seconds": 0.1, "steps": 1})
            await finished.result()
        assert task.id is not None and finished.id is not None

    with run_gateway(tmp_path, routes, store=first.store) as second:
        async with Client(second.url(), extensions=[TasksExtension()]) as client:
            status = await resume_task(client, task.id).status()
            with pytest.raises(MCPError):
                await resume_task(client, task.id).result()
            kept = await resume_task(client, finished.id).result()

    assert status.status == "failed"
    assert status.error is not None
    assert text(kept) == "slept 0.1 s"
