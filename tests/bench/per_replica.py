"""A task's CPU with each gateway process under the same load: SQLite, one PostgreSQL replica,
and several replicas side by side, so that what grows with the number of replicas shows apart
from what the machine does.

``tests.bench.tasks`` spreads one load over the replicas: on 2 cores three replicas each get a
third of it, every process's loop wakes for fewer requests at a time, and the machine runs
flat out; its CPU per lifecycle then grows for those reasons as much as for any cost of having
replicas. Here each gateway process gets the same paced load (``--clients`` workers each,
each starting an operation every ``--every-ms``: a load that leaves the machine idle part of
the time), and each store's gateway and PostgreSQL CPU per operation is set beside SQLite's
and beside one replica's. Rounds alternate the stores; medians are shown::

    .venv/bin/python -m tests.bench.per_replica
    .venv/bin/python -m tests.bench.per_replica --replicas 3 --rounds 5 --seconds 5

A script, not a test; its numbers come from one shared machine.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
from collections.abc import Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path

from gateway.config import POOL_SIZE
from tests.bench.lifecycles import OPS, SESSIONLESS
from tests.bench.passthrough import HOST, THIS_FILE, free_port, server
from tests.bench.replicas import fresh_database, postgres_server, postgres_store
from tests.bench.stores import Gateways, sqlite_store, start_gateways
from tests.bench.tasks import measure


@dataclass
class Store(Gateways):
    #: The machine's idle share during each round (all CPUs, from /proc/stat).
    idle: list[float] = field(default_factory=list)
    errors: int = 0


def _machine() -> tuple[int, int]:
    """Jiffies of all CPUs since boot: (idle, total)."""
    with open("/proc/stat") as stat:
        fields = [int(x) for x in stat.readline().split()[1:]]
    return fields[3] + fields[4], sum(fields)


def _median(values: Sequence[float]) -> float | None:
    return statistics.median(values) if values else None


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def _ratio(value: float | None, base: float | None) -> str:
    return "-" if value is None or not base else f"{value / base:.2f}x"


async def _round(store: Store, kind: str, args: argparse.Namespace) -> None:
    clients = args.clients * len(store.urls)
    before = _machine()
    m = await measure(
        kind, store.urls, clients, args.seconds, args.warmup, store.probe, args.every_ms / 1000
    )
    after = _machine()
    store.errors += m.errors.count
    for line in m.errors.samples[:3]:
        print(f"  {store.name}: {line}", file=sys.stderr)
    if not m.requests:
        return
    store.record(m)
    total = after[1] - before[1]
    store.idle.append((after[0] - before[0]) / total if total else 0.0)


def report(kind: str, stores: list[Store]) -> bool:
    """Print one pattern's table; whether every operation succeeded."""
    sqlite = next((s for s in stores if s.name == "sqlite"), None)
    one = next((s for s in stores if s.name == "postgres1"), None)
    base_gw = None if sqlite is None else _median(sqlite.gateway_ms)
    one_gw = None if one is None else _median(one.gateway_ms)
    one_db = None if one is None else _median(one.database_ms)
    print(f"\n{kind}: each gateway process under the same paced load, median of rounds")
    print(
        f"{'store':12} {'procs':>5} {'ops/s':>8} {'per proc':>8} {'idle':>5}"
        f" {'gw ms/op':>9} {'pg ms/op':>9} {'gw vs sqlite':>12} {'gw vs 1':>8} {'pg vs 1':>8}"
    )
    for s in stores:
        rate = _median(s.rates) or 0.0
        gw, db, idle = _median(s.gateway_ms), _median(s.database_ms), _median(s.idle)
        several = s.name not in ("sqlite", "postgres1")
        print(
            f"{s.name:12} {len(s.urls):>5} {rate:>8.1f} {rate / len(s.urls):>8.1f}"
            f" {100 * (idle or 0):>4.0f}% {_ms(gw):>9} {_ms(db):>9} {_ratio(gw, base_gw):>12}"
            f" {_ratio(gw, one_gw) if several else '-':>8}"
            f" {_ratio(db, one_db) if several else '-':>8}"
        )
    for s in stores:
        if s.name != "sqlite":
            gw = _median(s.gateway_ms)
            vs_one = "" if s is one else f", {_ratio(gw, one_gw)} one replica's"
            print(f"KEY {kind} {s.name}: gateway CPU per op {_ratio(gw, base_gw)} SQLite's{vs_one}")
    return all(s.errors == 0 and s.rates for s in stores)


def run(args: argparse.Namespace) -> int:
    with ExitStack() as stack:
        logdir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="bench-replica-")))
        up = free_port()
        upstream = [sys.executable, str(THIS_FILE), "--serve-upstream", str(up)]
        stack.enter_context(server("upstream", upstream, up, logdir, 15))
        postgres = postgres_server()
        modern = any(kind in SESSIONLESS for kind in args.patterns)
        callers = args.clients * max(args.replicas, 1)
        stores: list[Store] = []
        for name, processes in (
            ("sqlite", 1),
            ("postgres1", 1),
            (f"postgres{args.replicas}", args.replicas),
        ):
            if name == "sqlite":
                section, database = sqlite_store(logdir / "sqlite.db"), None
            else:
                database = stack.enter_context(fresh_database(postgres))
                section = postgres_store(database, args.pool_size)
            upstream_url = f"http://{HOST}:{up}/mcp"
            urls, probe = start_gateways(
                stack,
                name,
                section,
                database,
                processes,
                upstream_url,
                logdir,
                modern=modern,
                callers=callers,
            )
            stores.append(Store(name, urls, probe))
        ok = True
        for kind in args.patterns:
            measured = [Store(s.name, s.urls, s.probe) for s in stores]
            for i in range(args.rounds):
                # Each round starts with another store, so that none always follows the same.
                for store in measured[i % len(measured) :] + measured[: i % len(measured)]:
                    asyncio.run(_round(store, kind, args))
            ok = report(kind, measured) and ok
        return 0 if ok else 1


def _patterns(value: str) -> list[str]:
    kinds = [k.strip() for k in value.split(",") if k.strip()]
    unknown = [k for k in kinds if k not in OPS or k == "create"]
    if not kinds or unknown:
        raise argparse.ArgumentTypeError(
            f"patterns from {', '.join(k for k in OPS if k != 'create')}"
        )
    return kinds


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--patterns", type=_patterns, default=["lifecycle", "blocking"])
    p.add_argument("--replicas", type=int, default=3, help="replicas of the last store (3)")
    p.add_argument("--clients", type=int, default=3, help="workers per gateway process (3)")
    p.add_argument(
        "--every-ms",
        type=float,
        default=30.0,
        help="each worker starts an operation this often (30)",
    )
    p.add_argument("--rounds", type=int, default=3, help="rounds; medians shown (3)")
    p.add_argument("--seconds", type=float, default=4.0, help="measured time per round (4)")
    p.add_argument("--warmup", type=float, default=1.0, help="warm-up per round (1)")
    p.add_argument("--pool-size", type=int, default=POOL_SIZE, help="each replica's pool")
    args = p.parse_args(argv)
    if args.replicas < 2 or args.clients < 1 or args.rounds < 1 or args.every_ms <= 0:
        p.error("--replicas at least 2, --clients and --rounds at least 1, --every-ms above 0")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        return run(args)
    except RuntimeError as exc:  # a server (the upstream, PostgreSQL, a gateway) failed
        print(f"server failed: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
