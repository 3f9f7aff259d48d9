"""One store's gateway processes for the scripts that set stores or versions side by side
(`tests.bench.ab`, `tests.bench.per_replica`): started on ports of their own, with the probe
of their CPU and of their database's, and what each round measured of them."""

from __future__ import annotations

from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path

from tests.bench.cpu import CpuProbe, database_of, postmaster_of
from tests.bench.passthrough import HOST, REPO_ROOT, free_port
from tests.bench.pattern_report import TaskMeasurement
from tests.bench.tasks import KEY_CONCURRENCY, Stopped, gateway, gateway_config


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
) -> tuple[list[str], CpuProbe]:
    """`processes` gateways of the checkout at `root` on the store `section` (`database`: its
    PostgreSQL URL, None for SQLite), stopped when `stack` closes; their bench route's URLs,
    and the probe of their CPU (and of the database's backends)."""
    pids, urls = [], []
    for i in range(processes):
        port = free_port()
        config = gateway_config(port, section, upstream_url, 4, modern, callers)
        started = gateway(f"gateway-{name}{i}", config, port, logdir, Stopped(), root)
        proc = stack.enter_context(started)
        pids.append(proc.pid)
        urls.append(f"http://{HOST}:{port}/bench/mcp")
    if database is None:
        return urls, CpuProbe(pids)
    return urls, CpuProbe(pids, postmaster_of(database), database_of(database))
