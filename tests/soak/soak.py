"""Soak test: many sessions, tasks and upstream faults through the gateway, with a mid-run kill.

A script, not a pytest test::

    .venv/bin/python -m tests.soak.soak --minutes 0.5            # what CI runs
    .venv/bin/python -m tests.soak.soak --minutes 5 --sessions 16 --seed 1 --json

It starts, as subprocesses on free loopback ports, a misbehaving Streamable HTTP upstream (this
file with ``--serve-upstream PORT``) and ``python -m gateway`` in front of it, then runs N
concurrent MCP sessions (raw HTTP, JSON or SSE answers) that create tasks (mostly ``work``,
sometimes ``hang``/``drop``/``garbage``/``error``), poll ``tasks/get``, fetch ``tasks/result``,
cancel some, and make plain calls. Around the middle of the run the gateway is killed with
SIGKILL and restarted on the same port and database; sessions retry (bounded) with their same
session id. At the end every task is checked: terminal in time, results exactly as the upstream
produced them (sha256 of the arguments), failures naming their cause, none lost before its ttl,
and the gateway's VmRSS within the bound. Exit status 1 when a check fails, 2 on a setup error.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web

from tests.bench.passthrough import HOST, REPO_ROOT, JsonObj, free_port, wait_for_port
from tests.bench.tasks import rss_bytes

PROTOCOL_VERSION = "2025-11-25"
ROUTE = "soak"
TIME_LIMIT_S = 5.0  # the route's tasks.time_limit_seconds and upstream.request_timeout_seconds
DEFAULT_TTL_MS = 120_000
SHORT_TTL_MS = 20_000  # some tasks ask for this, so that expiry and the sweeper are exercised
MAX_WORK_MS = 2000
ERROR_MESSAGE = "soak: deliberate JSON-RPC error"
ERROR_CODE = -32050
INTERRUPTED = "interrupted: gateway restarted"
CANCELLED = "The task was cancelled by request."

# Hard bounds: no loop may run away, whatever the gateway does.
MAX_OPS_PER_SESSION = 200_000
MAX_PENDING_PER_SESSION = 6
MAX_POLLS = 200
REQUEST_TIMEOUT_S = 20.0
RETRY_WINDOW_S = 40.0  # a request keeps retrying (the gateway may be restarting) this long
RETRY_SLEEP_S = 0.2
GRACE_S = TIME_LIMIT_S + 10.0  # after the run, for tasks to finish
STUCK_MARGIN_S = 5.0
RSS_EVERY_S = 2.0
RSS_WARMUP_S = 5.0
RSS_FACTOR, RSS_SLACK_MIB = 2.0, 50.0
START_TIMEOUT_S = 30.0

FAULT_TOOLS = ("hang", "drop", "garbage", "error")
EXPECTED_CAUSE = {
    "hang": "timeout",
    "drop": "connection",
    "garbage": "protocol",
    "error": "jsonrpc_error",
}
TERMINAL = ("completed", "failed", "cancelled")


def expected_text(args: JsonObj) -> str:
    """What the upstream's `work` tool answers for these arguments."""
    canonical = json.dumps(args, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()


def classify(message: str) -> str:
    """The failure cause a failed task's statusMessage (or an error's message) names."""
    if INTERRUPTED in message:
        return "interrupted"
    # A task's time limit, a plain tool call's (the same one) or another request's.
    timed_out = ("did not finish the task within", "did not finish the tool call within")
    if any(said in message for said in timed_out) or "did not answer within" in message:
        return "timeout"
    if "cannot reach the upstream" in message or "upstream unavailable" in message:
        return "connection"
    if "invalid answer" in message or "invalid event" in message or "content type" in message:
        return "protocol"
    if ERROR_MESSAGE in message:
        return "jsonrpc_error"
    return "other"


# --------------------------------------------------------------------------------------------
# The misbehaving upstream (run in its own process with --serve-upstream PORT).
# --------------------------------------------------------------------------------------------

UPSTREAM_TOOLS: list[JsonObj] = [
    {"name": n, "description": d, "inputSchema": {"type": "object"}}
    for n, d in (
        ("work", "Answers after ms milliseconds with sha256 of its canonical arguments."),
        ("hang", "Never answers."),
        ("drop", "Aborts the HTTP connection instead of answering."),
        ("garbage", "Answers 200 with invalid JSON."),
        ("error", "Answers with a JSON-RPC error."),
    )
]


def _reply(msg_id: Any, result: JsonObj | None = None, error: JsonObj | None = None) -> JsonObj:
    out: JsonObj = {"jsonrpc": "2.0", "id": msg_id}
    if error is not None:
        out["error"] = error
    else:
        out["result"] = result if result is not None else {}
    return out


async def _upstream_post(request: web.Request) -> web.StreamResponse:
    try:
        msg = json.loads(await request.read())
    except ValueError:
        return web.json_response(
            _reply(None, error={"code": -32700, "message": "parse"}), status=400
        )
    if not isinstance(msg, dict) or "method" not in msg or "id" not in msg:
        return web.Response(status=202)  # notifications and answers
    msg_id, method, params = msg["id"], msg["method"], msg.get("params") or {}
    session = request.headers.get("Mcp-Session-Id") or os.urandom(16).hex()
    headers = {"Mcp-Session-Id": session}
    if method == "initialize":
        result = {
            "protocolVersion": params.get("protocolVersion", PROTOCOL_VERSION),
            "capabilities": {"tools": {}},
            "serverInfo": {"name": "soak-upstream", "version": "0.0.0"},
        }
        return web.json_response(_reply(msg_id, result), headers=headers)
    if method == "tools/list":
        return web.json_response(_reply(msg_id, {"tools": UPSTREAM_TOOLS}), headers=headers)
    if method == "ping":
        return web.json_response(_reply(msg_id, {}), headers=headers)
    if method != "tools/call":
        error = {"code": -32601, "message": f"method not found: {method}"}
        return web.json_response(_reply(msg_id, error=error), headers=headers)
    name, args = params.get("name"), params.get("arguments") or {}
    if name == "work":
        text = expected_text(args)
        answer = _reply(msg_id, {"content": [{"type": "text", "text": text}], "isError": False})
        delay = min(max(float(args.get("ms", 0)), 0.0), 10_000.0) / 1000
        if args.get("sse"):
            resp = web.StreamResponse(
                headers={
                    **headers,
                    "Content-Type": "text/event-stream",
                    "Cache-Control": "no-cache",
                }
            )
            await resp.prepare(request)
            await asyncio.sleep(delay)
            await resp.write(f"id: 1\nevent: message\ndata: {json.dumps(answer)}\n\n".encode())
            await resp.write_eof()
            return resp
        await asyncio.sleep(delay)
        return web.json_response(answer, headers=headers)
    if name == "hang":
        await asyncio.sleep(600)  # cancelled when the gateway disconnects (handler_cancellation)
        return web.json_response(_reply(msg_id, {"content": []}), headers=headers)
    if name == "drop":
        if request.transport is not None:
            request.transport.abort()
        return web.Response(status=500)  # never reaches anyone
    if name == "garbage":
        return web.Response(text='{"jsonrpc": "2.0", "id": ', content_type="application/json")
    if name == "error":
        error = {"code": ERROR_CODE, "message": ERROR_MESSAGE}
        return web.json_response(_reply(msg_id, error=error), headers=headers)
    error = {"code": -32602, "message": f"unknown tool {name!r}"}
    return web.json_response(_reply(msg_id, error=error), headers=headers)


async def _upstream_other(request: web.Request) -> web.Response:
    if request.method == "DELETE":
        return web.Response(status=200)
    return web.Response(status=405, headers={"Allow": "POST, DELETE"})


def serve_upstream(port: int) -> None:
    app = web.Application()
    app.router.add_post("/mcp", _upstream_post)
    app.router.add_route("*", "/mcp", _upstream_other)
    web.run_app(app, host=HOST, port=port, access_log=None, print=None, handler_cancellation=True)


# --------------------------------------------------------------------------------------------
# Processes
# --------------------------------------------------------------------------------------------


def gateway_config(port: int, db: Path, upstream_url: str) -> str:
    return (
        f"listen: {{host: {HOST}, port: {port}}}\n"
        f"store: {{path: {json.dumps(str(db))}, sweep_interval_seconds: 2}}\n"
        "limits: {requests_per_second: null, active_tasks_per_principal: null,"
        " sessions_per_principal: null}\n"
        "routes:\n"
        f"  - name: {ROUTE}\n"
        "    upstream:\n"
        "      transport: streamable_http\n"
        f"      url: {json.dumps(upstream_url)}\n"
        f"      request_timeout_seconds: {TIME_LIMIT_S:g}\n"
        f"    tasks: {{time_limit_seconds: {TIME_LIMIT_S:g}, default_ttl_ms: {DEFAULT_TTL_MS}}}\n"
    )


class Proc:
    """One subprocess we own; start() again after it died to restart it with the same argv."""

    def __init__(self, name: str, argv: list[str], port: int, log: Path) -> None:
        self.name, self.argv, self.port, self.log = name, argv, port, log
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen(
                self.argv, cwd=REPO_ROOT, env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=out
            )
        wait_for_port(self.proc, self.port, self.log, self.name, START_TIMEOUT_S)

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None and self.proc.poll() is None else None

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(timeout=10)

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.terminate()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.kill()


# --------------------------------------------------------------------------------------------
# Client side
# --------------------------------------------------------------------------------------------


class Unreachable(Exception):
    """The gateway gave no usable answer, even after retrying."""


@dataclass
class TaskRecord:
    session: int
    task_id: str
    tool: str
    args: JsonObj
    expected: str | None  # the exact text of a `work` result
    sent_at: float  # wall clock just before the create request (the ttl counts from later)
    ttl_ms: int
    seen: list[str] = field(default_factory=list)  # statuses and results the client saw
    cancel_acked: bool = False
    done: bool = False  # the client saw it terminal
    final_status: str | None = None
    final_message: str = ""


@dataclass
class Stats:
    plain_ok: int = 0
    plain_expected_error: int = 0
    plain_failed: int = 0
    cancel_requests: int = 0
    cancel_refused_terminal: int = 0
    retries: int = 0
    expired_seen: int = 0
    problems: list[str] = field(default_factory=list)
    mismatches: int = 0
    unexpected: int = 0

    def problem(self, kind: str, what: str) -> None:
        if kind == "mismatch":
            self.mismatches += 1
        else:
            self.unexpected += 1
        if len(self.problems) < 20:
            self.problems.append(f"{kind}: {what}")


async def _read_sse(resp: aiohttp.ClientResponse, want_id: int) -> JsonObj | None:
    data: list[str] = []
    async for raw in resp.content:
        line = raw.decode(errors="replace").rstrip("\r\n")
        if line == "":
            joined, data = "\n".join(data).strip(), []
            if joined:  # the priming event has an empty data line
                msg = json.loads(joined)
                if isinstance(msg, dict) and msg.get("id") == want_id and "method" not in msg:
                    return msg
            continue
        if line.startswith(":"):
            continue
        name, _, value = line.partition(":")
        if name == "data":
            data.append(value[1:] if value.startswith(" ") else value)
    return None  # the stream ended without our answer (e.g. the gateway was killed)


class Session:
    def __init__(
        self, idx: int, http: aiohttp.ClientSession, url: str, seed: int, stats: Stats
    ) -> None:
        self.idx, self.http, self.url, self.stats = idx, http, url, stats
        self.rng = random.Random(seed * 1000 + idx)
        self.headers = {
            "Accept": "application/json, text/event-stream",
            "Content-Type": "application/json",
        }
        self.next_id = 0
        self.tasks: list[TaskRecord] = []
        self.seq = 0

    async def _once(self, message: JsonObj) -> tuple[JsonObj | None, aiohttp.ClientResponse]:
        body = json.dumps(message, separators=(",", ":")).encode()
        timeout = aiohttp.ClientTimeout(total=REQUEST_TIMEOUT_S)
        async with self.http.post(
            self.url, data=body, headers=self.headers, timeout=timeout
        ) as resp:
            if "id" not in message:
                await resp.read()
                return None, resp
            if resp.content_type == "text/event-stream":
                return await _read_sse(resp, message["id"]), resp
            raw = await resp.read()
            try:
                reply = json.loads(raw)
            except ValueError:
                return None, resp
            return (reply if isinstance(reply, dict) else None), resp

    async def rpc(self, method: str, params: JsonObj | None = None) -> JsonObj:
        """The JSON-RPC answer (result or error); retries transport failures for a while."""
        give_up = time.monotonic() + RETRY_WINDOW_S
        last = ""
        for _ in range(int(RETRY_WINDOW_S / RETRY_SLEEP_S) + 1):
            self.next_id += 1
            message: JsonObj = {"jsonrpc": "2.0", "id": self.next_id, "method": method}
            if params is not None:
                message["params"] = params
            try:
                reply, resp = await self._once(message)
                if reply is not None and ("result" in reply or "error" in reply):
                    if method == "initialize" and "Mcp-Session-Id" in resp.headers:
                        self.headers["Mcp-Session-Id"] = resp.headers["Mcp-Session-Id"]
                    return reply
                last = f"HTTP {resp.status} without an answer"
            except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
                last = f"{type(exc).__name__}: {exc}"
            if time.monotonic() >= give_up:
                break
            self.stats.retries += 1
            await asyncio.sleep(RETRY_SLEEP_S)
        raise Unreachable(f"session {self.idx} {method}: {last}")

    async def open(self) -> None:
        params = {
            "protocolVersion": PROTOCOL_VERSION,
            "capabilities": {},
            "clientInfo": {"name": "soak", "version": "0.0.0"},
        }
        reply = await self.rpc("initialize", params)
        if "result" not in reply or "Mcp-Session-Id" not in self.headers:
            raise Unreachable(f"initialize failed: {reply}")
        self.headers["Mcp-Protocol-Version"] = PROTOCOL_VERSION
        _, resp = await self._once({"jsonrpc": "2.0", "method": "notifications/initialized"})
        if resp.status not in (200, 202):
            raise Unreachable(f"notifications/initialized: HTTP {resp.status}")

    # ---- one step of each kind ----

    def _work_args(self) -> JsonObj:
        self.seq += 1
        r = self.rng.random()
        ms = (
            0
            if r < 0.2
            else self.rng.randint(1, 300)
            if r < 0.7
            else self.rng.randint(300, MAX_WORK_MS)
        )
        return {"ms": ms, "nonce": f"s{self.idx}-{self.seq}", "sse": self.rng.random() < 0.3}

    async def create(self) -> None:
        r = self.rng.random()
        tool = "work" if r < 0.72 else FAULT_TOOLS[int((r - 0.72) / 0.07) % len(FAULT_TOOLS)]
        args = self._work_args() if tool == "work" else {"nonce": f"s{self.idx}-{self.next_id}"}
        task: JsonObj = {"ttl": SHORT_TTL_MS} if self.rng.random() < 0.2 else {}
        sent = time.time()
        reply = await self.rpc("tools/call", {"name": tool, "arguments": args, "task": task})
        got = (reply.get("result") or {}).get("task") if "result" in reply else None
        if not isinstance(got, dict) or not isinstance(got.get("taskId"), str):
            self.stats.problem("unexpected", f"create {tool}: {str(reply)[:200]}")
            return
        if got.get("status") != "working":
            self.stats.problem("unexpected", f"create {tool}: status {got.get('status')}")
        rec = TaskRecord(
            self.idx,
            got["taskId"],
            tool,
            args,
            expected_text(args) if tool == "work" else None,
            sent,
            int(got.get("ttl") or DEFAULT_TTL_MS),
        )
        self.tasks.append(rec)

    def _note_task(self, rec: TaskRecord, task: JsonObj) -> None:
        status = str(task.get("status"))
        rec.seen.append(status)
        if status in TERMINAL:
            rec.done = True
            rec.final_status = status
            rec.final_message = str(task.get("statusMessage") or "")

    async def get(self, rec: TaskRecord) -> JsonObj | None:
        reply = await self.rpc("tasks/get", {"taskId": rec.task_id})
        if "result" in reply and isinstance(reply["result"], dict):
            self._note_task(rec, reply["result"])
            return reply["result"]
        message = str((reply.get("error") or {}).get("message"))
        rec.seen.append(f"get error: {message}")
        if "expired" in message or "not found" in message:
            rec.done = True  # checked against the ttl at the end
        return None

    def check_result(self, rec: TaskRecord, reply: JsonObj, where: str) -> None:
        """tasks/result's answer must be what the upstream returned (or the failure it had)."""
        if "result" in reply:
            result = reply["result"]
            meta = (result.get("_meta") or {}).get("io.modelcontextprotocol/related-task") or {}
            content = result.get("content") or [{}]
            text = content[0].get("text") if isinstance(content[0], dict) else None
            rec.seen.append("result")
            if rec.expected is None or text != rec.expected or result.get("isError"):
                self.stats.problem(
                    "mismatch", f"{where} {rec.tool} {rec.task_id}: {str(result)[:200]}"
                )
            elif meta.get("taskId") != rec.task_id:
                self.stats.problem("mismatch", f"{where} {rec.task_id}: related-task {meta}")
            return
        message = str((reply.get("error") or {}).get("message"))
        rec.seen.append(f"result error: {message[:80]}")
        if "expired" in message or "not found" in message:
            rec.done = True
            return
        if rec.tool == "error" and message == ERROR_MESSAGE:
            if reply["error"].get("code") != ERROR_CODE:
                self.stats.problem("mismatch", f"{where} {rec.task_id}: error {reply['error']}")
            return
        cause = classify(message)
        if message == CANCELLED or cause == "interrupted" or cause == EXPECTED_CAUSE.get(rec.tool):
            return
        self.stats.problem("unexpected", f"{where} {rec.tool} {rec.task_id}: error {message[:200]}")

    async def result(self, rec: TaskRecord) -> None:
        if self.rng.random() < 0.5:
            for _ in range(MAX_POLLS):  # poll first, as a TS-SDK-style client does
                task = await self.get(rec)
                if task is None or rec.done:
                    break
                await asyncio.sleep(self.rng.uniform(0.05, 0.3))
        reply = await self.rpc("tasks/result", {"taskId": rec.task_id})
        self.check_result(rec, reply, "run")
        if "result" in reply or "error" in reply:
            if not rec.done:  # tasks/result answers only once the task is terminal
                await self.get(rec)
            rec.done = True

    async def cancel(self, rec: TaskRecord) -> None:
        self.stats.cancel_requests += 1
        reply = await self.rpc("tasks/cancel", {"taskId": rec.task_id})
        if "result" in reply:
            if reply["result"].get("status") != "cancelled":
                self.stats.problem("unexpected", f"cancel {rec.task_id}: {str(reply)[:200]}")
            rec.cancel_acked = True
            self._note_task(rec, reply["result"])
            return
        message = str((reply.get("error") or {}).get("message"))
        if "already in terminal status" in message:
            self.stats.cancel_refused_terminal += 1
        elif "expired" in message or "not found" in message:
            rec.done = True  # the final check compares this with the task's ttl
        else:
            self.stats.problem("unexpected", f"cancel {rec.task_id}: {message[:200]}")

    async def plain(self) -> None:
        r = self.rng.random()
        tool = (
            "work" if r < 0.8 else ("error", "garbage", "drop", "hang")[int((r - 0.8) / 0.05) % 4]
        )
        args = self._work_args() if tool == "work" else {}
        reply = await self.rpc("tools/call", {"name": tool, "arguments": args})
        if tool == "work":
            result = reply.get("result") or {}
            content = result.get("content") or [{}]
            text = content[0].get("text") if isinstance(content[0], dict) else None
            if text == expected_text(args) and not result.get("isError"):
                self.stats.plain_ok += 1
                return
            self.stats.plain_failed += 1
            if "result" in reply:
                self.stats.problem("mismatch", f"plain work: {str(reply)[:200]}")
            elif classify(str(reply["error"].get("message"))) != "interrupted":
                self.stats.problem("unexpected", f"plain work: {str(reply)[:200]}")
            return
        message = str((reply.get("error") or {}).get("message"))
        if "error" in reply and classify(message) == EXPECTED_CAUSE[tool]:
            self.stats.plain_expected_error += 1
        else:
            self.stats.plain_failed += 1
            self.stats.problem("unexpected", f"plain {tool}: {str(reply)[:200]}")

    async def run(self, deadline: float, drain_deadline: float) -> None:
        for _ in range(MAX_OPS_PER_SESSION):
            if time.monotonic() >= deadline:
                break
            pending = [t for t in self.tasks if not t.done]
            r = self.rng.random()
            if pending and (len(pending) >= MAX_PENDING_PER_SESSION or r < 0.2):
                await self.result(self.rng.choice(pending))
            elif r < 0.6:
                await self.create()
            elif r < 0.67 and pending:
                await self.get(self.rng.choice(pending))
            elif r < 0.73 and pending:
                await self.cancel(self.rng.choice(pending))
            elif r < 0.93:
                await self.plain()
            else:
                await asyncio.sleep(self.rng.uniform(0.01, 0.1))
        # Drain: fetch what is still pending, within the grace period.
        for rec in [t for t in self.tasks if not t.done]:
            if time.monotonic() >= drain_deadline:
                break
            await self.result(rec)


# --------------------------------------------------------------------------------------------
# Orchestration
# --------------------------------------------------------------------------------------------


@dataclass
class Outage:
    killed_at: float = 0.0  # wall clock
    restarted_at: float = 0.0
    pids: list[int] = field(default_factory=list)


async def kill_and_restart(gw: Proc, at: float, outage: Outage) -> None:
    await asyncio.sleep(max(0.0, at - time.monotonic()))
    outage.killed_at = time.time()
    await asyncio.to_thread(gw.kill)
    await asyncio.to_thread(gw.start)
    outage.restarted_at = time.time()
    if gw.pid is not None:
        outage.pids.append(gw.pid)
    print(
        "killed the gateway (SIGKILL) and restarted it in "
        f"{outage.restarted_at - outage.killed_at:.2f} s",
        file=sys.stderr,
        flush=True,
    )


async def sample_rss(gw: Proc, stop: asyncio.Event, samples: list[tuple[float, int]]) -> None:
    started = time.monotonic()
    for _ in range(100_000):
        pid = gw.pid
        if pid is not None:
            try:
                samples.append((time.monotonic() - started, rss_bytes(pid)))
            except RuntimeError:
                pass  # being killed or restarted right now
        try:
            await asyncio.wait_for(stop.wait(), RSS_EVERY_S)
            return
        except TimeoutError:
            continue


async def final_check(sessions: list[Session], outage: Outage, stats: Stats) -> Counter[str]:
    """tasks/get (and tasks/result for completed ones) for every task, by its own session."""
    outcome: Counter[str] = Counter()

    async def check(s: Session, rec: TaskRecord) -> None:
        reply = await s.rpc("tasks/get", {"taskId": rec.task_id})
        now = time.time()
        if "error" in reply:
            message = str(reply["error"].get("message"))
            if now < rec.sent_at + rec.ttl_ms / 1000:
                outcome["lost"] += 1
                stats.problem("unexpected", f"lost {rec.tool} {rec.task_id}: {message}")
            else:
                outcome["expired"] += 1
            return
        task = reply["result"]
        status, message = str(task.get("status")), str(task.get("statusMessage") or "")
        rec.final_status, rec.final_message = status, message
        if status not in TERMINAL:
            limit = (MAX_WORK_MS / 1000 if rec.tool == "work" else 0.0) + TIME_LIMIT_S
            if now - rec.sent_at > limit + STUCK_MARGIN_S:
                outcome["stuck"] += 1
                stats.problem("unexpected", f"stuck {rec.tool} {rec.task_id}: {status}")
            return
        if status == "completed":
            if rec.tool != "work":
                stats.problem("unexpected", f"{rec.tool} {rec.task_id} completed")
            s.check_result(rec, await s.rpc("tasks/result", {"taskId": rec.task_id}), "final")
        elif status == "cancelled":
            if message != CANCELLED:
                stats.problem("unexpected", f"cancelled {rec.task_id}: {message!r}")
        else:
            cause = classify(message)
            if cause == "interrupted":
                if rec.sent_at > outage.restarted_at or not outage.killed_at:
                    stats.problem("unexpected", f"interrupted after the restart: {rec.task_id}")
            elif cause != EXPECTED_CAUSE.get(rec.tool):
                stats.problem("unexpected", f"{rec.tool} {rec.task_id} failed: {message[:200]}")
        if rec.cancel_acked and status != "cancelled":
            stats.problem("unexpected", f"cancel acknowledged but {rec.task_id} is {status}")

    sem = asyncio.Semaphore(64)

    async def bounded(s: Session, rec: TaskRecord) -> None:
        async with sem:
            await check(s, rec)

    await asyncio.gather(*(bounded(s, rec) for s in sessions for rec in s.tasks))
    return outcome


async def soak(args: argparse.Namespace, gw: Proc, url: str) -> JsonObj:
    stats, outage = Stats(), Outage(pids=[gw.pid or 0])
    samples: list[tuple[float, int]] = []
    duration = args.minutes * 60
    connector = aiohttp.TCPConnector(limit=args.sessions * 2 + 8)
    async with aiohttp.ClientSession(connector=connector) as http:
        sessions = [Session(i, http, url, args.seed, stats) for i in range(args.sessions)]
        await asyncio.gather(*(s.open() for s in sessions))
        stop = asyncio.Event()
        started = time.monotonic()
        deadline = started + duration
        async with asyncio.TaskGroup() as tg:
            tg.create_task(sample_rss(gw, stop, samples))
            killer = tg.create_task(kill_and_restart(gw, started + duration / 2, outage))
            try:
                await asyncio.gather(*(s.run(deadline, deadline + GRACE_S) for s in sessions))
                await killer
                # Let every task reach its end (hang: the time limit), then look at all of them.
                grace_end = time.monotonic() + GRACE_S
                last_created = max((r.sent_at for s in sessions for r in s.tasks), default=0.0)
                wait = min(
                    grace_end - time.monotonic(), last_created + TIME_LIMIT_S + 2 - time.time()
                )
                await asyncio.sleep(max(0.0, wait))
                outcome = await final_check(sessions, outage, stats)
            finally:
                stop.set()

    records = [r for s in sessions for r in s.tasks]
    # A task whose ttl passed before the client saw it terminal has no final status.
    by_status = Counter(r.final_status or "ttl passed unseen" for r in records)
    causes = Counter(classify(r.final_message) for r in records if r.final_status == "failed")
    warm = [b for t, b in samples if t >= RSS_WARMUP_S] or [b for _, b in samples]
    mib = 1024 * 1024
    first, peak, last = (warm[0] / mib, max(warm) / mib, warm[-1] / mib) if warm else (0, 0, 0)
    bound = RSS_FACTOR * first + RSS_SLACK_MIB
    rss_ok = bool(warm) and last <= bound
    summary: JsonObj = {
        "minutes": args.minutes,
        "sessions": args.sessions,
        "seed": args.seed,
        "tasks_created": len(records),
        "tasks_by_tool": dict(Counter(r.tool for r in records)),
        "final_status": dict(by_status),
        "expired_before_check": outcome["expired"],
        "failures_by_cause": dict(causes),
        "cancel_requests": stats.cancel_requests,
        "cancel_refused_already_terminal": stats.cancel_refused_terminal,
        "cancelled": by_status.get("cancelled", 0),
        "interrupted_by_kill": causes.get("interrupted", 0),
        "plain_calls_ok": stats.plain_ok,
        "plain_calls_expected_error": stats.plain_expected_error,
        "plain_calls_failed": stats.plain_failed,
        "retries": stats.retries,
        "lost": outcome["lost"],
        "stuck": outcome["stuck"],
        "result_mismatches": stats.mismatches,
        "unexpected_outcomes": stats.unexpected - outcome["lost"] - outcome["stuck"],
        "restart_seconds": round(outage.restarted_at - outage.killed_at, 2),
        "rss_mib": {"first": round(first, 1), "max": round(peak, 1), "last": round(last, 1)},
        "rss_rule": f"last <= {RSS_FACTOR:g} x first (after {RSS_WARMUP_S:g} s)"
        f" + {RSS_SLACK_MIB:g}",
        "rss_ok": rss_ok,
        "problems": stats.problems,
    }
    summary["ok"] = (
        summary["lost"] == 0
        and summary["stuck"] == 0
        and summary["result_mismatches"] == 0
        and summary["unexpected_outcomes"] == 0
        and rss_ok
        and len(records) > 0
    )
    return summary


def print_report(s: JsonObj) -> None:
    rss = s["rss_mib"]
    lines = [
        f"soak: {s['minutes']:g} min, {s['sessions']} sessions, seed {s['seed']}",
        f"tasks created        {s['tasks_created']}  by tool {s['tasks_by_tool']}",
        f"final status         {s['final_status']}  (ttl passed before the check: "
        f"{s['expired_before_check']})",
        f"failures by cause    {s['failures_by_cause']}",
        f"cancelled            {s['cancelled']}  (cancel requests {s['cancel_requests']}, refused "
        f"as already terminal {s['cancel_refused_already_terminal']})",
        f"interrupted by kill  {s['interrupted_by_kill']}  (restart took {s['restart_seconds']} s)",
        f"plain calls          ok {s['plain_calls_ok']}, expected errors "
        f"{s['plain_calls_expected_error']}, failed {s['plain_calls_failed']}",
        f"request retries      {s['retries']}",
        f"lost                 {s['lost']}",
        f"stuck                {s['stuck']}",
        f"result mismatches    {s['result_mismatches']}",
        f"unexpected outcomes  {s['unexpected_outcomes']}",
        f"gateway RSS MiB      first {rss['first']} max {rss['max']} last {rss['last']}  "
        f"(rule: {s['rss_rule']}: {'ok' if s['rss_ok'] else 'EXCEEDED'})",
    ]
    lines += [f"  {p}" for p in s["problems"]]
    lines.append("PASS" if s["ok"] else "FAIL")
    print("\n".join(lines), flush=True)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--minutes", type=float, default=0.5, help="run time in minutes (0.5)")
    p.add_argument("--sessions", type=int, default=16, help="concurrent MCP sessions (16)")
    p.add_argument("--seed", type=int, default=1, help="RNG seed (1)")
    p.add_argument("--json", action="store_true", help="also print a one-line JSON summary")
    p.add_argument("--serve-upstream", type=int, metavar="PORT", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if not 0 < args.minutes <= 600 or not 1 <= args.sessions <= 256:
        p.error("need 0 < --minutes <= 600 and 1 <= --sessions <= 256")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if args.serve_upstream is not None:
        serve_upstream(args.serve_upstream)
        return 0
    with tempfile.TemporaryDirectory(prefix="soak-") as tmp:
        tmpdir = Path(tmp)
        up_port, gw_port = free_port(), free_port()
        upstream_url = f"http://{HOST}:{up_port}/mcp"
        cfg = tmpdir / "gateway.yaml"
        cfg.write_text(gateway_config(gw_port, tmpdir / "gateway.db", upstream_url))
        upstream = Proc(
            "upstream",
            [sys.executable, "-m", "tests.soak.soak", "--serve-upstream", str(up_port)],
            up_port,
            tmpdir / "upstream.log",
        )
        gw = Proc(
            "gateway",
            [sys.executable, "-m", "gateway", "--config", str(cfg), "--log-level", "WARNING"],
            gw_port,
            tmpdir / "gateway.log",
        )
        try:
            try:
                upstream.start()
                gw.start()
            except RuntimeError as exc:
                print(f"a server failed to start: {exc}", file=sys.stderr)
                return 2
            url = f"http://{HOST}:{gw_port}/{ROUTE}/mcp"
            summary: JsonObj | None = None
            try:
                summary = asyncio.run(soak(args, gw, url))
            except* (Unreachable, RuntimeError) as group:
                print(f"soak aborted: {group.exceptions}", file=sys.stderr)
                print((tmpdir / "gateway.log").read_text(errors="replace")[-3000:], file=sys.stderr)
            if summary is None:
                return 2
            if not summary["ok"]:  # what the servers said of it, before their logs go
                for name in ("gateway", "upstream"):
                    tail = (tmpdir / f"{name}.log").read_text(errors="replace")[-3000:]
                    print(f"the last of the {name}'s log:\n{tail}", file=sys.stderr)
        finally:
            gw.stop()
            upstream.stop()
    print_report(summary)
    if args.json:
        print(json.dumps(summary, separators=(",", ":")))
    return 0 if summary["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
