"""The tasks benchmark's client patterns: what one operation of each measurement sends and checks.

* ``create``    -- ``tools/call echo`` with ``task: {}``; the answer must be a CreateTaskResult
  whose task is ``working``.
* ``lifecycle`` -- the polling pattern: create, ``tasks/get`` back-to-back until ``completed``
  (the ``pollInterval`` is not slept: the server is what is measured), then ``tasks/result``.
* ``blocking``  -- create, then at once ``tasks/result``, which waits until the task is terminal
  and answers with its result (JSON, or an SSE stream the answer comes on), then ``tasks/get``,
  which must say ``completed``. How long each ``tasks/result`` took is kept (``waits``): a
  wake-up the server misses shows there, as an answer that waited for a backstop.
* ``modern``    -- the 2026-07-28 pattern, session-less: ``tools/call echo`` with the tasks
  extension (``io.modelcontextprotocol/tasks``) declared in the request's ``_meta``, answered
  by a flat CreateTaskResult (the benchmark's route makes every such call a task, at once:
  ``tasks.sync_window_ms: 0``, and ``echo: required``, without which an answer already there
  comes back directly), then ``tasks/get`` back-to-back until ``completed`` with the result
  inlined. The references speak 2025-11-25 alone, so it runs on the gateway only. The route
  has no authentication, so each call gets an upstream session of its own (opened and closed
  around it), as every anonymous 2026-07-28 call does.

Every result's text must equal what was sent (and carry the related-task meta on 2025-11-25,
none on 2026-07-28); anything else is an error, and errors make the run invalid.
``tests/bench/tasks.py`` runs the patterns; ``tests/bench/pattern_report.py`` prints the later
patterns beside the polling one, and the blocking waits round by round.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Awaitable, Callable, Sequence

import aiohttp

from tests.bench.passthrough import KEY_CONCURRENCY, BenchError, JsonObj, McpClient

RELATED_TASK = "io.modelcontextprotocol/related-task"
MODERN = "2026-07-28"
TASKS_EXTENSION = "io.modelcontextprotocol/tasks"
MODERN_META: JsonObj = {
    "io.modelcontextprotocol/protocolVersion": MODERN,
    "io.modelcontextprotocol/clientCapabilities": {"extensions": {TASKS_EXTENSION: {}}},
    "io.modelcontextprotocol/clientInfo": {"name": "tasks-bench", "version": "0.0.0"},
}

PATTERNS = ("lifecycle", "blocking", "modern")
#: Patterns the references cannot serve, and those that open no session.
GATEWAY_ONLY = frozenset({"modern"})
SESSIONLESS = frozenset({"modern"})
MAX_POLLS_PER_TASK = 100_000
LIFECYCLE_TIMEOUT_S = 10.0
DONE_OR_WORKING = ("working", "completed")


def caller_key(i: int) -> str:
    """The API key of the benchmark's caller number i: each client is a principal of its own,
    as callers are in service, so that each is held to the per-principal limits."""
    return f"bench-caller-{i:06d}-{'0' * 12}"


def api_keys_section(callers: int) -> str:
    """The gateway config's `auth` section that knows callers 0 to callers-1."""
    keys = ", ".join(
        f"{{principal: caller-{i}, sha256: {hashlib.sha256(caller_key(i).encode()).hexdigest()}}}"
        for i in range(callers)
    )
    return f"auth:\n  mode: api_keys\n  api_keys: [{keys}]\n"


LEGEND = {
    "create": "tools/call echo with task:{} -> CreateTaskResult(status working)",
    "lifecycle": "create + tasks/get polled back-to-back (pollInterval NOT slept) until\n"
    "              completed + tasks/result, text checked (the polling pattern)",
    "blocking": "create + tasks/result at once (it waits for the end) + tasks/get says\n"
    "              completed, text checked",
    "modern": "2026-07-28, no session: tools/call with the tasks extension -> flat\n"
    "              CreateTaskResult + tasks/get back-to-back until completed, result inlined",
}


def plan(
    patterns: Sequence[str], concurrency: int = KEY_CONCURRENCY
) -> tuple[tuple[str, int], ...]:
    """(measurement, concurrency) in the order each round runs them; `concurrency` is the
    patterns'."""
    return (("create", KEY_CONCURRENCY), ("create", 1), *((p, concurrency) for p in patterns))


def legend(kinds: Sequence[str]) -> str:
    lines = [f"  {kind:<9} = {LEGEND[kind]}" for kind in dict.fromkeys(kinds)]
    lines.append("  http/op   = the HTTP requests per operation (polls included)")
    return "\n".join(lines)


class TaskClient(McpClient):
    """The passthrough benchmark's MCP session plus the task methods, and session-less
    2026-07-28 requests."""

    def __init__(self, http: aiohttp.ClientSession, url: str, caller: int = 0) -> None:
        super().__init__(http, url, f"Bearer {caller_key(caller)}")
        #: How long each tasks/result of the blocking pattern took, in seconds.
        self.waits: list[float] = []

    async def create_task(self, tool: str, arguments: JsonObj) -> str:
        """A task-augmented tools/call; returns the taskId of the CreateTaskResult."""
        params = {"name": tool, "arguments": arguments, "task": {}}
        result, _ = await self.request("tools/call", params)
        task = result.get("task")
        if (
            not isinstance(task, dict)
            or not isinstance(task.get("taskId"), str)
            or not task["taskId"]
            or task.get("status") != "working"
            or not isinstance(task.get("createdAt"), str)
        ):
            raise BenchError(f"not a CreateTaskResult with status working: {str(result)[:200]}")
        return str(task["taskId"])

    async def task_status(self, task_id: str) -> str:
        result, _ = await self.request("tasks/get", {"taskId": task_id})
        status = result.get("status")
        if result.get("taskId") != task_id or not isinstance(status, str):
            raise BenchError(f"tasks/get {task_id}: not its Task: {str(result)[:200]}")
        return status

    async def task_result(self, task_id: str) -> JsonObj:
        result, _ = await self.request("tasks/result", {"taskId": task_id})
        return result

    async def modern(self, method: str, params: JsonObj, name: str) -> JsonObj:
        """One session-less 2026-07-28 request: the envelope in `_meta`, the method and `name`
        (the tool, or the taskId) in headers; its result."""
        self._next_id += 1
        msg_id = self._next_id
        message = {
            "jsonrpc": "2.0",
            "id": msg_id,
            "method": method,
            "params": {**params, "_meta": MODERN_META},
        }
        headers = {
            "Accept": "application/json, text/event-stream",
            "Content-Type": "application/json",
            "MCP-Protocol-Version": MODERN,
            "Mcp-Method": method,
            "Mcp-Name": name,
            "Authorization": self._headers["Authorization"],
        }
        body = json.dumps(message, separators=(",", ":")).encode()
        async with self._http.post(self._url, data=body, headers=headers) as resp:
            if resp.status != 200 or resp.content_type != "application/json":
                text = (await resp.text())[:200]
                raise BenchError(f"{method}: HTTP {resp.status} {resp.content_type}: {text}")
            reply = json.loads(await resp.read())
        if not isinstance(reply, dict) or reply.get("id") != msg_id or "error" in reply:
            raise BenchError(f"{method}: not its answer: {str(reply)[:200]}")
        result = reply.get("result")
        if not isinstance(result, dict):
            raise BenchError(f"{method}: result is not an object: {str(reply)[:200]}")
        return result

    async def close(self) -> None:
        """End the session (DELETE), so that measurements do not pile up sessions."""
        if "Mcp-Session-Id" not in self._headers:
            return
        async with self._http.delete(self._url, headers=self._headers) as resp:
            await resp.read()
            if resp.status not in (200, 202, 204):
                raise BenchError(f"DELETE session: HTTP {resp.status}")


def _check_text(result: object, text: str) -> JsonObj:
    first: object = None
    if isinstance(result, dict) and isinstance(result.get("content"), list) and result["content"]:
        first = result["content"][0]
    got = first.get("text") if isinstance(first, dict) else None
    if not isinstance(result, dict) or result.get("isError") or got != text:
        raise BenchError(f"result mismatch: sent {text!r}, got {str(result)[:200]}")
    return result


def _check_echo(result: JsonObj, task_id: str, text: str) -> None:
    meta = _check_text(result, text).get("_meta")
    related = meta.get(RELATED_TASK) if isinstance(meta, dict) else None
    if not isinstance(related, dict) or related.get("taskId") != task_id:
        raise BenchError(f"tasks/result lacks related-task meta for {task_id}: {str(meta)[:200]}")


async def _until_completed(status: Callable[[], Awaitable[str]], task_id: str) -> int:
    """Calls `status` back-to-back until it says completed; how many times it was called."""
    give_up = time.perf_counter() + LIFECYCLE_TIMEOUT_S
    for polls in range(1, MAX_POLLS_PER_TASK + 1):
        now = await status()
        if now == "completed":
            return polls
        if now != "working":
            raise BenchError(f"task {task_id} ended {now!r}, expected completed")
        if time.perf_counter() > give_up:
            raise BenchError(f"task {task_id} not completed within {LIFECYCLE_TIMEOUT_S:g}s")
    raise BenchError(f"task {task_id} not completed after {MAX_POLLS_PER_TASK} polls")


# One unit of work: returns how many HTTP requests it made.
Op = Callable[[TaskClient, str], Awaitable[int]]


async def op_create(client: TaskClient, text: str) -> int:
    await client.create_task("echo", {"text": text})
    return 1


async def op_lifecycle(client: TaskClient, text: str) -> int:
    task_id = await client.create_task("echo", {"text": text})
    polls = await _until_completed(lambda: client.task_status(task_id), task_id)
    _check_echo(await client.task_result(task_id), task_id, text)
    return polls + 2


async def op_blocking(client: TaskClient, text: str) -> int:
    task_id = await client.create_task("echo", {"text": text})
    asked = time.perf_counter()
    result = await client.task_result(task_id)
    client.waits.append(time.perf_counter() - asked)
    _check_echo(result, task_id, text)
    status = await client.task_status(task_id)
    if status != "completed":
        raise BenchError(f"tasks/get after tasks/result: task {task_id} is {status!r}")
    return 3


async def op_modern(client: TaskClient, text: str) -> int:
    call = {"name": "echo", "arguments": {"text": text}}
    created = await client.modern("tools/call", call, "echo")
    task_id = created.get("taskId")
    # (`completed` when the answer came before the task was made: `echo` is `required`.)
    flat = "task" not in created and "result" not in created and created.get("resultType") == "task"
    if not flat or created.get("status") not in DONE_OR_WORKING:
        raise BenchError(f"not a flat CreateTaskResult: {str(created)[:200]}")
    if not isinstance(task_id, str) or not isinstance(created.get("createdAt"), str):
        raise BenchError(f"CreateTaskResult without taskId or createdAt: {str(created)[:200]}")
    last: JsonObj = {}

    async def status() -> str:
        nonlocal last
        last = await client.modern("tasks/get", {"taskId": task_id}, task_id)
        if last.get("taskId") != task_id or last.get("resultType") != "complete":
            raise BenchError(f"tasks/get {task_id}: not its DetailedTask: {str(last)[:200]}")
        return str(last.get("status"))

    polls = await _until_completed(status, task_id)
    inlined = _check_text(last.get("result"), text)
    meta = inlined.get("_meta")
    if inlined.get("resultType") != "complete" or (isinstance(meta, dict) and RELATED_TASK in meta):
        raise BenchError(f"inlined result of {task_id} is not a plain result: {str(inlined)[:200]}")
    return polls + 1


OPS: dict[str, Op] = {
    "create": op_create,
    "lifecycle": op_lifecycle,
    "blocking": op_blocking,
    "modern": op_modern,
}
