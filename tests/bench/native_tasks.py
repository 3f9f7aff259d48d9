"""The task benchmark's reference: a server that offers 2025-11-25 tasks itself, in memory.

The Python SDK 1.30's own task runtime (`server.experimental.enable_tasks()`: its
`InMemoryTaskStore` and message queue, as in the SDK's `simple-task` example) behind its
Streamable HTTP transport, with the benchmark's one tool, `echo`, run as a task when the call
asks for one. Nothing is durable and nothing is relayed: what a task lifecycle costs when
every step is local and in memory, which the gateway's durable lifecycle is compared with in
the same run (`tests/bench/tasks.py`). A script the benchmark starts as a subprocess::

    .venv/bin/python -m tests.bench.native_tasks PORT
"""

from __future__ import annotations

import contextlib
import sys
import warnings
from collections.abc import AsyncIterator
from typing import Any

import mcp.types as types
import uvicorn
from mcp.server.experimental.task_context import ServerTaskContext
from mcp.server.lowlevel import Server
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from starlette.applications import Starlette
from starlette.routing import Mount

HOST = "127.0.0.1"

server: Server[Any, Any] = Server("native-tasks")
with warnings.catch_warnings():
    # 1.30 marks its task runtime deprecated (tasks move to an extension in 2.x); it is still
    # the SDK's in-memory task server, which is what the reference must be.
    warnings.simplefilter("ignore", DeprecationWarning)
    server.experimental.enable_tasks()

ECHO = types.Tool(
    name="echo",
    description="Returns the text it was given.",
    inputSchema={"type": "object", "properties": {"text": {"type": "string"}}},
    execution=types.ToolExecution(taskSupport=types.TASK_OPTIONAL),
)


@server.list_tools()  # type: ignore[no-untyped-call,untyped-decorator]
async def list_tools() -> list[types.Tool]:
    return [ECHO]


@server.call_tool()  # type: ignore[untyped-decorator]
async def call_tool(name: str, arguments: dict[str, Any]) -> Any:
    text = str(arguments.get("text", ""))
    result = types.CallToolResult(content=[types.TextContent(type="text", text=text)])
    ctx = server.request_context
    if not ctx.experimental.is_task:
        return result

    async def work(task: ServerTaskContext) -> types.CallToolResult:
        return result

    return await ctx.experimental.run_task(work)


def main() -> None:
    port = int(sys.argv[1])
    # JSON answers, as the gateway gives a call that ends within its window.
    manager = StreamableHTTPSessionManager(server, json_response=True)

    @contextlib.asynccontextmanager
    async def lifespan(_: Starlette) -> AsyncIterator[None]:
        async with manager.run():
            yield

    app = Starlette(routes=[Mount("/mcp", app=manager.handle_request)], lifespan=lifespan)
    uvicorn.run(app, host=HOST, port=port, log_level="warning", access_log=False)


if __name__ == "__main__":
    main()
