"""The gateway processes the task benchmarks start: one on SQLite or replicas on PostgreSQL, each
on a port of its own, stopped with their stdio children; and for the scripts that set stores or
versions side by side (`tests.bench.tasks`, `tests.bench.ab`, `tests.bench.per_replica`) one
store's processes with the probe of their CPU and of their database's, and what each round
measured of them."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from tests.bench.cpu import CpuProbe, command_line, database_of, postmaster_of, stat_fields
from tests.bench.lifecycles import api_keys_section
from tests.bench.passthrough import HOST, REPO_ROOT, free_port, wait_for_port
from tests.bench.pattern_report import TaskMeasurement

#: The clients of the creation's key measurement, and the API keys a gateway knows by default.
KEY_CONCURRENCY = 32
GATEWAY_START_TIMEOUT_S = 30.0
GATEWAY_STOP_TIMEOUT_S = 15.0
CHILD_EXIT_TIMEOUT_S = 5.0


def sqlite_store(db_path: Path) -> str:
    # json.dumps yields quoted scalars that are also valid YAML, so odd tmp paths stay safe.
    return f"{{path: {json.dumps(str(db_path))}}}"


def gateway_config(
    port: int,
    store: str,
    upstream_url: str,
    max_children: int,
    modern: bool = False,
    callers: int = KEY_CONCURRENCY,
) -> str:
    """`store`: the store section, sqlite_store() or replicas.postgres_store(); `modern`: the
    bench route makes every 2026-07-28 echo a task, at once (keys older gateways reject);
    `callers`: the API keys it knows (`lifecycles.caller_key`), one per client."""
    window = ", sync_window_ms: 0, tools: {echo: required}" if modern else ""
    return (
        f"listen: {{host: {HOST}, port: {port}}}\n"
        f"store: {store}\n"
        "routes:\n"
        "  - name: bench\n"
        f"    upstream: {{transport: streamable_http, url: {json.dumps(upstream_url)}}}\n"
        f"    tasks: {{default_ttl_ms: 600000{window}}}\n"
        "  - name: demo\n"
        "    upstream:\n"
        "      transport: stdio\n"
        "      command: [python, -m, gateway.demo]\n"
        f"      max_children: {max_children}\n"
        "sessions: {max_sessions: 5000}\n"
        # The stop is measured with thousands of tasks in flight: failed at once, no drain.
        "shutdown: {drain_seconds: 0}\n"
        # Identity and limits on, as in service: each client a principal of its own, held to
        # the default limits of tasks and sessions; only the request rate is raised, since one
        # client polling back to back sends more than a principal's default 100 a second.
        + api_keys_section(callers)
        + "limits: {requests_per_second: 1000000, burst: 1000000}\n"
    )


@dataclass
class Stopped:
    seconds: float = 0.0
    killed: bool = False
    leftover_children: list[int] = field(default_factory=list)


@contextmanager
def gateway(
    name: str,
    config: str,
    port: int,
    logdir: Path,
    stopped: Stopped,
    root: Path = REPO_ROOT,
    stop_timeout: float = GATEWAY_STOP_TIMEOUT_S,
) -> Iterator[subprocess.Popen[bytes]]:
    """The gateway of the checkout at `root` (another version's, for `tests.bench.ab`);
    SIGKILL when SIGTERM has not stopped it within `stop_timeout` seconds."""
    cfg = logdir / f"{name}.yaml"
    cfg.write_text(config)
    log = logdir / f"{name}.log"
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(root), env.get("PYTHONPATH")]))
    argv = [sys.executable, "-m", "gateway", "--config", str(cfg)]
    with log.open("wb") as out:
        proc = subprocess.Popen(
            argv, cwd=root, env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=out
        )
    children: list[int] = []
    try:
        wait_for_port(proc, port, log, name, GATEWAY_START_TIMEOUT_S)
        yield proc
    finally:
        if proc.poll() is None:
            children = child_pids(proc.pid)
            began = time.perf_counter()
            proc.terminate()
            try:
                proc.wait(timeout=stop_timeout)
            except subprocess.TimeoutExpired:
                stopped.killed = True
                proc.kill()
                proc.wait(timeout=5)
            stopped.seconds = time.perf_counter() - began
        # Its stdio children should go with it; any that do not are ended here, by pid.
        for _ in range(int(CHILD_EXIT_TIMEOUT_S / 0.1)):
            if not any(_alive(c) for c in children):
                break
            time.sleep(0.1)
        for c in children:
            if _alive(c) and "gateway.demo" in command_line(c):
                stopped.leftover_children.append(c)
                try:
                    os.kill(c, signal.SIGTERM)
                except OSError:
                    pass


def child_pids(pid: int) -> list[int]:
    """Direct children of `pid`, from /proc/*/stat (bounded by the number of processes)."""
    found: list[int] = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and (fields := stat_fields(int(entry))) and fields[1] == str(pid):
            found.append(int(entry))
    return found


def _alive(pid: int) -> bool:
    fields = stat_fields(pid)
    return fields is not None and fields[0] != "Z"


@dataclass
class Gateways:
    name: str
    urls: list[str]
    probe: CpuProbe
    rates: list[float] = field(default_factory=list)
    #: Milliseconds of the gateways' CPU per operation, and of their database's backends'.
    gateway_ms: list[float] = field(default_factory=list)
    database_ms: list[float] = field(default_factory=list)

    def record(self, m: TaskMeasurement) -> None:
        """One round's rate, and the CPU per operation its probe measured."""
        ops = max(1, m.requests)
        self.rates.append(m.rps)
        if m.gateway_cpu_s is not None:
            self.gateway_ms.append(1000 * m.gateway_cpu_s / ops)
        if m.db_cpu_s is not None:
            self.database_ms.append(1000 * m.db_cpu_s / ops)


def start_gateways(
    stack: ExitStack,
    name: str,
    section: str,
    database: str | None,
    processes: int,
    upstream_url: str,
    logdir: Path,
    root: Path = REPO_ROOT,
    modern: bool = False,
    callers: int = KEY_CONCURRENCY,
    max_children: int = 4,
) -> tuple[list[str], CpuProbe]:
    """`processes` gateways of the checkout at `root` on the store `section` (`database`: its
    PostgreSQL URL, None for SQLite), stopped when `stack` closes; their bench route's URLs,
    and the probe of their CPU (and of the database's backends)."""
    pids, urls = [], []
    for i in range(processes):
        port = free_port()
        config = gateway_config(port, section, upstream_url, max_children, modern, callers)
        started = gateway(f"gateway-{name}{i}", config, port, logdir, Stopped(), root)
        proc = stack.enter_context(started)
        pids.append(proc.pid)
        urls.append(f"http://{HOST}:{port}/bench/mcp")
    if database is None:
        return urls, CpuProbe(pids)
    return urls, CpuProbe(pids, postmaster_of(database), database_of(database))
