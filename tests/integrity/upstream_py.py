# mypy: ignore-errors
# (mcp 2.3 code: it runs in .cache/conformance/everything-venv, not under the mcp 1.30 that
# mypy sees, as tests/modern/ and tests/conformance/tasks_fixture.py do.)
"""The integrity harness's Python upstream: mcp 2.3's MCPServer, with the harness's six tools.

Run under mcp 2.3 (MCP2_PYTHON in tests/helpers.py)::

    python tests/integrity/upstream_py.py --http PORT    # stateful Streamable HTTP at /mcp
    python tests/integrity/upstream_py.py --stdio        # one session on stdin/stdout
    python tests/integrity/upstream_py.py --fork-server SOCKET   # --stdio children, forked

The SDK's defaults everywhere: sessions (stateful), answers on an SSE stream per POST, the
tools' answers as the SDK shapes them. Each tool takes a `nonce`, unique per call, and puts it
in its answer, so a result read through the gateway can be matched to the call that made it.
Every run appends JSON lines to the file named by INTEGRITY_RUNS (`evidence.Runs` reads them):
`start` when the tool begins, then `end` or `cancelled`, each with the JSON-RPC id and the
upstream session the call came in, and which upstream this is (`py-http` or `py-stdio`, the
harness's names). One `os.write` per line on an O_APPEND descriptor: lines of concurrent
processes never interleave.
"""

import json
import os
import signal
import socket
import sys
import time

import anyio
from mcp.server.mcpserver import Context, MCPServer
from mcp.shared.exceptions import MCPError
from mcp.types import CallToolResult, TextContent
from pydantic import BaseModel, Field

ERROR_CODE = -32050
UPSTREAM = "py-http" if sys.argv[1:2] == ["--http"] else "py-stdio"
_RUNS = os.open(os.environ["INTEGRITY_RUNS"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)


def _note(ctx: Context, nonce: str, tool: str, event: str) -> None:
    """One line: the call (its nonce), what happened, and the JSON-RPC id it came with in
    which upstream session (the Mcp-Session-Id; over stdio, the process: one session)."""
    request = ctx.request_context.request
    headers = getattr(request, "headers", None)
    session = headers.get("mcp-session-id") if headers is not None else f"stdio:{os.getpid()}"
    line = {
        "nonce": nonce,
        "upstream": UPSTREAM,
        "tool": tool,
        "event": event,
        "pid": os.getpid(),
        "t": time.time(),
        "session": session,
        "id": ctx.request_context.request_id,
    }
    os.write(_RUNS, (json.dumps(line) + "\n").encode())


class Answer(BaseModel):
    answer: str = Field(description="Any text")


server = MCPServer("integrity-py", log_level="WARNING")


@server.tool()
async def instant(nonce: str, ctx: Context) -> str:
    """Answers at once."""
    _note(ctx, nonce, "instant", "start")
    _note(ctx, nonce, "instant", "end")
    return f"instant:{nonce}"


@server.tool()
async def slow(nonce: str, ms: int, steps: int, ctx: Context) -> str:
    """Reports `steps` progress notifications over `ms` milliseconds, then answers."""
    _note(ctx, nonce, "slow", "start")
    try:
        for step in range(1, steps + 1):
            await anyio.sleep(ms / 1000 / steps)
            await ctx.report_progress(step, steps, f"step {step}/{steps}")
    except anyio.get_cancelled_exc_class():
        _note(ctx, nonce, "slow", "cancelled")
        raise
    _note(ctx, nonce, "slow", "end")
    return f"slow:{nonce}"


@server.tool()
async def ask(nonce: str, ctx: Context) -> str:
    """Asks a question first thing (elicitation, a form of one string), then answers with it."""
    _note(ctx, nonce, "ask", "start")
    try:
        reply = await ctx.elicit(f"ask:{nonce}", Answer)
    except anyio.get_cancelled_exc_class():
        _note(ctx, nonce, "ask", "cancelled")
        raise
    _note(ctx, nonce, "ask", "end")
    if reply.action != "accept":
        return f"ask:{nonce}:({reply.action})"
    return f"ask:{nonce}:{reply.data.answer}"


@server.tool()
async def fail(nonce: str, ctx: Context) -> CallToolResult:
    """A tool error: an isError result."""
    _note(ctx, nonce, "fail", "start")
    _note(ctx, nonce, "fail", "end")
    return CallToolResult(content=[TextContent(type="text", text=f"fail:{nonce}")], is_error=True)


@server.tool()
async def error(nonce: str, ctx: Context) -> str:
    """A JSON-RPC error answer."""
    _note(ctx, nonce, "error", "start")
    _note(ctx, nonce, "error", "end")
    raise MCPError(code=ERROR_CODE, message=f"error:{nonce}")


@server.tool()
async def hang(nonce: str, ms: int, ctx: Context) -> str:
    """Sleeps `ms` milliseconds (the harness cancels it long before)."""
    _note(ctx, nonce, "hang", "start")
    try:
        await anyio.sleep(ms / 1000)
    except anyio.get_cancelled_exc_class():
        _note(ctx, nonce, "hang", "cancelled")
        raise
    _note(ctx, nonce, "hang", "end")
    return f"hang:{nonce}"


def fork_server(path: str) -> None:
    """Serve `stdio_fork.py`: for each launcher that connects, fork a child that serves the
    stdio server on the stdin and stdout it passed; its pid goes back to the launcher."""
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # children reaped as they exit
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path + ".new")
    listener.listen(64)
    os.rename(path + ".new", path)  # there once it takes connections
    while True:
        conn, _ = listener.accept()
        with conn:
            _, fds, _, _ = socket.recv_fds(conn, 16, 2)
            pid = os.fork()
            if pid == 0:
                listener.close()
                signal.signal(signal.SIGCHLD, signal.SIG_DFL)
                for fd, target in zip(fds, (0, 1), strict=True):
                    os.dup2(fd, target)
                    os.close(fd)
                try:
                    server.run("stdio")
                finally:
                    os._exit(0)
            for fd in fds:
                os.close(fd)
            conn.sendall(f"{pid}\n".encode())


if __name__ == "__main__":
    if sys.argv[1:2] == ["--stdio"]:
        server.run("stdio")
    elif sys.argv[1:2] == ["--fork-server"] and len(sys.argv) == 3:
        fork_server(sys.argv[2])
    elif sys.argv[1:2] == ["--http"] and len(sys.argv) == 3:
        server.run("streamable-http", host="127.0.0.1", port=int(sys.argv[2]))
    else:
        sys.exit("usage: upstream_py.py --http PORT | --stdio | --fork-server SOCKET")
