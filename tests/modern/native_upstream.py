"""An upstream that speaks 2026-07-28 itself (mcp 2.3's MCPServer), for `upstream.modern:
native`: its tools do their own MRTR (they return an InputRequiredResult and read the retry's
input responses), as servers written for 2026-07-28 do.

Run with mcp 2.3 (its own venv): `python tests/modern/native_upstream.py PORT`; Streamable HTTP
at http://127.0.0.1:PORT/mcp.
"""

import asyncio
import sys

from mcp.server.mcpserver import Context, MCPServer
from mcp.types import ElicitRequest, ElicitRequestFormParams, ElicitResult, InputRequiredResult

NAME_SCHEMA = {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}
server = MCPServer("native-upstream")


def _ask(message: str) -> ElicitRequest:
    return ElicitRequest(
        params=ElicitRequestFormParams(message=message, requested_schema=NAME_SCHEMA)
    )


def _name(ctx: Context, key: str) -> str | None:
    answer = (ctx.input_responses or {}).get(key)
    if isinstance(answer, ElicitResult) and answer.content:
        return str(answer.content.get("name"))
    return None


@server.tool()
async def greet(ctx: Context) -> str | InputRequiredResult:
    """Asks for a name in an MRTR round, then greets."""
    name = _name(ctx, "who")
    if name is None:
        return InputRequiredResult(input_requests={"who": _ask("Who are you?")})
    return f"Hello, {name}!"


@server.tool()
async def slow_greet(seconds: float, ctx: Context) -> str | InputRequiredResult:
    """Works, then asks (an MRTR round), then works again and greets."""
    name = _name(ctx, "who")
    await asyncio.sleep(seconds)
    if name is None:
        return InputRequiredResult(input_requests={"who": _ask("Who are you?")})
    return f"Hello at last, {name}!"


@server.tool()
async def slow(seconds: float, ctx: Context) -> str:
    """Reports progress in three steps."""
    for step in range(1, 4):
        await asyncio.sleep(seconds / 3)
        await ctx.report_progress(step, 3, f"step {step}/3")
    return f"slept {seconds:g} s"


server.run("streamable-http", host="127.0.0.1", port=int(sys.argv[1]))
