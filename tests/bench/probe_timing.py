"""Probe timing: does `tasks/get` for another principal's task id take longer than for an id
that does not exist? If it did, a caller could tell the two apart by the clock although the
answers are identical (docs/security.md).

One gateway process (the command, real HTTP, API-key authentication), two principals: alice
starts a task; bob asks for it, and for a random id, interleaved, N times each over one
keep-alive connection. Prints the median and the 10th/90th percentiles of each and their
difference. A script, not a test (this machine is shared and noisy: compare within one run)::

    .venv/bin/python -m tests.bench.probe_timing --samples 400
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import os
import secrets
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import aiohttp

from tests.conftest import ROOT, free_port, wait_for_port

KEYS = {"alice": "alice-key-0123456789", "bob": "bob-key-9876543210"}


def config(port: int, folder: Path) -> Path:
    keys = ", ".join(
        f"{{principal: {name}, sha256: {hashlib.sha256(key.encode()).hexdigest()}}}"
        for name, key in KEYS.items()
    )
    path = folder / "gateway.yaml"
    path.write_text(
        f"listen: {{host: 127.0.0.1, port: {port}}}\n"
        f"store: {{path: {json.dumps(str(folder / 'gateway.db'))}}}\n"
        f"auth: {{api_keys: [{keys}]}}\n"
        "limits: {requests_per_second: 100000, burst: 100000}\n"
        "routes: [{name: demo, upstream: "
        "{transport: stdio, command: [python, -m, gateway.demo]}}]\n"
    )
    return path


async def session(http: aiohttp.ClientSession, url: str, key: str) -> dict[str, str]:
    base = {
        "Authorization": f"Bearer {key}",
        "Accept": "application/json, text/event-stream",
        "Content-Type": "application/json",
    }
    init = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-11-25",
            "capabilities": {},
            "clientInfo": {"name": "probe-timing", "version": "1"},
        },
    }
    async with http.post(url, json=init, headers=base) as resp:
        headers = {**base, "Mcp-Session-Id": resp.headers["Mcp-Session-Id"]}
    note = {"jsonrpc": "2.0", "method": "notifications/initialized"}
    async with http.post(url, json=note, headers=headers):
        pass
    return headers


async def measure(url: str, samples: int) -> dict[str, list[float]]:
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=1)) as http:
        alice = await session(http, url, KEYS["alice"])
        bob = await session(http, url, KEYS["bob"])
        call = {
            "jsonrpc": "2.0",
            "id": 2,
            "method": "tools/call",
            "params": {"name": "slow", "arguments": {"seconds": 600}, "task": {}},
        }
        async with http.post(url, json=call, headers=alice) as resp:
            foreign = (await resp.json())["result"]["task"]["taskId"]
        times: dict[str, list[float]] = {"another principal's id": [], "unknown id": []}
        for i in range(samples * 2 + 20):
            kind = "another principal's id" if i % 2 else "unknown id"
            task_id = foreign if i % 2 else secrets.token_urlsafe(24)
            get = {"jsonrpc": "2.0", "id": 3, "method": "tasks/get", "params": {"taskId": task_id}}
            started = time.perf_counter()
            async with http.post(url, json=get, headers=bob) as resp:
                body = await resp.read()
            elapsed = time.perf_counter() - started
            assert b"Task not found" in body, body
            if i >= 20:  # warm-up
                times[kind].append(elapsed)
        return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--samples", type=int, default=400, help="probes of each kind (400)")
    args = parser.parse_args()
    port = free_port()
    with tempfile.TemporaryDirectory() as folder:
        path = config(port, Path(folder))
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        proc = subprocess.Popen(
            [sys.executable, "-m", "gateway", "--config", str(path), "--log-level", "WARNING"],
            cwd=ROOT,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            wait_for_port(port, proc)
            times = asyncio.run(measure(f"http://127.0.0.1:{port}/demo/mcp", args.samples))
        finally:
            proc.terminate()
            proc.wait(15)
    medians = {}
    for kind, values in times.items():
        deciles = statistics.quantiles(values, n=10)
        medians[kind] = statistics.median(values)
        print(
            f"{kind:>24}: median {medians[kind] * 1e6:7.0f} us  "
            f"p10 {deciles[0] * 1e6:7.0f} us  p90 {deciles[-1] * 1e6:7.0f} us  (n={len(values)})"
        )
    difference = medians["another principal's id"] - medians["unknown id"]
    print(f"{'difference of medians':>24}: {difference * 1e6:+7.0f} us")


if __name__ == "__main__":
    main()
