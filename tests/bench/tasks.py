"""Tasks benchmark: task creation and lifecycle throughput, and memory with tasks in flight.

Three measurements of ``python -m gateway --config FILE`` serving MCP Tasks (the client patterns
are in ``tests/bench/lifecycles.py``):

1. ``create``    -- ``tools/call echo`` with ``task: {}`` on the ``bench`` route (upstream: the
   passthrough benchmark's tiny responder); every answer must be a CreateTaskResult whose task
   is ``working``. At concurrency 32 (target >= 2,500 creations/s, durable commits) and 1.
2. the client patterns of ``--patterns``, at concurrency 32, each result's text checked:
   ``lifecycle`` (polling: create, ``tasks/get`` back-to-back until ``completed``, no
   pollInterval sleep, then ``tasks/result``), ``blocking`` (create, ``tasks/result`` at once,
   which waits for the end, then ``tasks/get``; every round also prints its ``tasks/result``
   waits: p99, max and how many took over 1 s) and ``modern`` (2026-07-28, no session:
   ``tools/call`` with the tasks extension, then ``tasks/get`` until the result is inlined).
   ``tests/bench/pattern_report.py`` prints the later two beside the polling one.
3. ``memory``    -- VmRSS of a freshly started gateway at idle, then with 1,000 and 10,000
   ``slow`` tasks (600 s) in flight on the ``demo`` stdio route, 1,000 tasks per session (each
   session has its own stdio child, which is not counted). Target: 100,000 under 600 MiB
   (``--tasks-in-flight 10000,100000``: a hundred stdio children, minutes of filling).

Parts 1 and 2 also run, in the same rounds, against references that are no gateway: in-memory
task servers with the same ``echo`` tool (``tests/bench/task_refs.py``): the Python SDK 1.30's
(``tests/bench/native_tasks.py``) and the TypeScript SDK 1.32.2's
(``tests/bench/ts-tasks/server.mjs``, installed by ``.ci/ts-tasks.sh``; without it the default
``--reference both`` says so and measures the Python one alone). The gateway's figures are
printed as ratios of each reference's, of the medians and round by round (target: a lifecycle
at c=32 at least 0.6x the reference's rate, with every state change durable; goal: 1.0x). The
references speak 2025-11-25 alone: ``modern`` runs on the gateway only.
``--reference python`` or ``ts`` measures one, ``none`` neither. Every answer of a reference
is checked as the gateway's are, and its errors make the run invalid too.

Parts 1 and 2 run on each store of ``--stores`` (``tests/bench/replicas.py``): ``sqlite`` (one
gateway on its file), ``postgres1`` (one replica on a fresh PostgreSQL database) and
``postgres3`` (three replicas on one fresh database, the workers spread round-robin over their
ports); the PostgreSQL server is the one ``.ci/postgres.sh`` runs. Part 3 runs on SQLite.

Identity and limits are on, as in service: each client carries an API key of its own (a
principal of its own) and is held to the default limits of active tasks and sessions; only
the request rate per principal is raised above what one client polling back to back sends.

Every measurement of parts 1 and 2 opens its own MCP sessions (one per worker; none for
``modern``) and ends them with DELETE afterwards; rounds are interleaved (each round runs each
measurement on every reference and store in turn, back to back) and the median round is
reported. Every server runs in its own subprocess; the load generator is this process. A
script, not a test::

    .venv/bin/python -m tests.bench.tasks
    .venv/bin/python -m tests.bench.tasks --seconds 3 --rounds 1 --skip-memory --json
    .venv/bin/python -m tests.bench.tasks --stores sqlite      # without PostgreSQL
    .venv/bin/python -m tests.bench.tasks --stores sqlite --rounds 3 --seconds 5 --skip-memory
    .venv/bin/python -m tests.bench.tasks --stores sqlite --skip-memory --patterns blocking
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp

from gateway.config import POOL_SIZE
from tests.bench.cpu import CpuProbe, Spent, cpu_row, ms_text
from tests.bench.lifecycles import (
    GATEWAY_ONLY,
    OPS,
    PATTERNS,
    SESSIONLESS,
    Op,
    TaskClient,
    legend,
    plan,
)
from tests.bench.passthrough import (
    HOST,
    MAX_ERROR_SAMPLES,
    REQUEST_TIMEOUT_S,
    BenchError,
    ErrorLog,
    JsonObj,
    Measurement,
    Summary,
    free_port,
    server,
    summarise,
)
from tests.bench.passthrough import THIS_FILE as PASSTHROUGH_FILE
from tests.bench.pattern_report import TaskMeasurement, report_patterns, round_note
from tests.bench.replicas import (
    REPLICAS,
    STORES,
    csv_stores,
    fresh_database,
    postgres_server,
    postgres_store,
    report_stores,
)
from tests.bench.stores import (
    GATEWAY_STOP_TIMEOUT_S,
    KEY_CONCURRENCY,
    Stopped,
    gateway,
    gateway_config,
    sqlite_store,
    start_gateways,
)
from tests.bench.task_refs import CHOICES, chosen, report_reference

CREATE_TARGET_PER_S = 2500.0
MEMORY_TARGET_TASKS = 100_000
MEMORY_TARGET_MIB = 600.0
#: CI's smoke run and the default: the target's level takes minutes and a hundred stdio children.
MEMORY_LEVELS = [1000, 10_000]

# Hard bounds so that no loop can run away even if the clock or the gateway misbehaves.
MAX_OPS_PER_WORKER = 1_000_000
MAX_ERRORS_PER_MEASUREMENT = 10_000

# Memory: tasks that stay `working` for the whole measurement.
SLOW_ARGS: JsonObj = {"seconds": 600, "steps": 1}
TASKS_PER_SESSION = 1000
FILL_CONCURRENCY = 32
#: Each session starts a stdio child (a Python process): a hundred at once on two shared cores
#: take longer to answer initialize than a request may.
OPEN_CONCURRENCY = 4
#: Per 10,000 tasks of a level's fill (100,000 take minutes on a loaded machine).
FILL_TIMEOUT_S = 120.0
SETTLE_S = 2.0
CHECKS_PER_LEVEL = 20
FD_HEADROOM = 1024

#: The memory gateway's stop fails every task in flight: this much more per 1,000 of them.
STOP_S_PER_1000_TASKS = 1.5

MIB = 1024 * 1024
CLIENT_ERRORS = (BenchError, aiohttp.ClientError, TimeoutError, ValueError)


# --------------------------------------------------------------------------------------------
# Throughput: parts 1 and 2.
# --------------------------------------------------------------------------------------------


async def _drive(
    op: Op,
    client: TaskClient,
    tag: str,
    deadline: float,
    errors: ErrorLog,
    latencies: list[float],
    http_requests: list[int],
    every: float = 0.0,
) -> None:
    for seq in range(MAX_OPS_PER_WORKER):
        if time.perf_counter() >= deadline or errors.count >= MAX_ERRORS_PER_MEASUREMENT:
            return
        text = f"{tag}-{seq}"  # unique per operation, so a mixed-up result cannot pass
        started = time.perf_counter()
        try:
            sent = await op(client, text)
        except CLIENT_ERRORS as exc:
            errors.add(f"{type(exc).__name__}: {exc}")
            continue
        latencies.append(time.perf_counter() - started)
        http_requests.append(sent)
        if every:  # the next one starts `every` after this one started (at once if late)
            await asyncio.sleep(started + every - time.perf_counter())


async def measure(
    kind: str,
    urls: Sequence[str],
    concurrency: int,
    seconds: float,
    warmup: float,
    probe: CpuProbe | None = None,
    every: float = 0.0,
) -> TaskMeasurement:
    """`concurrency` workers, worker i on urls[i mod len(urls)] (with a session of its own,
    unless the pattern is session-less); `probe` measures the CPU of the measured seconds.
    With `every`, each worker starts an operation every that many seconds (or, when one
    takes longer, as soon as it ends), not back to back."""
    op = OPS[kind]
    errors = ErrorLog()
    connector = aiohttp.TCPConnector(limit=concurrency + 4)
    timeout = aiohttp.ClientTimeout(total=REQUEST_TIMEOUT_S)
    latencies: list[list[float]] = [[] for _ in range(concurrency)]
    sent: list[list[int]] = [[] for _ in range(concurrency)]
    started = time.perf_counter()
    elapsed = 0.0
    cpu: Spent | None = None
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as http:
        clients = [TaskClient(http, urls[i % len(urls)], i) for i in range(concurrency)]
        try:
            await asyncio.gather(*(c.open() for c in clients if kind not in SESSIONLESS))
        except CLIENT_ERRORS as exc:
            errors.add(f"session setup: {type(exc).__name__}: {exc}")
        else:
            # Warm-up latencies are thrown away; its errors count.
            scratch: list[float] = []
            scratch_sent: list[int] = []
            warm_deadline = time.perf_counter() + warmup
            await asyncio.gather(
                *(
                    _drive(op, c, f"warm{i}", warm_deadline, errors, scratch, scratch_sent, every)
                    for i, c in enumerate(clients)
                )
            )
            for c in clients:
                c.waits.clear()
            if probe is not None:
                probe.begin()
            started = time.perf_counter()
            deadline = started + seconds
            await asyncio.gather(
                *(
                    _drive(op, c, f"w{i}", deadline, errors, latencies[i], sent[i], every)
                    for i, c in enumerate(clients)
                )
            )
            # Operations in flight at the deadline still finish and count, so time runs on.
            elapsed = time.perf_counter() - started
            if probe is not None:
                cpu = probe.end()
        closed = await asyncio.gather(*(c.close() for c in clients), return_exceptions=True)
        for outcome in closed:
            if isinstance(outcome, BaseException):
                errors.add(f"session close: {type(outcome).__name__}: {outcome}")
    flat = [x for lat in latencies for x in lat]
    return TaskMeasurement(
        target=kind,
        concurrency=concurrency,
        requests=len(flat),
        elapsed_s=elapsed,
        latencies_s=flat,
        errors=errors,
        http_requests=sum(sum(s) for s in sent),
        waits_s=[w for c in clients for w in c.waits],
        gateway_cpu_s=None if cpu is None else cpu.gateway,
        loop_cpu_s=None if cpu is None else cpu.loop,
        db_cpu_s=None if cpu is None else cpu.database,
    )


Runs = dict[tuple[str, str, int], list[Measurement]]


async def run_throughput(
    args: argparse.Namespace, targets: dict[str, list[str]], probes: dict[str, CpuProbe]
) -> tuple[dict[str, list[Summary]], Runs]:
    """Every target's summaries (plan order; a reference's without GATEWAY_ONLY patterns) and
    every round's measurements; `targets`: a store's gateway URLs, or a reference's URL;
    `probes`: a store's CPU probe."""
    runs: Runs = {}
    # Interleave (round -> measurement -> store): a noisy spell hits every one alike, and the
    # figures that make a ratio are measured back to back.
    for rnd in range(1, args.rounds + 1):
        for kind, c in args.plan:
            for store, urls in targets.items():
                if store not in REPLICAS and kind in GATEWAY_ONLY:
                    continue
                on = "" if store == "sqlite" else f" on {store}"
                probe = probes.get(store)
                m = await measure(kind, urls, c, args.seconds, args.warmup, probe)
                runs.setdefault((store, kind, c), []).append(m)
                print(
                    f"round {rnd}/{args.rounds} {kind:<9} c={c:<3} {m.rps:9.1f}/s "
                    f"errors={m.errors.count}{on}{round_note(m)}",
                    file=sys.stderr,
                    flush=True,
                )
    summaries = {
        store: [summarise(runs[(store, *k)], "median") for k in args.plan if (store, *k) in runs]
        for store in targets
    }
    return summaries, runs


# --------------------------------------------------------------------------------------------
# Memory: part 3.
# --------------------------------------------------------------------------------------------


def rss_bytes(pid: int) -> int:
    """VmRSS of `pid`; RuntimeError if the process is gone."""
    try:
        with open(f"/proc/{pid}/status", encoding="ascii", errors="replace") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except OSError as exc:
        raise RuntimeError(f"cannot read /proc/{pid}/status: {exc}") from exc
    raise RuntimeError(f"no VmRSS for pid {pid} (exited?)")


def open_fds(pid: int) -> int | None:
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return None


@dataclass
class Level:
    label: str
    tasks: int
    sessions: int
    rss_bytes: int
    fds: int | None = None
    fill_s: float | None = None
    added: int = 0  # tasks created by this level's fill
    checked: int = 0
    working: int = 0

    @property
    def rss_mib(self) -> float:
        return self.rss_bytes / MIB


@dataclass
class MemoryResult:
    fd_soft_limit: int
    levels: list[Level] = field(default_factory=list)
    errors: ErrorLog = field(default_factory=ErrorLog)
    notes: list[str] = field(default_factory=list)

    @property
    def valid(self) -> bool:
        return self.errors.count == 0 and len(self.levels) > 1


async def _fill(
    clients: list[TaskClient], ids: list[list[str]], start: int, stop: int, errors: ErrorLog
) -> None:
    """Create tasks number start..stop-1; task k goes to session k // TASKS_PER_SESSION."""
    numbers = iter(range(start, stop))  # shared by the workers: each number is taken once
    allowed = FILL_TIMEOUT_S * math.ceil((stop - start) / 10_000)
    deadline = time.perf_counter() + allowed

    async def worker() -> None:
        for k in numbers:
            if time.perf_counter() > deadline:
                errors.add(f"fill: not done within {allowed:g}s (at task {k} of {stop})")
                return
            if errors.count >= MAX_ERRORS_PER_MEASUREMENT:
                return
            slot = k // TASKS_PER_SESSION
            try:
                ids[slot].append(await clients[slot].create_task("slow", SLOW_ARGS))
            except CLIENT_ERRORS as exc:
                errors.add(f"create slow task: {type(exc).__name__}: {exc}")

    await asyncio.gather(*(worker() for _ in range(FILL_CONCURRENCY)))


async def _check_working(
    clients: list[TaskClient], ids: list[list[str]], errors: ErrorLog
) -> tuple[int, int]:
    """tasks/get on a spread of tasks (first and last of each session); all must be working."""
    picks: list[tuple[int, str]] = []
    for slot, owned in enumerate(ids):
        for task_id in dict.fromkeys((owned[0], owned[-1]) if owned else ()):
            picks.append((slot, task_id))
    step = max(1, math.ceil(len(picks) / CHECKS_PER_LEVEL))
    picks = picks[::step]
    working = 0
    for slot, task_id in picks:
        try:
            status = await clients[slot].task_status(task_id)
        except CLIENT_ERRORS as exc:
            errors.add(f"tasks/get while in flight: {type(exc).__name__}: {exc}")
            continue
        if status == "working":
            working += 1
        else:
            errors.add(f"task {task_id} is {status!r} while in flight, expected working")
    return len(picks), working


async def _open(client: TaskClient, opening: asyncio.Semaphore) -> None:
    async with opening:
        await client.open()


async def run_memory(pid: int, url: str, levels: list[int], result: MemoryResult) -> None:
    await asyncio.sleep(SETTLE_S)
    result.levels.append(Level("idle after start", 0, 0, rss_bytes(pid), open_fds(pid)))
    opening = asyncio.Semaphore(OPEN_CONCURRENCY)
    connector = aiohttp.TCPConnector(limit=FILL_CONCURRENCY + 4)
    timeout = aiohttp.ClientTimeout(total=REQUEST_TIMEOUT_S)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as http:
        clients: list[TaskClient] = []
        ids: list[list[str]] = []
        created = in_flight = 0
        for target in levels:
            wanted = math.ceil(target / TASKS_PER_SESSION)
            fresh = [TaskClient(http, url, i) for i in range(len(clients), wanted)]
            try:
                await asyncio.gather(*(_open(c, opening) for c in fresh))
            except CLIENT_ERRORS as exc:
                result.errors.add(f"session setup: {type(exc).__name__}: {exc}")
                return
            clients.extend(fresh)
            ids.extend([] for _ in fresh)
            started = time.perf_counter()
            await _fill(clients, ids, created, target, result.errors)
            fill_s = time.perf_counter() - started
            created = target
            before, in_flight = in_flight, sum(len(x) for x in ids)
            await asyncio.sleep(SETTLE_S)  # let the runs reach their stdio children
            level = Level(
                f"{target:,} in flight",
                in_flight,
                len(clients),
                rss_bytes(pid),
                open_fds(pid),
                fill_s,
                in_flight - before,
            )
            level.checked, level.working = await _check_working(clients, ids, result.errors)
            result.levels.append(level)
            print(
                f"memory: {in_flight} tasks in flight, RSS {level.rss_mib:.1f} MiB, "
                f"errors={result.errors.count}",
                file=sys.stderr,
                flush=True,
            )
            if result.errors.count:
                return


def ensure_fd_limit(sessions: int) -> int:
    """Raise the soft RLIMIT_NOFILE if low (the gateway inherits it); returns the soft limit."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    # Per session: a client connection or two, and three pipes to its stdio child.
    needed = FD_HEADROOM + 8 * sessions
    if soft != resource.RLIM_INFINITY and soft < needed:
        new = needed if hard == resource.RLIM_INFINITY else min(hard, needed)
        resource.setrlimit(resource.RLIMIT_NOFILE, (new, hard))
        soft = new
    return int(soft)


# --------------------------------------------------------------------------------------------
# Gateway subprocess: like passthrough.server(), but the pid is needed for /proc.
# --------------------------------------------------------------------------------------------


def ref_log(name: str) -> str:
    """A reference's name among the targets of a round, and of its log file."""
    return f"{name}-reference"


def log_tail(logdir: Path, name: str, lines: int = 15) -> str:
    try:
        text = (logdir / f"{name}.log").read_text(errors="replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])


# --------------------------------------------------------------------------------------------
# Reporting
# --------------------------------------------------------------------------------------------


def _fmt_int(n: int | None) -> str:
    return "-" if n is None else str(n)


def summary_row(s: Summary) -> JsonObj:
    """A measurement's median round as the JSON summary reports it."""
    m = s.chosen
    http = m.http_requests if isinstance(m, TaskMeasurement) else 0
    per_op = http / m.requests if m.requests else math.nan
    return {
        "measurement": s.target,
        "concurrency": s.concurrency,
        "ops": m.requests,
        "ops_per_s": round(m.rps, 1),
        "p50_ms": round(m.percentile_ms(0.50), 3),
        "p99_ms": round(m.percentile_ms(0.99), 3),
        "max_ms": round(m.percentile_ms(1.0), 3),
        "http_requests_per_op": None if math.isnan(per_op) else round(per_op, 2),
        "errors": s.errors,
        "valid": s.valid,
        "rounds_ops_per_s": [round(r, 1) for r in s.rounds_rps],
    }


def report(
    args: argparse.Namespace,
    stores: dict[str, list[Summary]],
    memory: MemoryResult | None,
    throughput_rss: int | None,
    stops: dict[str, Stopped],
    measured: Runs,
) -> JsonObj:
    summaries = stores.get("sqlite", [])
    rows: list[JsonObj] = []
    key_rate: float | None = None
    key_loop_ms: float | None = None
    if summaries:
        print(
            f"\ngateway tasks: {args.seconds:g}s per round after {args.warmup:g}s warm-up; "
            f"MEDIAN of {args.rounds} round(s) by rate, latencies from that round; "
            f"{os.cpu_count()} CPU(s) shared by load generator, gateway and upstream"
        )
        header = (
            f"{'measurement':<10} {'conc':>4} {'ops':>7} {'ops/s':>8} {'p50 ms':>8} "
            f"{'p99 ms':>8} {'http/op':>7} {'gw ms/op':>8} {'loop ms/op':>10} {'errors':>6}  "
            f"{'valid':<7} rounds ops/s"
        )
        print(header)
        print("-" * len(header))
        for s in summaries:
            m = s.chosen
            http = m.http_requests if isinstance(m, TaskMeasurement) else 0
            per_op = http / m.requests if m.requests else math.nan
            p50, p99 = m.percentile_ms(0.50), m.percentile_ms(0.99)
            rounds = "/".join(f"{r:.0f}" for r in s.rounds_rps)
            mark = "yes" if s.valid else "INVALID"
            cpu = cpu_row(measured.get(("sqlite", s.target, s.concurrency), []))
            gw, loop = (ms_text(cpu[k]) for k in ("gateway_cpu_ms_per_op", "loop_cpu_ms_per_op"))
            print(
                f"{s.target:<10} {s.concurrency:>4} {m.requests:>7} {m.rps:>8.1f} {p50:>8.2f} "
                f"{p99:>8.2f} {per_op:>7.1f} {gw:>8} {loop:>10} {s.errors:>6}  {mark:<7} {rounds}"
            )
            rows.append({**summary_row(s), **cpu})
            if (s.target, s.concurrency) == ("create", KEY_CONCURRENCY) and s.valid:
                key_rate, key_loop_ms = m.rps, cpu["loop_cpu_ms_per_op"]
        print(legend([kind for kind, _ in args.plan]))
        verdict = (
            "n/a (invalid)"
            if key_rate is None
            else ("PASS" if key_rate >= CREATE_TARGET_PER_S else "BELOW TARGET")
        )
        rate = "n/a" if key_rate is None else f"{key_rate:.0f}/s"
        print(
            f"KEY task creations @ c={KEY_CONCURRENCY} (median): {rate} "
            f"(target >= {CREATE_TARGET_PER_S:.0f}/s) {verdict}"
        )
        if key_loop_ms:
            # What one event loop can give, whatever the machine's other core does.
            print(
                f"  the gateway's event loop spent {key_loop_ms:.3f} ms of CPU a creation: "
                f"at most {1000 / key_loop_ms:.0f} a second from one process on this machine"
            )
        if throughput_rss is not None:
            print(f"gateway RSS after the throughput parts: {throughput_rss / MIB:.1f} MiB")

    compared: JsonObj | None = None
    if any(store != "sqlite" for store in stores):
        store_rows = {
            store: [
                {**summary_row(s), **cpu_row(measured[(store, s.target, s.concurrency)])}
                for s in ss
            ]
            for store, ss in stores.items()
        }
        compared = report_stores(args, args.plan, store_rows)

    mem_json: JsonObj | None = None
    key_mib: float | None = None
    if memory is not None:
        print(
            f"\nresident memory: VmRSS of the gateway process (stdio children not counted), "
            f"demo `slow` {json.dumps(SLOW_ARGS)}, {TASKS_PER_SESSION} tasks per session, "
            f"RLIMIT_NOFILE soft {memory.fd_soft_limit}"
        )
        header = (
            f"{'state':<18} {'tasks':>6} {'sessions':>8} {'RSS MiB':>8} {'fds':>5} "
            f"{'fill s':>7} {'fill/s':>7}  tasks/get working"
        )
        print(header)
        print("-" * len(header))
        for lv in memory.levels:
            fill = "-" if lv.fill_s is None else f"{lv.fill_s:.1f}"
            rate = "-" if not lv.fill_s else f"{lv.added / lv.fill_s:.0f}"
            check = "-" if lv.checked == 0 else f"{lv.working}/{lv.checked}"
            print(
                f"{lv.label:<18} {lv.tasks:>6} {lv.sessions:>8} {lv.rss_mib:>8.1f} "
                f"{_fmt_int(lv.fds):>5} {fill:>7} {rate:>7}  {check}"
            )
            if lv.tasks == MEMORY_TARGET_TASKS and memory.valid:
                key_mib = lv.rss_mib
        stop = stops.get("memory")
        if stop is not None:
            print(
                f"gateway stop (SIGTERM) took {stop.seconds:.1f}s"
                + (" and needed SIGKILL" if stop.killed else "")
                + (
                    f"; {len(stop.leftover_children)} stdio child(ren) outlived it"
                    if stop.leftover_children
                    else "; its stdio children exited with it"
                )
            )
        if not memory.valid:
            print("memory numbers INVALID (errors or incomplete)")
        if any(lv.tasks == MEMORY_TARGET_TASKS for lv in memory.levels) or key_mib is not None:
            verdict = (
                "n/a (invalid)"
                if key_mib is None
                else ("PASS" if key_mib < MEMORY_TARGET_MIB else "OVER TARGET")
            )
            shown = "n/a" if key_mib is None else f"{key_mib:.1f} MiB"
            print(
                f"KEY RSS with {MEMORY_TARGET_TASKS:,} tasks in flight: {shown} "
                f"(target < {MEMORY_TARGET_MIB:.0f} MiB) {verdict}"
            )
        mem_json = {
            "valid": memory.valid,
            "errors": memory.errors.count,
            "fd_soft_limit": memory.fd_soft_limit,
            "levels": [
                {
                    "state": lv.label,
                    "tasks": lv.tasks,
                    "sessions": lv.sessions,
                    "rss_mib": round(lv.rss_mib, 1),
                    "fds": lv.fds,
                    "fill_s": None if lv.fill_s is None else round(lv.fill_s, 2),
                    "checked_working": [lv.working, lv.checked],
                }
                for lv in memory.levels
            ],
            "stop_s": None if stop is None else round(stop.seconds, 2),
            "stop_killed": None if stop is None else stop.killed,
            "leftover_children": None if stop is None else len(stop.leftover_children),
        }

    print("\nnumbers come from one shared machine: expect run-to-run noise of 10-20%")
    for store, ss in stores.items():
        on = "" if store == "sqlite" else f" on {store}"
        for s in ss:
            if s.errors:
                print(f"\nERRORS {s.target} c={s.concurrency}{on}: {s.errors}", file=sys.stderr)
                for sample in s.error_samples:
                    print(f"  {sample}", file=sys.stderr)
    if memory is not None and memory.errors.count:
        print(f"\nERRORS memory: {memory.errors.count}", file=sys.stderr)
        for sample in memory.errors.samples[:MAX_ERROR_SAMPLES]:
            print(f"  {sample}", file=sys.stderr)

    valid = all(s.valid for ss in stores.values() for s in ss) and (memory is None or memory.valid)
    return {
        "bench": "tasks",
        "seconds": args.seconds,
        "rounds": args.rounds,
        "pick": "median",
        "results": rows,
        "create_per_s_c32": None if key_rate is None else round(key_rate, 1),
        "throughput_gateway_rss_mib": (
            None if throughput_rss is None else round(throughput_rss / MIB, 1)
        ),
        "stores": compared,
        "memory": mem_json,
        "rss_mib_100000_in_flight": None if key_mib is None else round(key_mib, 1),
        "valid": valid,
    }


# --------------------------------------------------------------------------------------------
# Entry point
# --------------------------------------------------------------------------------------------


def _csv_levels(value: str) -> list[int]:
    try:
        nums = sorted({int(v) for v in value.split(",") if v.strip()})
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from exc
    if not nums or any(n < 1 or n > 100_000 for n in nums):
        raise argparse.ArgumentTypeError(f"task counts must be in 1..100000; got {value!r}")
    return nums


def csv_patterns(value: str) -> list[str]:
    names = {v.strip() for v in value.split(",") if v.strip()}
    if not names or names - set(PATTERNS):
        raise argparse.ArgumentTypeError(f"patterns: some of {','.join(PATTERNS)}; got {value!r}")
    return [name for name in PATTERNS if name in names]


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--seconds", type=float, default=5.0, help="measured time per round (5)")
    p.add_argument("--warmup", type=float, default=1.0, help="warm-up time per round (1)")
    p.add_argument("--rounds", type=int, default=3, help="rounds of parts 1-2; median shown (3)")
    p.add_argument("--skip-memory", action="store_true", help="skip part 3 (memory)")
    p.add_argument(
        "--tasks-in-flight",
        type=_csv_levels,
        default=MEMORY_LEVELS,
        help="comma-separated in-flight task counts for part 3 (1000,10000; the target is "
        "for 100000)",
    )
    p.add_argument(
        "--stores",
        type=csv_stores,
        default=list(STORES),
        help=f"comma-separated stores for parts 1-2 ({','.join(STORES)}); "
        "sqlite alone needs no PostgreSQL",
    )
    p.add_argument(
        "--reference",
        choices=CHOICES,
        default="both",
        help="measure parts 1-2 against in-memory task servers too: the Python SDK's, the "
        "TypeScript SDK's (needs .ci/ts-tasks.sh), both (if installed) or none (both)",
    )
    p.add_argument(
        "--patterns",
        type=csv_patterns,
        default=list(PATTERNS),
        help=f"comma-separated client patterns measured after creation ({','.join(PATTERNS)})",
    )
    p.add_argument(
        "--concurrency",
        type=int,
        default=KEY_CONCURRENCY,
        help=f"concurrency of the patterns (creation keeps {KEY_CONCURRENCY} and 1; "
        f"default {KEY_CONCURRENCY})",
    )
    p.add_argument(
        "--pool-size",
        type=int,
        default=POOL_SIZE,
        help=f"store.pool_size of each PostgreSQL replica (default {POOL_SIZE}, the gateway's)",
    )
    p.add_argument("--json", action="store_true", help="also print a one-line JSON summary")
    args = p.parse_args(argv)
    if not 1 <= args.concurrency <= 1024:
        p.error("need 1 <= --concurrency <= 1024")
    if not 1 <= args.pool_size <= 1000:
        p.error("need 1 <= --pool-size <= 1000 (store.pool_size's bounds)")
    args.plan = plan(args.patterns, args.concurrency)
    if not 0 < args.seconds <= 600 or not 0 <= args.warmup <= 60 or not 1 <= args.rounds <= 20:
        p.error("need 0 < --seconds <= 600, 0 <= --warmup <= 60, 1 <= --rounds <= 20")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    levels: list[int] = args.tasks_in_flight
    sessions_needed = math.ceil(levels[-1] / TASKS_PER_SESSION)
    max_children = max(64, sessions_needed + 8)
    callers = max(args.concurrency, KEY_CONCURRENCY)  # (creation runs at c=32 and 1)
    stores: dict[str, list[Summary]] = {}
    memory: MemoryResult | None = None
    throughput_rss: int | None = None
    stops: dict[str, Stopped] = {}
    refs, missing = chosen(args.reference)
    for name, why in missing.items():
        print(f"the {name} reference is not measured: {why}", file=sys.stderr)
    if args.reference == "ts" and missing:
        print("--reference ts: nothing to measure it against; stopping", file=sys.stderr)
        return 2
    ref_runs: dict[str, list[Summary]] = {}
    measured: Runs = {}
    modern = "modern" in args.patterns
    with tempfile.TemporaryDirectory(prefix="bench-tasks-") as tmp:
        tmpdir = Path(tmp)
        try:
            pg_server = None if args.stores == ["sqlite"] else postgres_server()
            with ExitStack() as stack:
                up_port = free_port()
                upstream_url = f"http://{HOST}:{up_port}/mcp"
                upstream_argv = [
                    sys.executable,
                    str(PASSTHROUGH_FILE),
                    "--serve-upstream",
                    str(up_port),
                ]
                stack.enter_context(server("upstream", upstream_argv, up_port, tmpdir, 15))
                targets: dict[str, list[str]] = {}
                for ref in refs:
                    port = free_port()
                    argv = [*ref.argv, str(port)]
                    stack.enter_context(server(ref_log(ref.name), argv, port, tmpdir, 15))
                    targets[ref_log(ref.name)] = [f"http://{HOST}:{port}/mcp"]
                proc: subprocess.Popen[bytes] | None = None
                probes: dict[str, CpuProbe] = {}
                if "sqlite" in args.stores:
                    port = free_port()
                    section = sqlite_store(tmpdir / "gw1.db")
                    config = gateway_config(
                        port, section, upstream_url, max_children, modern, callers
                    )
                    stops["throughput"] = Stopped()
                    proc = stack.enter_context(
                        gateway("gateway-throughput", config, port, tmpdir, stops["throughput"])
                    )
                    targets["sqlite"] = [f"http://{HOST}:{port}/bench/mcp"]
                    probes["sqlite"] = CpuProbe([proc.pid])
                for name in args.stores:
                    if name != "sqlite" and pg_server is not None:
                        # Entered before its gateways, so dropped after they have stopped.
                        db_url = stack.enter_context(fresh_database(pg_server))
                        section = postgres_store(db_url, args.pool_size)
                        targets[name], probes[name] = start_gateways(
                            stack,
                            f"{name}-",
                            section,
                            db_url,
                            REPLICAS[name],
                            upstream_url,
                            tmpdir,
                            modern=modern,
                            callers=callers,
                            max_children=max_children,
                        )
                stores, measured = asyncio.run(run_throughput(args, targets, probes))
                if proc is not None and proc.poll() is None:
                    throughput_rss = rss_bytes(proc.pid)
            for ref in refs:
                ref_runs[ref.name] = stores.pop(ref_log(ref.name))
                if not all(s.valid for s in ref_runs[ref.name]):
                    tail = log_tail(tmpdir, ref_log(ref.name))
                    print(f"{ref.name} reference log tail:\n{tail}", file=sys.stderr)
            for name, summaries in stores.items():
                if not all(s.valid for s in summaries):
                    for i in range(REPLICAS[name]):
                        log = "gateway-throughput" if name == "sqlite" else f"gateway-{name}-{i}"
                        print(f"gateway log tail:\n{log_tail(tmpdir, log)}", file=sys.stderr)

            if not args.skip_memory:
                # A fresh gateway and store, so that "idle after start" means just that.
                memory = MemoryResult(fd_soft_limit=ensure_fd_limit(sessions_needed))
                port = free_port()
                section = sqlite_store(tmpdir / "gw2.db")
                config = gateway_config(
                    port, section, upstream_url, max_children, callers=sessions_needed
                )
                stops["memory"] = Stopped()
                stop_s = GATEWAY_STOP_TIMEOUT_S + STOP_S_PER_1000_TASKS * levels[-1] / 1000
                with gateway(
                    "gateway-memory", config, port, tmpdir, stops["memory"], stop_timeout=stop_s
                ) as proc:
                    url = f"http://{HOST}:{port}/demo/mcp"
                    asyncio.run(run_memory(proc.pid, url, levels, memory))
                    if proc.poll() is not None:
                        memory.errors.add(f"gateway exited with {proc.returncode}")
                if not memory.valid:
                    print(
                        f"gateway log tail:\n{log_tail(tmpdir, 'gateway-memory')}", file=sys.stderr
                    )
        except RuntimeError as exc:
            print(f"server failed: {exc}", file=sys.stderr)
            return 2

    summary = report(args, stores, memory, throughput_rss, stops, measured)
    summary["references"] = {
        ref.name: report_reference(
            ref, stores, ref_runs[ref.name], [summary_row(s) for s in ref_runs[ref.name]]
        )
        for ref in refs
    }
    summary["references_missing"] = missing
    every = {**stores, **{ref_log(ref.name): ref_runs[ref.name] for ref in refs}}
    summary["patterns"] = report_patterns(every, measured)
    for name, why in missing.items():
        print(f"\nthe {name} reference was not measured: {why}")
    summary["valid"] = summary["valid"] and all(s.valid for runs in ref_runs.values() for s in runs)
    if args.json:
        print(json.dumps(summary, separators=(",", ":")))
    return 0 if summary["valid"] else 1


if __name__ == "__main__":
    sys.exit(main())
