"""Runs under mcp 2.3 (a separate venv: it conflicts with mcp 1.30): one client session
against URL in MODE, printing one JSON line of what happened.

    python tests/modern/client.py URL MODE [ACTION]     MODE: auto | legacy | 2026-07-28

ACTION (default `echo`): `echo` lists the tools and calls echo (`echo:NAME` calls the tool
NAME with echo's arguments, for a route that renames it); `ask`, `sample` and `roots`
call the demo tool of that name with the client's elicitation, sampling or roots callback
set, which answers with ANSWERS and records each question it gets (`asked`). On the
2026-07-28 path the questions come as MRTR rounds (InputRequiredResult, then a retry), which
the client drives inside `call_tool`.
"""

import asyncio
import json
import sys
from typing import Any

from mcp import Client, types
from mcp.shared.exceptions import MCPError

#: What the callbacks answer, so the caller can find it in the tool's result.
ANSWERS = {"name": "mcp-2.3", "sampled": "sampled by mcp 2.3", "root": "file:///mcp-2.3"}


async def echo(url: str, mode: str, tool: str = "echo") -> dict[str, Any]:
    async with Client(url, mode=mode) as client:  # type: ignore[arg-type]
        tools = await client.list_tools()
        result = await client.call_tool(tool, {"text": "modern"})
        return {
            "protocol_version": client.protocol_version,
            "tools": sorted(tool.name for tool in tools.tools),
            "echo": [part.model_dump(mode="json") for part in result.content],
        }


async def ask(url: str, mode: str, action: str) -> dict[str, Any]:
    """Call the tool `action` with the one callback it needs; record what was asked."""
    action, _, tool = action.partition(":")
    asked: list[dict[str, Any]] = []

    async def elicitation(_: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        asked.append(params.model_dump(mode="json", by_alias=True, exclude_none=True))
        return types.ElicitResult(action="accept", content={"name": ANSWERS["name"]})

    async def sampling(
        _: Any, params: types.CreateMessageRequestParams
    ) -> types.CreateMessageResult:
        asked.append(params.model_dump(mode="json", by_alias=True, exclude_none=True))
        text = types.TextContent(type="text", text=ANSWERS["sampled"])
        return types.CreateMessageResult(role="assistant", content=text, model="mcp-2.3-test")

    async def roots(_: Any) -> types.ListRootsResult:
        asked.append({"method": "roots/list"})
        return types.ListRootsResult(roots=[types.Root(uri=ANSWERS["root"], name="mcp-2.3")])

    callbacks: dict[str, Any] = {
        "ask": {"elicitation_callback": elicitation},
        "sample": {"sampling_callback": sampling},
        "roots": {"list_roots_callback": roots},
    }[action]
    arguments = {"sample": {"prompt": "Say something."}}.get(action, {})
    async with Client(url, mode=mode, **callbacks) as client:  # type: ignore[arg-type]
        result = await client.call_tool(tool or action, arguments)
        return {
            "protocol_version": client.protocol_version,
            "asked": asked,
            "content": [part.model_dump(mode="json") for part in result.content],
            "is_error": result.is_error,
        }


async def main(url: str, mode: str, action: str = "echo") -> dict[str, Any]:
    try:
        if action == "echo" or action.startswith("echo:"):
            return await echo(url, mode, action.partition(":")[2] or "echo")
        return await ask(url, mode, action)
    except (MCPError, BaseExceptionGroup) as exc:
        error = _mcp_error(exc)
        return {
            "error": {
                "code": error.error.code,
                "message": error.error.message,
                "data": error.error.data,
            }
        }


def _mcp_error(exc: BaseException) -> MCPError:
    """The MCPError itself, or the one inside the task group's exception group."""
    if isinstance(exc, MCPError):
        return exc
    if isinstance(exc, BaseExceptionGroup):
        for inner in exc.exceptions:
            try:
                return _mcp_error(inner)
            except LookupError:
                continue
    raise LookupError("no MCPError") from exc


if __name__ == "__main__":
    print(json.dumps(asyncio.run(main(*sys.argv[1:4]))))
