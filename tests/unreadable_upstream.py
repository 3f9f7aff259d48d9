"""Upstream output the gateway cannot read, for tests: the broken answers, and a stdio MCP
server that sends them.

`python tests/unreadable_upstream.py` answers the tools in `BROKEN` with the broken message of
that name and every other tool normally, with its process id as the text, so a test can tell
that the same child lived on. The HTTP fakes in test_upstream_output.py send the same answers.
"""

import json
import os
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from gateway.upstream.unreadable import MAX_LINE_BYTES

BROKEN = ("deep", "not_utf8", "too_long", "nameless")
TOOLS = ("pid", "bare_cr", "split_crlf", *BROKEN)


def broken_answer(kind: str, request_id: int | str) -> bytes:
    """An answer to `request_id` that the gateway cannot read, without a line end."""
    start = b'{"jsonrpc": "2.0", "id": ' + json.dumps(request_id).encode() + b', "result": '
    if kind == "deep":  # far beyond any JSON parser's nesting limit
        return start + b'{"content": ' + b"[" * 100_000 + b"]" * 100_000 + b"}}"
    if kind == "not_utf8":  # Latin-1 where UTF-8 belongs
        return start + b'{"content": [{"type": "text", "text": "caf\xe9"}]}}'
    if kind == "too_long":
        text = b"x" * MAX_LINE_BYTES
        return start + b'{"content": [{"type": "text", "text": "' + text + b'"}]}}'
    if kind == "nameless":  # without its id, no call can be matched to it
        return b'{"jsonrpc": "2.0", "result": {"content": []}}'
    raise ValueError(kind)


def answer(message: dict[str, Any]) -> bytes:
    """The answer to one request, as one line without its end."""
    method, params = message["method"], message.get("params") or {}
    if method == "tools/call" and params["name"] in BROKEN:
        return broken_answer(params["name"], message["id"])
    result: dict[str, Any] = {}
    if method == "initialize":
        result = {
            "protocolVersion": params["protocolVersion"],
            "capabilities": {"tools": {}},
            "serverInfo": {"name": "unreadable", "version": "1"},
        }
    elif method == "tools/list":
        result = {"tools": [{"name": name, "inputSchema": {"type": "object"}} for name in TOOLS]}
    elif method == "tools/call":
        result = {"content": [{"type": "text", "text": str(os.getpid())}]}
    return json.dumps({"jsonrpc": "2.0", "id": message["id"], "result": result}).encode()


def main() -> None:
    # Bends on purpose (fault injection): it answers each request before it reads the next,
    # so no two are ever in flight, and sends what no server should.
    for line in sys.stdin.buffer:
        message = json.loads(line)
        if "method" in message and "id" in message:
            sys.stdout.buffer.write(answer(message) + b"\n")
            sys.stdout.buffer.flush()


if __name__ == "__main__":
    main()
