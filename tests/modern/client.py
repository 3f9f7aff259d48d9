"""Runs under mcp 2.3 (a separate venv: it conflicts with mcp 1.30): one client session
against URL in MODE, printing one JSON line of what happened.

    python tests/modern/client.py URL MODE     MODE: auto | legacy | 2026-07-28
"""

import asyncio
import json
import sys
from typing import Any

from mcp import Client
from mcp.shared.exceptions import MCPError


async def main(url: str, mode: str) -> dict[str, Any]:
    try:
        async with Client(url, mode=mode) as client:  # type: ignore[arg-type]
            tools = await client.list_tools()
            result = await client.call_tool("echo", {"text": "modern"})
            return {
                "protocol_version": client.protocol_version,
                "tools": sorted(tool.name for tool in tools.tools),
                "echo": [part.model_dump(mode="json") for part in result.content],
            }
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
    print(json.dumps(asyncio.run(main(sys.argv[1], sys.argv[2]))))
