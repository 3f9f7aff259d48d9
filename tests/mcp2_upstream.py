# mypy: ignore-errors
# (mcp 2.3 code: it runs under MCP2_PYTHON, not under the mcp 1.30 that mypy sees;
# pyproject.toml excludes tests/modern/ for the same reason.)
"""A real stateful upstream: Python mcp 2.3's MCPServer over Streamable HTTP in the SDK's
default mode (a session per initialize, answers on SSE streams, answers routed by request id
within their session), the server most operators will put behind the gateway.

Nothing here bends to the gateway: the tools ask at once and take the time they say, and
every answer goes where the SDK routes it. Two requests in flight with the same id in one
session are the SDK's to cross (it keys each POST's stream by id), which is what the replica
tests watch for. Each tool answers with the text it was given, so a caller that gives each call
a text of its own can tell its answer from another call's.

Run with mcp 2.3 (`helpers.MCP2_PYTHON`): `python tests/mcp2_upstream.py PORT`; Streamable HTTP
at http://127.0.0.1:PORT/mcp. With `--stdio` instead of a port: the SDK's stdio server.
"""

import sys

import anyio
from mcp.server.mcpserver import Context, MCPServer
from pydantic import BaseModel, Field

server = MCPServer("mcp2-stateful-upstream", version="1", log_level="WARNING")


class Name(BaseModel):
    name: str = Field(description="Your name")


@server.tool()
def echo(text: str) -> str:
    """Returns its input."""
    return text


@server.tool()
async def slow(text: str, ctx: Context, seconds: float = 0.3, steps: int = 3) -> str:
    """Works `seconds` in `steps`, reporting progress after each, then returns `text`."""
    for step in range(1, steps + 1):
        await anyio.sleep(seconds / steps)
        await ctx.report_progress(step, steps, f"step {step}/{steps}")
    return text


@server.tool()
async def ask(ctx: Context, text: str = "") -> str:
    """Asks for a name at once (elicitation), then greets it; `text` ends the greeting. It asks
    mid-call, so over a 2025-11-25 session: spoken to natively on 2026-07-28, it has no way to."""
    answer = await ctx.elicit("What is your name?", Name)
    if answer.action != "accept":
        return f"No answer ({answer.action}){text}"
    return f"Hello, {answer.data.name}!{text}"


if __name__ == "__main__":
    if sys.argv[1] == "--stdio":
        server.run("stdio")  # the SDK's stdio server, as a route's child
    else:
        # The SDK's defaults: stateful, SSE answers, 30 minutes' idle time, 10,000 sessions.
        server.run("streamable-http", host="127.0.0.1", port=int(sys.argv[1]))
