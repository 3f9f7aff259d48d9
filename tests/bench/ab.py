"""Two versions of the gateway, measured in the same run: a change's effect through the noise.

A shared 2-core machine moves timed runs of the same code by 10-20 % (docs/benchmarks.md),
which hides most single changes; the instruction count (`tests.bench.instructions`) sees
them but not what they do to latency, such as a turn of the event loop fewer on every
durable write. This serves the task benchmark's load (`tests.bench.tasks`: a task's whole
lifecycle, polled or blocking, creation, or the 2026-07-28 pattern, at concurrency 32; a
blocking round also prints its tasks/result waits) to the gateway as it is in this checkout
(B) and as it was at `--base` (A, a git revision, checked out into a temporary worktree), both
running at once on their own SQLite files (or, with `--store postgres`, their own fresh
databases on the benchmark's PostgreSQL) behind the same upstream. Rounds alternate which
goes first, and each round's B/A ratios of the rate and of the gateway's CPU per operation
are printed with their medians::

    .venv/bin/python -m tests.bench.ab --base HEAD~1
    .venv/bin/python -m tests.bench.ab --base main --kind create --rounds 12 --seconds 5
    .venv/bin/python -m tests.bench.ab --base HEAD~1 --store postgres
    .venv/bin/python -m tests.bench.ab --base HEAD~1 --store postgres --replicas 3

With `--replicas N` each side is N gateways on its database, each client on one of them
in turn (as the tasks benchmark spreads its clients), and the CPU is theirs together.

A median within a few percent of 1.00 is no effect; the spread of the per-round ratios says
how far to trust it. A script, not a test.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from gateway.config import POOL_SIZE
from tests.bench.lifecycles import OPS, SESSIONLESS
from tests.bench.passthrough import HOST, REPO_ROOT, THIS_FILE, free_port, server
from tests.bench.pattern_report import round_note
from tests.bench.replicas import fresh_database, postgres_server, postgres_store
from tests.bench.stores import Gateways, sqlite_store, start_gateways
from tests.bench.tasks import measure


@dataclass
class Side(Gateways):
    requests_per_op: list[float] = field(default_factory=list)


@contextmanager
def worktree(revision: str) -> Iterator[Path]:
    """`revision` checked out (detached) into a temporary directory, removed afterwards."""
    with tempfile.TemporaryDirectory(prefix="bench-ab-") as tmp:
        path = Path(tmp) / "base"
        git = ["git", "-C", str(REPO_ROOT)]
        try:
            subprocess.run(
                [*git, "worktree", "add", "--detach", "--quiet", str(path), revision],
                check=True,
                capture_output=True,
                text=True,
            )
        except subprocess.CalledProcessError as exc:
            why = exc.stderr.strip()
            raise SystemExit(f"cannot check out --base {revision!r}: {why}") from None
        try:
            yield path
        finally:
            subprocess.run([*git, "worktree", "remove", "--force", str(path)], check=False)


def summary(a: Side, b: Side) -> str:
    ratios = [rb / ra for ra, rb in zip(a.rates, b.rates, strict=True) if ra > 0]
    cpu = [cb / ca for ca, cb in zip(a.gateway_ms, b.gateway_ms, strict=True) if ca > 0]
    lines = []
    for side in (a, b):
        database = (
            f", its database {statistics.median(side.database_ms):.3f}" if side.database_ms else ""
        )
        lines.append(
            f"{side.name}: median {statistics.median(side.rates):.0f} ops/s, rounds "
            + " ".join(f"{r:.0f}" for r in side.rates)
            + f"; {statistics.mean(side.requests_per_op):.2f} HTTP requests per op; gateway"
            f" CPU {statistics.median(side.gateway_ms):.3f} ms per op{database}"
        )
    lines.append("B/A by round: " + " ".join(f"{r:.2f}" for r in ratios))
    lines.append("B/A gateway CPU per op by round: " + " ".join(f"{r:.2f}" for r in cpu))
    lines.append(f"KEY B/A median: {statistics.median(ratios):.3f}")
    lines.append(f"KEY B/A gateway CPU per op, median: {statistics.median(cpu):.3f}")
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    with ExitStack() as stack:
        logdir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="bench-ab-logs-")))
        base = stack.enter_context(worktree(args.base))
        up = free_port()
        upstream = [sys.executable, str(THIS_FILE), "--serve-upstream", str(up)]
        stack.enter_context(server("upstream", upstream, up, logdir, 15))
        postgres = postgres_server() if args.store == "postgres" else None
        sides = []
        for name, root in ((f"A ({args.base})", base), ("B (this checkout)", REPO_ROOT)):
            tag = name[0]
            if postgres is None:
                store, database = sqlite_store(logdir / f"{tag}.db"), None
            else:
                database = stack.enter_context(fresh_database(postgres))
                store = postgres_store(database, POOL_SIZE)
            modern = args.kind in SESSIONLESS
            upstream_url = f"http://{HOST}:{up}/mcp"
            urls, probe = start_gateways(
                stack, tag, store, database, args.replicas, upstream_url, logdir, root, modern
            )
            sides.append(Side(name, urls, probe))
        a, b = sides
        for index in range(args.rounds):
            for side in (a, b) if index % 2 == 0 else (b, a):
                m = asyncio.run(
                    measure(args.kind, side.urls, 32, args.seconds, args.warmup, side.probe)
                )
                if m.errors.count:
                    print(f"{side.name}: errors, e.g. {m.errors.samples[:3]}", file=sys.stderr)
                    return 1
                side.record(m)
                side.requests_per_op.append(m.http_requests / max(1, m.requests))
                note = round_note(m)  # the blocking pattern: its tasks/result waits
                print(f"round {index + 1}/{args.rounds} {side.name}: {side.rates[-1]:.0f}/s{note}")
        store = args.store if postgres is None else f"{args.replicas} PostgreSQL replica(s) each"
        print(f"\n{args.kind} at c=32 on {store}, {args.seconds:g}s per round\n" + summary(a, b))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--base", required=True, help="the git revision to compare against (A)")
    # (The 2026-07-28 pattern's route settings are ones a base older than them refuses.)
    p.add_argument("--kind", choices=sorted(OPS), default="lifecycle")
    p.add_argument(
        "--store",
        choices=("sqlite", "postgres"),
        default="sqlite",
        help="each side's store: a SQLite file, or a fresh database on the benchmark's"
        " PostgreSQL (as the tasks benchmark starts or finds it) (sqlite)",
    )
    p.add_argument(
        "--replicas", type=int, default=1, help="gateways per side, with --store postgres (1)"
    )
    p.add_argument("--rounds", type=int, default=8, help="rounds, each measuring A and B (8)")
    p.add_argument("--seconds", type=float, default=4.0, help="measured time per side (4)")
    p.add_argument("--warmup", type=float, default=1.0, help="warm-up per side (1)")
    args = p.parse_args(argv)
    if args.replicas < 1 or (args.replicas > 1 and args.store != "postgres"):
        p.error("--replicas: one or more, and more than one only with --store postgres")
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
