"""A legacy upstream built with the official SDK (mcp 1.30 FastMCP, tasks not enabled).

Run as `python tests/sdk_upstream.py PORT`: Streamable HTTP at http://127.0.0.1:PORT/mcp.
Tests start it as a child process, as an operator's existing server would run.
"""

import asyncio
import sys

from mcp.server.elicitation import AcceptedElicitation
from mcp.server.fastmcp import Context, FastMCP
from mcp.types import SamplingMessage, TextContent
from pydantic import BaseModel

server = FastMCP("sdk-legacy", host="127.0.0.1", port=int(sys.argv[1]) if len(sys.argv) > 1 else 0)


class Name(BaseModel):
    name: str


@server.tool()
def echo(text: str) -> str:
    """Returns its input."""
    return text


@server.tool()
async def slow(steps: int, ctx: Context) -> str:  # type: ignore[type-arg]
    """Reports progress for each step."""
    for i in range(steps):
        await ctx.report_progress(i + 1, steps, f"step {i + 1}/{steps}")
        await asyncio.sleep(0.05)
    return f"{steps} steps done"


@server.tool()
async def ask(ctx: Context) -> str:  # type: ignore[type-arg]
    """Elicits a name from the user."""
    answer = await ctx.elicit("What is your name?", Name)
    return (
        f"Hello, {answer.data.name}!" if isinstance(answer, AcceptedElicitation) else answer.action
    )


@server.tool()
async def sample(prompt: str, ctx: Context) -> str:  # type: ignore[type-arg]
    """Asks the client's model."""
    reply = await ctx.session.create_message(
        [SamplingMessage(role="user", content=TextContent(type="text", text=prompt))], max_tokens=50
    )
    assert isinstance(reply.content, TextContent)
    return reply.content.text


@server.tool()
def fail() -> str:
    """Raises, which the SDK turns into an isError result."""
    raise ValueError("the tool failed on purpose")


if __name__ == "__main__":
    server.run("streamable-http")
