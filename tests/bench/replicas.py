"""The tasks benchmark's stores: SQLite (one process, its file) and PostgreSQL with one or three
gateway replicas on a fresh database of their own; the store sections of their configs, the
databases, and the table that sets PostgreSQL's figures beside SQLite's.

``tests/bench/tasks.py`` starts the gateways and runs the rounds; with three replicas its
workers go round-robin over the replicas' ports (worker i on replica i mod 3), each keeping its
session on its replica, as a load balancer with session affinity would spread them.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import asyncpg

from tests.bench.cpu import ms_text
from tests.bench.passthrough import JsonObj
from tests.postgres import create_database, drop_database, server_url

STORES = ("sqlite", "postgres1", "postgres3")
#: Gateway processes per store; every PostgreSQL store gets its own fresh database.
REPLICAS = {"sqlite": 1, "postgres1": 1, "postgres3": 3}
LEGEND = {
    "sqlite": "one gateway on its SQLite file (the table above)",
    "postgres1": "one gateway replica on a fresh PostgreSQL database",
    "postgres3": "three replicas on one fresh database; worker i on replica i mod 3 with its own"
    " session there\n              (at c=1 the one worker is on the first replica)",
}
#: The documented default: a lease round (a third of it) is rare beside the measured seconds.
LEASE_SECONDS = 15


def csv_stores(value: str) -> list[str]:
    """`--stores`: names from STORES, in STORES' order (which is the order of each round)."""
    names = {v.strip() for v in value.split(",") if v.strip()}
    unknown = names - set(STORES)
    if not names or unknown:
        raise argparse.ArgumentTypeError(
            f"stores must be some of {','.join(STORES)}; got {value!r}"
        )
    return [s for s in STORES if s in names]


def postgres_store(url: str, pool_size: int) -> str:
    """The store section (YAML flow mapping); the password reaches the gateway as PGPASSWORD."""
    settings = f"lease_seconds: {LEASE_SECONDS}, pool_size: {pool_size}"
    return f"{{backend: postgres, url: {json.dumps(url)}, {settings}}}"


def postgres_server() -> str:
    """Start (or find) the benchmark's PostgreSQL server; its maintenance URL.

    Sets PGPASSWORD in this process's environment, which the gateways inherit.
    Raises:
        RuntimeError: the server could not be started.
    """
    try:
        return server_url()
    except (subprocess.SubprocessError, OSError, KeyError) as exc:
        detail = getattr(exc, "stderr", None) or exc
        raise RuntimeError(
            f"PostgreSQL (.ci/postgres.sh) failed: {str(detail).strip()[-500:]}; "
            "--stores sqlite measures without it"
        ) from exc


@contextmanager
def fresh_database(server: str) -> Iterator[str]:
    """A new empty database on `server` for as long as the block runs (dropped after, by force).

    Raises:
        RuntimeError: it could not be created.
    """
    try:
        url = asyncio.run(create_database(server))
    except (OSError, asyncpg.PostgresError) as exc:
        raise RuntimeError(f"cannot create a database: {type(exc).__name__}: {exc}") from exc
    try:
        yield url
    finally:
        try:
            asyncio.run(drop_database(server, url))
        except (OSError, asyncpg.PostgresError) as exc:  # the figures are still good
            print(f"could not drop the benchmark's database: {exc}", file=sys.stderr)


def _ratio(row: JsonObj, base: JsonObj | None) -> float | None:
    if base is None or not (row["valid"] and base["valid"]) or not base["ops_per_s"]:
        return None
    return float(row["ops_per_s"]) / float(base["ops_per_s"])


def report_stores(
    args: argparse.Namespace, plan: Sequence[tuple[str, int]], rows: dict[str, list[JsonObj]]
) -> JsonObj:
    """Print every store's rows, measurement by measurement, with PostgreSQL/SQLite ratios of
    the medians and each store's CPU per operation (its gateways', its database backends',
    `tests/bench/cpu.py`); the JSON of the comparison. `rows` are tasks.py's result rows, in
    `plan` order.
    """
    print(
        f"\nstores side by side: the same measurements in the same rounds (interleaved: each "
        f"round runs every store in turn), MEDIAN of {args.rounds} round(s), "
        f"{args.seconds:g}s each"
    )
    for store in rows:
        print(f"  {store:<9} = {LEGEND[store]}")
    print(
        "  gw/pg ms/op = CPU milliseconds per operation of the store's gateway processes and of"
        " its database's\n              PostgreSQL backends, median over rounds; loop: the part"
        " of gw spent by the gateways'\n              event loops (their main threads)"
    )
    header = (
        f"{'measurement':<10} {'conc':>4} {'store':<9} {'ops/s':>8} {'p50 ms':>8} {'p99 ms':>8} "
        f"{'max ms':>8} {'http/op':>7} {'gw ms/op':>8} {'loop':>6} {'pg ms/op':>8} {'errors':>6}  "
        f"{'valid':<7} "
        f"{'vs sqlite':>9}  rounds ops/s"
    )
    print(header)
    print("-" * len(header))
    out: dict[str, Any] = {}
    for i, (kind, c) in enumerate(plan):
        base = rows["sqlite"][i] if "sqlite" in rows else None
        for store, store_rows in rows.items():
            row = store_rows[i]
            ratio = None if store == "sqlite" else _ratio(row, base)
            shown = "-" if store == "sqlite" else "n/a" if ratio is None else f"{ratio:.2f}x"
            per_op = row["http_requests_per_op"]
            rounds = "/".join(f"{r:.0f}" for r in row["rounds_ops_per_s"])
            mark = "yes" if row["valid"] else "INVALID"
            gw, loop, pg = (
                ms_text(row.get(k))
                for k in ("gateway_cpu_ms_per_op", "loop_cpu_ms_per_op", "db_cpu_ms_per_op")
            )
            print(
                f"{kind:<10} {c:>4} {store:<9} {row['ops_per_s']:>8.1f} {row['p50_ms']:>8.2f} "
                f"{row['p99_ms']:>8.2f} {row['max_ms']:>8.1f} "
                f"{'-' if per_op is None else f'{per_op:.1f}':>7} {gw:>8} {loop:>6} {pg:>8} "
                f"{row['errors']:>6}  {mark:<7} {shown:>9}  {rounds}"
            )
            if store != "sqlite":
                entry = out.setdefault(store, {"replicas": REPLICAS[store], "results": []})
                vs_sqlite = None if ratio is None else round(ratio, 3)
                entry["results"].append({**row, "vs_sqlite": vs_sqlite})
    return out
