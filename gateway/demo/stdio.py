"""`python -m gateway.demo`: the demo legacy MCP server on stdio, an upstream to try the gateway on.

Messages are newline-delimited JSON-RPC on stdin/stdout; logs go to stderr so they cannot corrupt
the stream. The server exits when stdin reaches EOF, i.e. when its client goes away.
"""

import argparse
import asyncio
import json
import logging
import sys
import threading
from collections.abc import Sequence
from typing import Any

from gateway.demo.server import PROTOCOL_VERSIONS, LegacyServer, Tool
from gateway.demo.tools import DEMO_TOOLS

logger = logging.getLogger("gateway.demo")

PARSE_ERROR = -32700


def _read_lines(loop: asyncio.AbstractEventLoop, lines: asyncio.Queue[bytes]) -> None:
    # Blocking reads work for every kind of stdin (pipe, tty, file), unlike connect_read_pipe;
    # the empty line at EOF tells the server to stop.
    for line in iter(sys.stdin.buffer.readline, b""):
        loop.call_soon_threadsafe(lines.put_nowait, line)
    loop.call_soon_threadsafe(lines.put_nowait, b"")


async def serve_stdio(
    tools: Sequence[Tool[Any]] = DEMO_TOOLS, versions: Sequence[str] = PROTOCOL_VERSIONS
) -> None:
    """Serve `tools` on this process's stdin/stdout until stdin closes."""
    lines: asyncio.Queue[bytes] = asyncio.Queue()
    # A daemon thread, so a read still blocked at exit does not keep the process alive.
    reader = threading.Thread(
        target=_read_lines, args=(asyncio.get_running_loop(), lines), daemon=True
    )
    reader.start()

    async def send(message: dict[str, Any]) -> None:
        # One write call per message keeps lines whole; a blocking stdout only stalls us when
        # the client stops reading, and then nothing can be delivered anyway.
        sys.stdout.buffer.write(json.dumps(message, separators=(",", ":")).encode() + b"\n")
        sys.stdout.buffer.flush()

    server = LegacyServer(tools, send, versions)
    logger.info("serving %d tools on stdio", len(tools))
    try:
        while line := await lines.get():
            if not line.strip():
                continue
            try:
                message = json.loads(line)
            except json.JSONDecodeError as exc:
                error = {"code": PARSE_ERROR, "message": f"Parse error: {exc}"}
                await send({"jsonrpc": "2.0", "id": None, "error": error})
                continue
            await server.handle(message)
    finally:
        await server.close()
    logger.info("stdin closed, exiting")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--transport", choices=["stdio"], default="stdio")
    parser.parse_args()
    logging.basicConfig(stream=sys.stderr, level=logging.INFO, format="%(name)s: %(message)s")
    asyncio.run(serve_stdio())
