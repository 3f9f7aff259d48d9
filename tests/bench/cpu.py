"""CPU per operation for the tasks benchmark's stores: the gateway processes' user and system
time over a measured window, and that of the PostgreSQL server's backends serving the store's
database, each divided by the operations of the window.

Throughput on a 2-core machine shared with the load generator says little about what a
lifecycle costs once replicas are added; CPU per lifecycle does, on the gateway side and on the
database's. Times come from ``/proc/PID/stat`` (utime + stime). The database's backends are
the postmaster's children whose process title names the store's database (PostgreSQL sets it
to ``postgres: USER DATABASE HOST(PORT) STATE``); a backend started within the window counts
from zero, one that exited within it is lost (the pool keeps its connections, so none do).
"""

from __future__ import annotations

import asyncio
import os
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from urllib.parse import urlsplit

import asyncpg

from tests.bench.passthrough import JsonObj, Measurement
from tests.bench.pattern_report import TaskMeasurement

_TICK_S = 1.0 / os.sysconf("SC_CLK_TCK")


def stat_fields(pid: int) -> list[str] | None:
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as f:
            stat = f.read()
    except OSError:
        return None
    # The command may hold spaces and parentheses: the fields start after the last ')'.
    return stat[stat.rfind(")") + 2 :].split()


def cpu_seconds(pid: int) -> float:
    """utime + stime of `pid` in seconds; 0.0 for a process that is gone."""
    fields = stat_fields(pid)
    return 0.0 if fields is None else (int(fields[11]) + int(fields[12])) * _TICK_S


def command_line(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def backends(postmaster: int, database: str) -> list[int]:
    """The postmaster's children serving `database`."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and (fields := stat_fields(int(entry))) and fields[1] == str(postmaster):
            if f" {database} " in command_line(int(entry)):
                found.append(int(entry))
    return found


def postmaster_of(url: str) -> int:
    """The pid of the postmaster serving `url` (the parent of a backend of ours).

    Raises: what asyncpg raises if it cannot connect; RuntimeError if the server is not on
    this machine."""

    async def backend_stat() -> list[str] | None:
        conn = await asyncpg.connect(url)
        try:  # (read while the backend lives: it ends with the connection)
            return stat_fields(await conn.fetchval("SELECT pg_backend_pid()"))
        finally:
            await conn.close()

    fields = asyncio.run(backend_stat())
    if fields is None:
        raise RuntimeError("the PostgreSQL server is not on this machine: no CPU figures")
    return int(fields[1])


@dataclass
class CpuProbe:
    """The CPU a store's processes spend between `begin` and `end`."""

    gateways: Sequence[int]
    #: The postmaster and the store's database, for PostgreSQL stores.
    postmaster: int | None = None
    database: str | None = None

    def __post_init__(self) -> None:
        self._start: dict[int, float] = {}

    def _now(self) -> dict[int, float]:
        db = [] if self.postmaster is None else backends(self.postmaster, self.database or "")
        return {pid: cpu_seconds(pid) for pid in [*self.gateways, *db]}

    def begin(self) -> None:
        self._start = self._now()

    def end(self) -> tuple[float, float | None]:
        """Seconds of CPU since `begin`: the gateways', the database backends' (None for
        SQLite)."""
        spent = {pid: s - self._start.get(pid, 0.0) for pid, s in self._now().items()}
        gateway = sum(spent.pop(pid, 0.0) for pid in self.gateways)
        return gateway, None if self.postmaster is None else sum(spent.values())


def database_of(url: str) -> str:
    return urlsplit(url).path.lstrip("/")


def per_op_ms(cpu_s: Sequence[float | None], ops: Sequence[int]) -> float | None:
    """The median over rounds of CPU milliseconds per operation."""
    each = [1000 * s / n for s, n in zip(cpu_s, ops, strict=True) if s is not None and n]
    return round(statistics.median(each), 3) if each else None


def cpu_row(rounds: Sequence[Measurement]) -> JsonObj:
    """A store's CPU per operation for the JSON summary: milliseconds, median over rounds."""
    tasks = [m for m in rounds if isinstance(m, TaskMeasurement)]
    ops = [m.requests for m in tasks]
    return {
        "gateway_cpu_ms_per_op": per_op_ms([m.gateway_cpu_s for m in tasks], ops),
        "db_cpu_ms_per_op": per_op_ms([m.db_cpu_s for m in tasks], ops),
    }
