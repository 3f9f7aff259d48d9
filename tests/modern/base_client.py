"""Runs under mcp 2.3 (a separate venv: it conflicts with mcp 1.30): one 2026-07-28 client
against URL, a gateway route in front of tests/sdk_upstream.py, using resources, prompts,
completions and a tool whose arguments are mirrored as Mcp-Param headers; prints one JSON
line of what it got.

    python tests/modern/base_client.py URL
"""

import asyncio
import json
import sys
from typing import Any

from mcp import Client
from mcp.shared.exceptions import MCPError
from mcp.types import ResourceTemplateReference


async def main(url: str) -> dict[str, Any]:
    async with Client(url, mode="2026-07-28") as client:  # type: ignore[arg-type]
        resources = await client.list_resources()
        templates = await client.list_resource_templates()
        read = await client.read_resource("demo://items/pear")
        prompts = await client.list_prompts()
        prompt = await client.get_prompt("review", {"code": "x = 1"})
        ref = ResourceTemplateReference(type="ref/resource", uri="demo://items/{item}")
        completed = await client.complete(ref, {"name": "item", "value": "ap"})
        await client.list_tools()  # the client learns which arguments go in headers
        # Non-ASCII: the client sends Mcp-Param-Region as a base64 sentinel.
        looked_up = await client.call_tool("lookup", {"region": "Zürich", "query": "q", "limit": 3})
        try:
            await client.read_resource("demo://missing")
            missing: int | None = None
        except MCPError as exc:
            missing = exc.error.code
        return {
            "protocol_version": client.protocol_version,
            "resources": [r.uri for r in resources.resources],
            "templates": [t.uri_template for t in templates.resource_templates],
            "read": [c.model_dump(mode="json") for c in read.contents],
            "prompts": [p.name for p in prompts.prompts],
            "prompt": [m.model_dump(mode="json") for m in prompt.messages],
            "completion": completed.completion.values,
            "lookup": [c.model_dump(mode="json") for c in looked_up.content],
            "lookup_error": looked_up.is_error,
            "missing": missing,
        }


if __name__ == "__main__":
    print(json.dumps(asyncio.run(main(sys.argv[1]))))
