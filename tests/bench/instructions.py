"""Instructions per request, counted by valgrind's callgrind: the noise-free measure.

Throughput and CPU time on a shared 2-core machine move by 10-20 % between runs of the same
code (docs/benchmarks.md); the instructions a server executes per request do not (two runs
agree within 0.2 %). This counts them for the relay (the gateway against the bare aiohttp
forwarder of `tests.bench.passthrough`, on the same upstream, identity, limits and metrics
on) and for the three requests of a task's lifecycle on the gateway. It tells whether a
change made the gateway do less work, which a timed run on this machine cannot; the timed
benchmarks stay the judges of throughput. Counted in user space only: the kernel's share of
a request (its socket calls) is not in it. Needs valgrind (`apt-get install valgrind`)::

    .venv/bin/python -m tests.bench.instructions                # relay and task requests
    .venv/bin/python -m tests.bench.instructions --kinds relay --calls 3200
    .venv/bin/python -m tests.bench.instructions --kinds get --keep /tmp/counts
    callgrind_annotate --inclusive=yes /tmp/counts/task-get.callgrind.*-01 | head -60

Each server runs under callgrind with instrumentation off until it serves; the count covers
`--calls` requests after a warm-up, from 16 concurrent clients, every thread of the server.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp

from tests.bench import lifecycles, passthrough, stores
from tests.bench.passthrough import AUTHORIZATION, HOST, THIS_FILE, wait_for_port

KINDS = ("relay", "create", "get", "result")
WORKERS = 16
WARMUP_CALLS = 320
#: Starting under valgrind (imports, no instrumentation yet) takes a while.
START_TIMEOUT_S = 300.0


@dataclass
class Count:
    target: str
    kind: str
    calls: int
    #: Instructions per request: every thread, and the event loop's thread alone.
    total: float
    main: float


class Callgrind:
    """One server under callgrind, its counting switched on and off from outside."""

    def __init__(self, argv: list[str], port: int, logdir: Path, name: str) -> None:
        self.out = logdir / f"{name}.callgrind"
        self.log = logdir / f"{name}.log"
        env = {**os.environ, "PYTHONPATH": str(passthrough.REPO_ROOT)}
        command = [
            "valgrind",
            "--tool=callgrind",
            "--instr-atstart=no",
            "--separate-threads=yes",
            f"--callgrind-out-file={self.out}",
            *argv,
        ]
        with self.log.open("wb") as log:
            self.proc = subprocess.Popen(
                command, cwd=passthrough.REPO_ROOT, env=env, stdout=log, stderr=log
            )
        wait_for_port(self.proc, port, self.log, name, START_TIMEOUT_S)

    def control(self, *flags: str) -> None:
        subprocess.run(
            ["callgrind_control", *flags, str(self.proc.pid)], check=True, capture_output=True
        )

    def counted(self) -> tuple[int, int]:
        """Dump the counts since the last zeroing: (every thread, the first thread)."""
        self.control("-d")
        time.sleep(1)  # the dump is written by the target itself
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(30)
        per_thread: dict[str, int] = {}
        for path in self.out.parent.glob(self.out.name + ".*"):
            for line in path.read_text(errors="replace").splitlines():
                if line.startswith(("summary:", "totals:")):
                    per_thread[path.name] = max(per_thread.get(path.name, 0), int(line.split()[1]))
        if not per_thread:
            raise RuntimeError(f"callgrind wrote no counts:\n{self.log.read_text()[-2000:]}")
        first = min(per_thread)  # <name>.<dump>-01: the main thread, which runs the loop
        return sum(per_thread.values()), per_thread[first]


async def _load(
    url: str, headers: dict[str, str], body: str, calls: int, warming: bool = False
) -> None:
    """`calls` POSTs of `body` (its %d the request id), WORKERS at a time; each must succeed.
    While `warming`, an answer that is not the call's (the process under valgrind is still
    settling: a request head it took over 10 s to read gets the guard's plain-text 408) is
    reported and sent again; the counted calls get no second chance."""
    async with aiohttp.ClientSession() as http:

        async def worker(w: int) -> None:
            for n in range(calls // WORKERS):
                data = body % (w * 10**6 + n)
                for attempt in (1, 2):
                    async with http.post(url, data=data, headers=headers) as resp:
                        raw = await resp.read()
                    answer = _answer(raw, resp.content_type)
                    if resp.status == 200 and isinstance(answer, dict) and "result" in answer:
                        break
                    problem = f"HTTP {resp.status}: {raw[:200]!r}"
                    if not warming or attempt == 2:
                        raise RuntimeError(problem)
                    print(f"warm-up: {problem}; sent again", file=sys.stderr)

        await asyncio.gather(*(worker(w) for w in range(WORKERS)))


def _answer(raw: bytes, content_type: str) -> Any:
    """The JSON-RPC answer in a response: its body, or, when the gateway turned the response
    into an event stream (as it does for a call slower than its window, which under valgrind
    an ordinary one can be), the message its stream ended with."""
    if content_type == "text/event-stream":
        lines = raw.decode(errors="replace").splitlines()
        messages = [line[len("data: ") :] for line in lines if line.startswith("data: {")]
        raw = messages[-1].encode() if messages else b""
    try:
        return json.loads(raw)
    except ValueError:
        return None


def _headers(session_id: str | None, authorization: str | None) -> dict[str, str]:
    headers = {
        "Content-Type": "application/json",
        "Accept": "application/json, text/event-stream",
        "Mcp-Protocol-Version": passthrough.PROTOCOL_VERSION,
    }
    if session_id is not None:
        headers["Mcp-Session-Id"] = session_id
    if authorization is not None:
        headers["Authorization"] = authorization
    return headers


def unshared_port() -> int:
    """A free port below the kernel's ephemeral range. A gateway under valgrind takes up to a
    minute to bind the port picked for it; one picked from that range (as `bind(0)` picks)
    may meanwhile go to another process's `bind(0)`, and the counts would be of its server
    (CI counts beside other sections). Below it, only a process that names a port takes it."""
    try:
        low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        low = 32768
    for _ in range(200):
        port = random.randrange(max(1024, low - 8192), max(1025, low))
        with socket.socket() as sock:
            try:
                sock.bind((HOST, port))
            except OSError:
                continue
        return port
    return passthrough.free_port()


def _request(method: str, params: dict[str, Any]) -> str:
    return '{"jsonrpc":"2.0","id":%d,' + json.dumps({"method": method, "params": params})[1:]


ECHO = {"name": "echo", "arguments": {"text": "x"}}


def count_relay(target: str, calls: int, warmup: int, logdir: Path, upstream_url: str) -> Count:
    port = unshared_port()
    if target == "gateway":
        config = logdir / "relay.yaml"
        config.write_text(passthrough.gateway_config(port, logdir / "relay.db", upstream_url))
        argv = [sys.executable, "-m", "gateway", "--config", str(config)]
        url = f"http://{HOST}:{port}/bench/mcp"
    else:
        argv = [sys.executable, str(THIS_FILE), "--serve-proxy", str(port), upstream_url]
        url = f"http://{HOST}:{port}/mcp"
    server = Callgrind(argv, port, logdir, f"relay-{target}")

    async def session() -> str | None:
        async with aiohttp.ClientSession() as http:
            client = passthrough.McpClient(http, url, AUTHORIZATION)
            await client.open()
            return client.session_id

    headers = _headers(asyncio.run(session()), AUTHORIZATION)
    body = _request("tools/call", ECHO)
    server.control("-i", "on")
    asyncio.run(_load(url, headers, body, warmup, warming=True))
    server.control("-z")
    asyncio.run(_load(url, headers, body, calls))
    total, main = server.counted()
    return Count(target, "relay", calls, total / calls, main / calls)


async def _finished_task(url: str) -> tuple[str | None, str]:
    """A session and a task of it that has completed (what tasks/get and result read)."""
    async with aiohttp.ClientSession() as http:
        client = lifecycles.TaskClient(http, url)
        await client.open()
        task_id = await client.create_task("echo", {"text": "hi"})
        for _ in range(600):
            if await client.task_status(task_id) == "completed":
                return client.session_id, task_id
            await asyncio.sleep(0.05)
    raise RuntimeError("the echo task did not complete within 30 s")


def count_tasks(
    kinds: list[str], calls: int, warmup: int, logdir: Path, upstream_url: str
) -> list[Count]:
    counts = []
    for kind in kinds:
        port = unshared_port()
        config = logdir / f"{kind}.yaml"
        store = stores.sqlite_store(logdir / f"{kind}.db")
        config.write_text(stores.gateway_config(port, store, upstream_url, 4))
        argv = [sys.executable, "-m", "gateway", "--config", str(config)]
        url = f"http://{HOST}:{port}/bench/mcp"
        server = Callgrind(argv, port, logdir, f"task-{kind}")

        session_id, task_id = asyncio.run(_finished_task(url))
        headers = _headers(session_id, f"Bearer {lifecycles.caller_key(0)}")
        body = {
            "create": _request("tools/call", {**ECHO, "task": {}}),
            "get": _request("tasks/get", {"taskId": task_id}),
            "result": _request("tasks/result", {"taskId": task_id}),
        }[kind]
        server.control("-i", "on")
        asyncio.run(_load(url, headers, body, warmup, warming=True))
        server.control("-z")
        asyncio.run(_load(url, headers, body, calls))
        total, main = server.counted()
        counts.append(Count("gateway", kind, calls, total / calls, main / calls))
    return counts


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--calls", type=int, default=1600, help="requests counted per target")
    p.add_argument(
        "--warmup",
        type=int,
        default=WARMUP_CALLS,
        help="requests each server serves before the count (CI's smoke run takes fewer: its "
        "figures are not judged)",
    )
    p.add_argument("--kinds", default=",".join(KINDS), help=f"any of {', '.join(KINDS)}")
    p.add_argument(
        "--keep",
        type=Path,
        help="a directory to copy callgrind's files into, for callgrind_annotate (by C "
        "function: which calls cost what a Python profile cannot show)",
    )
    args = p.parse_args(argv)
    kinds = [k for k in args.kinds.split(",") if k]
    unknown = sorted(set(kinds) - set(KINDS))
    if unknown or min(args.calls, args.warmup) < WORKERS:
        p.error(
            f"unknown kinds {unknown}" if unknown else f"--calls and --warmup must be >= {WORKERS}"
        )
    if shutil.which("valgrind") is None or shutil.which("callgrind_control") is None:
        print("valgrind is not installed (apt-get install valgrind): nothing counted")
        return 2
    counts: list[Count] = []
    with tempfile.TemporaryDirectory(prefix="bench-instructions-") as tmp:
        logdir = Path(tmp)
        upstream_port = unshared_port()
        upstream_url = f"http://{HOST}:{upstream_port}/mcp"
        upstream = [sys.executable, str(THIS_FILE), "--serve-upstream", str(upstream_port)]
        with passthrough.server("upstream", upstream, upstream_port, logdir, 30):
            if "relay" in kinds:
                for target in ("proxy", "gateway"):
                    counts.append(
                        count_relay(target, args.calls, args.warmup, logdir, upstream_url)
                    )
            task_kinds = [k for k in kinds if k != "relay"]
            if task_kinds:
                counts.extend(
                    count_tasks(task_kinds, args.calls, args.warmup, logdir, upstream_url)
                )
        if args.keep is not None:
            args.keep.mkdir(parents=True, exist_ok=True)
            for path in logdir.glob("*.callgrind.*"):
                shutil.copy(path, args.keep / path.name)
    print(f"instructions per request (callgrind, user space), {args.calls} requests each")
    print(f"{'kind':8s} {'target':8s} {'all threads':>12s} {'loop thread':>12s}")
    for c in counts:
        print(f"{c.kind:8s} {c.target:8s} {c.total:12,.0f} {c.main:12,.0f}")
    relay = {c.target: c for c in counts if c.kind == "relay"}
    if len(relay) == 2:
        ratio = relay["gateway"].total / relay["proxy"].total
        print(f"KEY relay instructions, gateway/forwarder: {ratio:.2f}x (CPU target <= 1.1x)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
