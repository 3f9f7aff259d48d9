"""A legacy upstream built with the official SDK (mcp 1.30 FastMCP, tasks not enabled): tools,
a resource and a resource template (an unknown URI is -32002, as 2025-11-25 numbers it), a
prompt, and completions for the template's argument.

Run as `python tests/sdk_upstream.py PORT`: Streamable HTTP at http://127.0.0.1:PORT/mcp.
Tests start it as a child process, as an operator's existing server would run.
"""

import asyncio
import sys
from collections.abc import Iterable
from typing import Annotated

from mcp.server.elicitation import AcceptedElicitation
from mcp.server.fastmcp import Context, FastMCP
from mcp.server.lowlevel.helper_types import ReadResourceContents
from mcp.shared.exceptions import McpError
from mcp.types import (
    Completion,
    CompletionArgument,
    CompletionContext,
    ErrorData,
    PromptReference,
    ResourceTemplateReference,
    SamplingMessage,
    TextContent,
    ToolAnnotations,
)
from pydantic import AnyUrl, BaseModel, Field

server = FastMCP("sdk-legacy", host="127.0.0.1", port=int(sys.argv[1]) if len(sys.argv) > 1 else 0)


class Name(BaseModel):
    name: str


@server.tool()
def echo(text: str) -> str:
    """Returns its input."""
    return text


@server.tool()
async def slow(steps: int, ctx: Context, text: str = "") -> str:  # type: ignore[type-arg]
    """Reports progress for each step; answers `text`, if given, so a caller can tell its
    answer from another call's."""
    for i in range(steps):
        await ctx.report_progress(i + 1, steps, f"step {i + 1}/{steps}")
        await asyncio.sleep(0.05)
    return text or f"{steps} steps done"


@server.tool(annotations=ToolAnnotations(readOnlyHint=True))
async def slow_read(steps: int, ctx: Context) -> str:  # type: ignore[type-arg]
    """Like slow, and says it only reads (a gateway may run it again after a crash)."""
    for i in range(steps):
        await ctx.report_progress(i + 1, steps, f"step {i + 1}/{steps}")
        await asyncio.sleep(0.05)
    return f"{steps} steps read"


@server.tool()
async def ask(ctx: Context) -> str:  # type: ignore[type-arg]
    """Elicits a name from the user."""
    answer = await ctx.elicit("What is your name?", Name)
    return (
        f"Hello, {answer.data.name}!" if isinstance(answer, AcceptedElicitation) else answer.action
    )


@server.tool()
async def ask_both(ctx: Context) -> str:  # type: ignore[type-arg]
    """Works a moment, then asks two questions at once and waits for both."""
    # A tool that works before it asks, as real ones do: its questions come after the sync
    # window, so a 2026-07-28 call is a task by then; `ask` asks at once (an MRTR round).
    await asyncio.sleep(0.5)
    first, second = await asyncio.gather(
        ctx.elicit("First name?", Name), ctx.elicit("Last name?", Name)
    )
    names = [
        a.data.name if isinstance(a, AcceptedElicitation) else a.action for a in (first, second)
    ]
    return " ".join(names)


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


@server.tool()
def lookup(
    region: Annotated[str, Field(json_schema_extra={"x-mcp-header": "Region"})],
    query: str,
    limit: Annotated[int, Field(json_schema_extra={"x-mcp-header": "Limit"})] = 10,
) -> str:
    """Looks `query` up in `region`; region and limit are mirrored as Mcp-Param headers."""
    return f"{query} in {region} (at most {limit})"


@server.resource("demo://greeting", mime_type="text/plain")
def greeting() -> str:
    """A fixed text."""
    return "Hello from a resource"


@server.resource("demo://items/{item}", mime_type="text/plain")
def item(item: str) -> str:
    """One item, by name."""
    return f"item {item}"


@server.prompt()
def review(code: str) -> str:
    """Asks for a review of `code`."""
    return f"Review this code: {code}"


ITEMS = ("apple", "apricot", "banana")


@server.completion()  # type: ignore[no-untyped-call, untyped-decorator]
async def complete(
    ref: PromptReference | ResourceTemplateReference,
    argument: CompletionArgument,
    context: CompletionContext | None,
) -> Completion | None:
    if argument.name != "item":
        return None
    return Completion(values=[name for name in ITEMS if name.startswith(argument.value)])


# FastMCP's own read, except that an unknown URI is -32002, as 2025-11-25 has it (not 0).
@server._mcp_server.read_resource()  # type: ignore[no-untyped-call, untyped-decorator]
async def read_resource(uri: AnyUrl) -> Iterable[ReadResourceContents]:
    try:
        return await server.read_resource(uri)
    except ValueError as exc:  # the resource manager's "Unknown resource"
        error = ErrorData(code=-32002, message="Resource not found", data={"uri": str(uri)})
        raise McpError(error) from exc


if __name__ == "__main__":
    server.run("streamable-http")
