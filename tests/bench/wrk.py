"""The passthrough benchmark's load from wrk (a C load generator), and CPU time per call.

A Python load generator on the same two cores takes a share of the CPU that the servers under
test would otherwise have, and its own cost per request is several times theirs; wrk's is
small. So by default the passthrough benchmark drives each target with wrk (Debian's `wrk`
package), which posts `tools/call echo` on `concurrency` connections inside one MCP session
(opened here first), each request with an id of its own; a sample is checked here before and
after. Every target process's CPU time (user + system, from /proc) over the measured seconds,
divided by the calls made, is its CPU per call.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

#: wrk: each thread numbers its requests; ids differ across threads by a per-thread prefix.
_SCRIPT = r"""
local counter = 0
local prefix = 0
local threads = {}

function setup(thread)
  thread:set("prefix", #threads + 1)
  table.insert(threads, thread)
end

function init(args)
  wrk.method = "POST"
  wrk.headers["Content-Type"] = "application/json"
  wrk.headers["Accept"] = "application/json, text/event-stream"
  wrk.headers["Mcp-Protocol-Version"] = "2025-11-25"
  if args[1] ~= nil and args[1] ~= "" then wrk.headers["Mcp-Session-Id"] = args[1] end
  if args[2] ~= nil and args[2] ~= "" then wrk.headers["Authorization"] = args[2] end
end

function request()
  counter = counter + 1
  local id = prefix * 100000000 + counter
  local body = '{"jsonrpc":"2.0","id":' .. id .. ',"method":"tools/call",' ..
    '"params":{"name":"echo","arguments":{"text":"w' .. id .. '"}}}'
  return wrk.format(nil, nil, nil, body)
end
"""

_REQUESTS = re.compile(r"^\s*(\d+) requests in ([\d.]+)(\w+)", re.M)
_NON_2XX = re.compile(r"Non-2xx or 3xx responses: (\d+)")
_ERRORS = re.compile(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)")
_LATENCY = re.compile(r"^\s+(50|99)%\s+([\d.]+)(us|ms|s)\s*$", re.M)
_UNITS = {"us": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0}


def available() -> bool:
    return shutil.which("wrk") is not None


def cpu_seconds(pid: int) -> float:
    """The process's user + system CPU time so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@dataclass
class WrkRun:
    requests: int
    elapsed_s: float
    p50_s: float
    p99_s: float
    #: Non-2xx answers and socket errors: any makes the run invalid.
    errors: int
    output: str


def run(
    url: str, concurrency: int, seconds: float, session_id: str | None, authorization: str | None
) -> WrkRun:
    """One wrk run; raises RuntimeError when wrk fails or prints what cannot be read."""
    with tempfile.NamedTemporaryFile("w", suffix=".lua", delete=False) as script:
        script.write(_SCRIPT)
    try:
        # wrk takes whole seconds only: a shorter run (the smoke form's warm-up) takes one.
        whole = max(1, round(seconds))
        argv = [
            "wrk",
            f"-t{min(2, concurrency)}",
            f"-c{concurrency}",
            f"-d{whole}s",
            "--latency",
            "-s",
            script.name,
            url,
            "--",
            session_id or "",
            authorization or "",
        ]
        done = subprocess.run(argv, capture_output=True, text=True, timeout=whole + 60)
    finally:
        os.unlink(script.name)
    out = done.stdout
    found = _REQUESTS.search(out)
    if done.returncode != 0 or found is None:
        raise RuntimeError(f"wrk failed ({done.returncode}): {out[-500:]} {done.stderr[-500:]}")
    latencies = {q: float(v) * _UNITS[unit] for q, v, unit in _LATENCY.findall(out)}
    errors = sum(int(n) for n in (_NON_2XX.findall(out) or ["0"]))
    socket = _ERRORS.search(out)
    if socket is not None:
        errors += sum(int(n) for n in socket.groups())
    return WrkRun(
        requests=int(found.group(1)),
        elapsed_s=float(found.group(2)) * _UNITS[found.group(3)],
        p50_s=latencies.get("50", float("nan")),
        p99_s=latencies.get("99", float("nan")),
        errors=errors,
        output=out,
    )
