"""CPU per operation for the tasks benchmark's stores: the gateway processes' user and system
time over a measured window, their event loops' share of it, and that of the PostgreSQL
server's backends serving the store's database, each divided by the operations of the window.

Throughput on a 2-core machine shared with the load generator says little about what a
lifecycle costs once replicas are added; CPU per lifecycle does, on the gateway side and on the
database's. Times come from ``/proc/PID/stat`` (utime + stime). The database's backends are
the postmaster's children whose process title names the store's database (PostgreSQL sets it
to ``postgres: USER DATABASE HOST(PORT) STATE``); a backend started within the window counts
from zero, one that exited within it is lost (the pool keeps its connections, so none do).

A gateway's event loop runs on its main thread (``/proc/PID/task/PID/stat``), and everything a
request does in Python runs there: that thread's CPU per operation bounds one process's rate
(a second divided by it), whatever its other threads (the SQLite writer's, the audit log's)
add beside it.
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


def stat_fields(pid: int, thread: int | None = None) -> list[str] | None:
    """The fields of `/proc/PID/stat`, or of one of its threads' (`thread`); None once gone."""
    path = f"/proc/{pid}/stat" if thread is None else f"/proc/{pid}/task/{thread}/stat"
    try:
        with open(path, encoding="ascii", errors="replace") as f:
            stat = f.read()
    except OSError:
        return None
    # The command may hold spaces and parentheses: the fields start after the last ')'.
    return stat[stat.rfind(")") + 2 :].split()


def cpu_seconds(pid: int, thread: int | None = None) -> float:
    """utime + stime of `pid` (or of its thread `thread`) in seconds; 0.0 once gone."""
    fields = stat_fields(pid, thread)
    return 0.0 if fields is None else (int(fields[11]) + int(fields[12])) * _TICK_S


def loop_seconds(pid: int) -> float:
    """The CPU seconds of the main thread of `pid`, a gateway's event loop's (its id is the
    process's)."""
    return cpu_seconds(pid, pid)


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


@dataclass(frozen=True)
class Spent:
    """CPU seconds over a probe's window: the gateways' processes, their event loops' threads
    (part of the first), their database's backends (None for SQLite)."""

    gateway: float
    loop: float
    database: float | None


@dataclass
class CpuProbe:
    """The CPU a store's processes spend between `begin` and `end`."""

    gateways: Sequence[int]
    #: The postmaster and the store's database, for PostgreSQL stores.
    postmaster: int | None = None
    database: str | None = None

    def __post_init__(self) -> None:
        self._start: dict[int, float] = {}
        self._loops = 0.0

    def _now(self) -> dict[int, float]:
        db = [] if self.postmaster is None else backends(self.postmaster, self.database or "")
        return {pid: cpu_seconds(pid) for pid in [*self.gateways, *db]}

    def begin(self) -> None:
        self._start = self._now()
        self._loops = sum(loop_seconds(pid) for pid in self.gateways)

    def end(self) -> Spent:
        """The CPU spent since `begin`."""
        spent = {pid: s - self._start.get(pid, 0.0) for pid, s in self._now().items()}
        gateway = sum(spent.pop(pid, 0.0) for pid in self.gateways)
        loop = sum(loop_seconds(pid) for pid in self.gateways) - self._loops
        return Spent(gateway, loop, None if self.postmaster is None else sum(spent.values()))


def database_of(url: str) -> str:
    return urlsplit(url).path.lstrip("/")


def per_op_ms(cpu_s: Sequence[float | None], ops: Sequence[int]) -> float | None:
    """The median over rounds of CPU milliseconds per operation."""
    each = [1000 * s / n for s, n in zip(cpu_s, ops, strict=True) if s is not None and n]
    return round(statistics.median(each), 3) if each else None


def ms_text(value: object) -> str:
    """A table's milliseconds per operation ("-" where nothing was measured)."""
    return "-" if value is None else f"{value:.2f}"


def cpu_row(rounds: Sequence[Measurement]) -> JsonObj:
    """A store's CPU per operation for the JSON summary: milliseconds, median over rounds."""
    tasks = [m for m in rounds if isinstance(m, TaskMeasurement)]
    ops = [m.requests for m in tasks]
    return {
        "gateway_cpu_ms_per_op": per_op_ms([m.gateway_cpu_s for m in tasks], ops),
        "loop_cpu_ms_per_op": per_op_ms([m.loop_cpu_s for m in tasks], ops),
        "db_cpu_ms_per_op": per_op_ms([m.db_cpu_s for m in tasks], ops),
    }
