"""A real tasks server for the tests: mcp-task-gateway, started as a child process.

The gateway runs from its own interpreter (it needs mcp 1.30, this package mcp 2.x):
`MCP_TASKS_GATEWAY_PYTHON`, by default the repository's `.venv/bin/python`. Without it the
tests are skipped, saying so. Its route `demo` serves the bundled demo server (tools echo,
slow, ask, sample, roots, fail, error, log) with the gateway's defaults; route `required` makes
every tool a task (`tasks.default: required`), so questions reach the task's `inputRequests`.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
GATEWAY_PYTHON = Path(
    os.environ.get("MCP_TASKS_GATEWAY_PYTHON") or ROOT / ".venv" / "bin" / "python"
)
DEMO = "{transport: stdio, command: [python, -m, gateway.demo]}"
#: Fast polls keep the tests short; everything else is the gateway's default.
FAST = "poll_interval_ms: 50"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@dataclass
class Gateway:
    """A running gateway: its base URL, its store file and its log."""

    base: str
    store: Path
    log: Path
    proc: subprocess.Popen[bytes]

    def url(self, route: str = "demo") -> str:
        return f"{self.base}/{route}/mcp"


def route(name: str, tasks: str = "") -> str:
    """A YAML route entry serving the demo; `tasks` adds keys to its `tasks:` mapping."""
    keys = ", ".join(key for key in (FAST, tasks) if key)
    return f"  - {{name: {name}, upstream: {DEMO}, tasks: {{{keys}}}}}\n"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def wait_for_port(port: int, proc: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"the gateway exited with {proc.returncode}:\n{log.read_text()}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"the gateway did not listen on port {port}:\n{log.read_text()}")


@contextmanager
def run_gateway(directory: Path, routes: str, store: Path | None = None) -> Iterator[Gateway]:
    """`python -m gateway --config FILE` on a free port, stopped (SIGTERM) at the end."""
    if not GATEWAY_PYTHON.exists():
        pytest.skip(
            f"no gateway interpreter at {GATEWAY_PYTHON}: set MCP_TASKS_GATEWAY_PYTHON to the "
            "python of an environment with mcp-task-gateway installed"
        )
    port = free_port()
    store = store or directory / "gateway.db"
    config = directory / f"gateway-{port}.yaml"
    config.write_text(
        f"listen: {{host: 127.0.0.1, port: {port}}}\n"
        f"store: {{path: {str(store)!r}}}\n"
        "shutdown: {drain_seconds: 0}\n"
        f"routes:\n{routes}"
    )
    log = directory / f"gateway-{port}.log"
    with log.open("wb") as err:
        proc = subprocess.Popen(
            [str(GATEWAY_PYTHON), "-m", "gateway", "--config", str(config)],
            cwd=ROOT,
            stdout=subprocess.DEVNULL,
            stderr=err,
        )
    try:
        wait_for_port(port, proc, log)
        yield Gateway(f"http://127.0.0.1:{port}", store, log, proc)
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        proc.wait(20)


def kill(gateway: Gateway) -> None:
    """Stop the gateway as a crash would (SIGKILL): nothing is settled on the way out."""
    gateway.proc.kill()
    gateway.proc.wait(20)


@pytest.fixture(scope="session")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    """One gateway for the tests that need no restart: routes `demo` and `required`."""
    directory = tmp_path_factory.mktemp("gateway")
    with run_gateway(directory, route("demo") + route("required", "default: required")) as gw:
        yield gw
