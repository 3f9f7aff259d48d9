"""A task-unaware MCP server core: the legacy upstream the gateway puts tasks in front of.

`LegacyServer` speaks JSON-RPC as dicts through `handle()` (in) and a `send` callback (out), so
the stdio demo and the HTTP fakes in tests wrap the same core. Like servers written before MCP
Tasks, it ignores `params.task` and answers `tasks/*` with -32601.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from pydantic import BaseModel

from gateway.protocol.errors import INVALID_PARAMS, METHOD_NOT_FOUND
from gateway.protocol.versions import SUPPORTED_PROTOCOL_VERSIONS

logger = logging.getLogger(__name__)

PROTOCOL_VERSIONS = SUPPORTED_PROTOCOL_VERSIONS
LOG_LEVELS = ("debug", "info", "notice", "warning", "error", "critical", "alert", "emergency")


RequestId = str | int
Message = dict[str, Any]
Send = Callable[[Message], Awaitable[None]]
ArgsT = TypeVar("ArgsT", bound=BaseModel)


class RpcError(Exception):
    """Raised by a tool, or by a server->client request, to mean a JSON-RPC error."""

    def __init__(self, code: int, message: str, data: Any = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.data = data

    def to_json(self) -> Message:
        error: Message = {"code": self.code, "message": self.message}
        if self.data is not None:
            error["data"] = self.data
        return error


@dataclass(frozen=True)
class Tool(Generic[ArgsT]):
    """A tool: its arguments model doubles as the advertised input schema."""

    name: str
    description: str
    arguments: type[ArgsT]
    run: Callable[[ToolContext, ArgsT], Awaitable[Message]]

    def describe(self) -> Message:
        return {
            "name": self.name,
            "description": self.description,
            "inputSchema": self.arguments.model_json_schema(),
        }


def text_result(text: str, *, structured: Message | None = None, is_error: bool = False) -> Message:
    """A CallToolResult carrying one text block."""
    result: Message = {"content": [{"type": "text", "text": text}], "isError": is_error}
    if structured is not None:
        result["structuredContent"] = structured
    return result


class ToolContext:
    """What a running tool may do towards the client that called it."""

    def __init__(self, server: LegacyServer, progress_token: RequestId | None) -> None:
        self._server = server
        self._progress_token = progress_token

    async def progress(
        self, progress: float, total: float | None = None, message: str | None = None
    ) -> None:
        # Without a token the caller could not match the notification, so the spec says stay quiet.
        if self._progress_token is None:
            return
        params = {"progressToken": self._progress_token, "progress": progress}
        params |= {k: v for k, v in (("total", total), ("message", message)) if v is not None}
        await self._server.notify("notifications/progress", params)

    async def elicit(self, message: str, requested_schema: Message) -> Message:
        params = {"message": message, "requestedSchema": requested_schema}
        return await self._server.request("elicitation/create", params)

    async def sample(self, prompt: str, max_tokens: int = 100) -> Message:
        message = {"role": "user", "content": {"type": "text", "text": prompt}}
        params = {"messages": [message], "maxTokens": max_tokens}
        return await self._server.request("sampling/createMessage", params)

    async def list_roots(self) -> Message:
        return await self._server.request("roots/list", {})

    async def log(self, level: str, data: Any) -> None:
        await self._server.log(level, data)


class LegacyServer:
    """One client session of a plain MCP server; feed it messages, it answers through `send`."""

    def __init__(
        self,
        tools: Sequence[Tool[Any]],
        send: Send,
        versions: Sequence[str] = PROTOCOL_VERSIONS,
    ) -> None:
        self._versions = tuple(versions)
        self._tools = {tool.name: tool for tool in tools}
        self._send = send
        self._ids = itertools.count(1)
        self._pending: dict[RequestId, asyncio.Future[Message]] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._calls: dict[RequestId, asyncio.Task[None]] = {}
        self._min_log_level = 0

    async def handle(self, message: Message) -> None:
        """Process one incoming message; tool calls run in the background, so this never blocks."""
        method = message.get("method")
        params = message.get("params")
        params = {} if params is None else params
        if method is None:
            self._resolve(message)
        elif not isinstance(params, dict):
            # As an SDK server answers: a request left unanswered here would hold its
            # caller until the gateway's time limit, and a raise would end the server.
            if "id" in message:
                error = RpcError(INVALID_PARAMS, "params must be an object").to_json()
                await self._send({"jsonrpc": "2.0", "id": message["id"], "error": error})
        elif "id" not in message:
            if method == "notifications/cancelled":
                requested = params.get("requestId")
                call = self._calls.get(requested) if isinstance(requested, int | str) else None
                if call is not None:
                    call.cancel()
        elif method == "tools/call" and message["id"] in self._calls:
            # As strict as an SDK server: one answer could not tell two calls apart.
            error = {"code": -32600, "message": "a call with this id is already in flight"}
            await self._send({"jsonrpc": "2.0", "id": message["id"], "error": error})
        elif method == "tools/call":
            self._start_call(message["id"], params)
        else:
            await self._answer(message["id"], method, params)

    async def close(self) -> None:
        """Cancel running tool calls and waiting server->client requests."""
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        for future in self._pending.values():
            future.cancel()

    async def request(self, method: str, params: Message) -> Message:
        """Send a server->client request and wait for the client's result.

        Raises:
            RpcError: the client answered with an error.
        """
        request_id = next(self._ids)
        future: asyncio.Future[Message] = asyncio.get_running_loop().create_future()
        self._pending[request_id] = future
        try:
            await self._send(
                {"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}
            )
            return await future
        finally:
            del self._pending[request_id]

    async def notify(self, method: str, params: Message) -> None:
        await self._send({"jsonrpc": "2.0", "method": method, "params": params})

    async def log(self, level: str, data: Any) -> None:
        if LOG_LEVELS.index(level) >= self._min_log_level:
            await self.notify("notifications/message", {"level": level, "data": data})

    def _resolve(self, response: Message) -> None:
        future = self._pending.get(response.get("id", ""))
        if future is None or future.done():
            logger.warning("dropping a response to no pending request: %r", response)
        elif "error" in response:
            error = response["error"]
            future.set_exception(RpcError(error["code"], error["message"], error.get("data")))
        else:
            future.set_result(response.get("result", {}))

    def _local(self, method: str, params: Message) -> Message:
        if method == "initialize":
            asked = params.get("protocolVersion")
            version = asked if asked in self._versions else self._versions[-1]
            return {
                "protocolVersion": version,
                "capabilities": {"tools": {"listChanged": False}, "logging": {}},
                "serverInfo": {"name": "gateway-demo", "version": "0.1.0"},
            }
        if method == "ping":
            return {}
        if method == "tools/list":
            return {"tools": [tool.describe() for tool in self._tools.values()]}
        if method == "logging/setLevel":
            if params.get("level") not in LOG_LEVELS:
                raise RpcError(INVALID_PARAMS, f"Unknown log level: {params.get('level')}")
            self._min_log_level = LOG_LEVELS.index(params["level"])
            return {}
        raise RpcError(METHOD_NOT_FOUND, f"Method not found: {method}")

    async def _answer(self, request_id: RequestId, method: str, params: Message) -> None:
        try:
            if method == "tools/call":
                result = await self._call(params)
            else:
                result = self._local(method, params)
        except RpcError as exc:
            await self._send({"jsonrpc": "2.0", "id": request_id, "error": exc.to_json()})
        else:
            await self._send({"jsonrpc": "2.0", "id": request_id, "result": result})

    def _start_call(self, request_id: RequestId, params: Message) -> None:
        # _tasks owns the task until it ends; _calls only lets notifications/cancelled find it.
        task = asyncio.create_task(self._answer(request_id, "tools/call", params))  # noqa: TID251
        self._tasks.add(task)
        self._calls[request_id] = task
        task.add_done_callback(lambda done: self._forget(request_id, done))

    def _forget(self, request_id: RequestId, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        if self._calls.get(request_id) is task:
            del self._calls[request_id]
        if not task.cancelled() and task.exception() is not None:
            logger.error("could not answer call %r", request_id, exc_info=task.exception())

    async def _call(self, params: Message) -> Message:
        name = params.get("name")
        tool = self._tools.get(name) if isinstance(name, str) else None
        if tool is None:
            raise RpcError(INVALID_PARAMS, f"Unknown tool: {name}")
        meta = params.get("_meta")
        progress_token = meta.get("progressToken") if isinstance(meta, dict) else None
        try:
            arguments = tool.arguments.model_validate(params.get("arguments") or {})
            return await tool.run(ToolContext(self, progress_token), arguments)
        except RpcError:
            raise
        except Exception as exc:
            # A failing tool is a result the model can read, not a protocol failure.
            return text_result(f"{type(exc).__name__}: {exc}", is_error=True)
