"""Long tool calls as tasks from mcp 2.x, against the gateway's bundled demo.

    python -m gateway                       # in the gateway's checkout: the demo on port 8080
    python examples/tasks_demo.py [URL]     # URL: http://127.0.0.1:8080/demo/mcp by default

First a plain-looking `call_tool()` that the server turns into a task (its progress arrives as
status messages), then the same through a task handle, then a question (elicitation) answered
by the client's callback.
"""

from __future__ import annotations

import asyncio
import sys

from mcp import Client
from mcp.client.session import ClientRequestContext
from mcp.types import CallToolResult, ElicitRequestParams, ElicitResult, TextContent

from mcp_tasks_client import DetailedTask, TasksExtension, start_task


async def show(task: DetailedTask) -> None:
    print(f"  task {task.task_id[:8]}: {task.status} {task.status_message or ''}")


async def answer(context: ClientRequestContext, params: ElicitRequestParams) -> ElicitResult:
    print(f"  asked: {params.message}")
    return ElicitResult(action="accept", content={"name": "Ada"})


def text(result: CallToolResult) -> str:
    return " ".join(block.text for block in result.content if isinstance(block, TextContent))


async def main(url: str) -> None:
    tasks = TasksExtension(on_status=show)
    async with Client(url, extensions=[tasks], elicitation_callback=answer) as client:
        print("call_tool slow:")
        print("  ->", text(await client.call_tool("slow", {"seconds": 3, "steps": 3})))

        print("start_task slow:")
        task = await start_task(client, "slow", {"seconds": 2, "steps": 2})
        print("  id:", task.id)
        print("  status:", (await task.status()).status)
        print("  ->", text(await task.result()))

        print("call_tool ask:")
        print("  ->", text(await client.call_tool("ask", {})))


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1] if len(sys.argv) > 1 else "http://127.0.0.1:8080/demo/mcp"))
