"""What each upstream answers, asked directly (no gateway): the reference every result is held to.

Each tool of each upstream is called once over the transport the gateway uses (a 2025-11-25
session over Streamable HTTP; the stdio child on its pipes), with a probe nonce, and its whole
answer (the JSON-RPC `result` or `error` object) is kept as text. The answer to any other call
is that text with the probe nonce replaced by the call's: the tools put nothing else of the
call in their answers, so this is exactly what the upstream answers to that call, and a result
read through the gateway must equal it, byte for byte once the gateway's own `_meta` is taken
out (`Templates.expect`).
"""

from __future__ import annotations

import asyncio
import json
import os
from dataclasses import dataclass, field

import aiohttp

from tests.integrity.calls import JsonObj, answer_for, nonce
from tests.integrity.wire import LEGACY, legacy_headers, post

PROBED = ("instant", "slow", "ask", "fail", "error")
INIT = {
    "protocolVersion": LEGACY,
    "capabilities": {"elicitation": {}},
    "clientInfo": {"name": "integrity-probe", "version": "1"},
}


def arguments(tool: str, value: str) -> JsonObj:
    args: JsonObj = {"nonce": value}
    if tool == "slow":
        args.update(ms=30, steps=2)
    return args


def _answer(request: JsonObj, value: str) -> JsonObj:
    content = {"answer": answer_for(value)}
    return {
        "jsonrpc": "2.0",
        "id": request["id"],
        "result": {"action": "accept", "content": content},
    }


@dataclass
class Templates:
    """Per (upstream, tool): the answer's kind ("result" or "error") and its text."""

    probe: str = field(default_factory=nonce)
    answers: dict[tuple[str, str], tuple[str, str]] = field(default_factory=dict)

    def keep(self, upstream: str, tool: str, answer: JsonObj) -> None:
        kind = "error" if "error" in answer else "result"
        self.answers[upstream, tool] = (kind, json.dumps(answer[kind]))

    def expect(self, upstream: str, tool: str, value: str) -> tuple[str, JsonObj]:
        kind, text = self.answers[upstream, tool]
        return kind, json.loads(text.replace(self.probe, value))


async def probe_http(http: aiohttp.ClientSession, upstream: str, url: str, out: Templates) -> None:
    init = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": INIT}
    reply = await post(http, url, upstream, init, legacy_headers(None, None))
    session = reply.headers["mcp-session-id"]
    hdrs = legacy_headers(None, session)
    await post(http, url, upstream, {"jsonrpc": "2.0", "method": "notifications/initialized"}, hdrs)
    answering: set[asyncio.Task[object]] = set()

    def on_message(message: JsonObj) -> None:
        if message.get("method") == "elicitation/create":
            answer = _answer(message, out.probe)
            sent = asyncio.ensure_future(post(http, url, upstream, answer, hdrs))
            answering.add(sent)
            sent.add_done_callback(answering.discard)

    for n, tool in enumerate(PROBED, 2):
        params = {"name": tool, "arguments": arguments(tool, out.probe)}
        params["_meta"] = {"progressToken": f"probe-{n}"}
        message = {"jsonrpc": "2.0", "id": n, "method": "tools/call", "params": params}
        reply = await post(http, url, upstream, message, hdrs, on_message)
        out.keep(upstream, tool, reply.answer)


async def probe_stdio(upstream: str, command: list[str], runs: str, out: Templates) -> None:
    proc = await asyncio.create_subprocess_exec(
        *command,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL,
        env={**os.environ, "INTEGRITY_RUNS": runs},
    )
    assert proc.stdin is not None and proc.stdout is not None
    stdin, stdout = proc.stdin, proc.stdout

    async def send(message: JsonObj) -> None:
        stdin.write(json.dumps(message).encode() + b"\n")
        await stdin.drain()

    async def answer_of(request_id: int) -> JsonObj:
        while True:
            line = await stdout.readline()
            if not line:
                raise RuntimeError(f"{upstream}: the child closed its output")
            message = json.loads(line)
            if message.get("method") == "elicitation/create":
                await send(_answer(message, out.probe))
            elif "method" not in message and message.get("id") == request_id:
                return dict(message)

    try:
        async with asyncio.timeout(30):
            await send({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": INIT})
            await answer_of(1)
            await send({"jsonrpc": "2.0", "method": "notifications/initialized"})
            for n, tool in enumerate(PROBED, 2):
                params = {"name": tool, "arguments": arguments(tool, out.probe)}
                params["_meta"] = {"progressToken": f"probe-{n}"}
                await send({"jsonrpc": "2.0", "id": n, "method": "tools/call", "params": params})
                out.keep(upstream, tool, await answer_of(n))
    finally:
        stdin.close()
        try:
            async with asyncio.timeout(10):
                await proc.wait()
        except TimeoutError:
            proc.kill()
            await proc.wait()
