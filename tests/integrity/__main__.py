"""`python -m tests.integrity [--short]`: the integrity harness (see __init__.py).

Exit status 0 when every task of the run kept the contract, 1 on any violation, 2 when the
run could not be set up (mcp 2.3 or the TypeScript SDK missing, a process that would not start).
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import aiohttp

from tests import postgres
from tests.integrity import procs
from tests.integrity.calls import Call, Fault
from tests.integrity.checks import Bounds, Judge
from tests.integrity.driver import Plan, drive, fault_plan
from tests.integrity.evidence import Audit, Runs
from tests.integrity.probe import Templates, probe_http, probe_stdio
from tests.integrity.report import as_json, lines, loop_lag

#: The contract's bounds (DESIGN, "What a task's result must be, under load").
BOUNDS = {
    "one": Bounds(answer=0.100, p99=0.010, stale=0.010),
    "replicas": Bounds(answer=0.100, p99=None, stale=0.100),
}
#: The short form's (CI's) bounds: a shared 2-core machine running the clients, both SDK
#: servers and three gateways misses the contract's milliseconds by queueing alone, run to
#: run; these still fail a wake-up that was missed (the backstop answers after 5 s) or a
#: tenfold regression. The long form, on a quiet machine, judges the contract's own.
CI_BOUNDS = {
    "one": Bounds(answer=1.0, p99=0.100, stale=1.0),
    "replicas": Bounds(answer=1.0, p99=None, stale=1.0),
}
LEASE_SECONDS = 3
#: After the last call: time for a cancel to reach the upstream before the gateways stop
#: (a stopping gateway ends its upstream sessions, which would stop the calls anyway).
SETTLE_SECONDS = 1.0


def arguments(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m tests.integrity", description=__doc__)
    parser.add_argument("--short", action="store_true", help="the CI form (about a minute)")
    parser.add_argument(
        "--timing",
        choices=("contract", "ci"),
        help="the bounds on a blocking tasks/result: the contract's (the long form's default) "
        "or CI's, ten times looser (the short form's default)",
    )
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--only", choices=("one", "replicas"), help="one topology only")
    parser.add_argument("--seconds", type=float, help="each topology's run (default by form)")
    parser.add_argument("--json", action="store_true", help="also print the verdict as JSON")
    parser.add_argument("--keep", action="store_true", help="keep the logs' directory")
    parser.add_argument(
        "--gateway",
        type=Path,
        default=procs.ROOT,
        metavar="DIR",
        help="the checkout whose gateway runs (default: this one; e.g. a `git archive` of "
        "another commit, to compare)",
    )
    args = parser.parse_args(argv)
    short = args.short
    # The long form runs longer, with more faults, not harder: with more calls at once the
    # two cores are saturated by the clients and upstreams, and no timing means anything.
    args.callers = 3  # per generation
    args.depth = 2
    args.one_seconds = args.seconds or (15.0 if short else 180.0)
    args.replica_seconds = args.seconds or (20.0 if short else 300.0)
    args.cycles = 1 if short else 3
    args.bounds = CI_BOUNDS if (args.timing or ("ci" if short else "contract")) == "ci" else BOUNDS
    return args


#: topology -> the share of the machine's CPU time that was busy while its clients ran.
busy: dict[str, float] = {}
#: topology -> list_changed notifications on the member route (a member left the lists).
list_changes: dict[str, int] = {}


def _busy(before: tuple[int, int], after: tuple[int, int]) -> float:
    total = after[1] - before[1]
    return (after[0] - before[0]) / total if total > 0 else 0.0


async def probe(upstreams: procs.Upstreams) -> Templates:
    templates = Templates()
    command, runs = upstreams.stdio_command(), str(upstreams.runs)
    async with aiohttp.ClientSession() as http:
        await asyncio.gather(
            probe_stdio("py-stdio", command, runs, templates),
            *(
                probe_http(http, name, upstreams.urls[name], templates)
                for name in procs.HTTP_ROUTES
            ),
        )
    return templates


async def one(
    args: argparse.Namespace,
    home: Path,
    upstreams: procs.Upstreams,
    rng: random.Random,
    lags: list[tuple[float, float]],
    problems: list[str],
) -> tuple[list[Call], dict[str, procs.Gateway]]:
    callers = procs.clients(2 * args.callers)
    port = procs.free_port()
    (home / "one").mkdir()
    store = json.dumps({"path": str(home / "one" / "gateway.db")})
    config = procs.config_text(
        port, store, home / "one" / "audit.jsonl", upstreams, procs.ALL_ROUTES, callers, ()
    )
    gateway = procs.Gateway("gw", home / "one", config, port, args.gateway, procs.ALL_ROUTES)
    plan = Plan(
        "one",
        {"gw": gateway},
        procs.ALL_ROUTES,
        callers[: args.callers],
        callers[args.callers :],
        args.one_seconds,
        args.depth,
        grace=20.0,
    )
    try:
        gateway.start()
        before = procs.cpu_times()
        calls = await drive(plan, rng, [], lags, problems)
        busy["one"] = _busy(before, procs.cpu_times())
        list_changes["one"] = plan.list_changes
        await asyncio.sleep(SETTLE_SECONDS)
    finally:
        gateway.stop()
    return calls, {"gw": gateway}


async def replicas(
    args: argparse.Namespace,
    home: Path,
    upstreams: procs.Upstreams,
    rng: random.Random,
    faults: list[Fault],
    lags: list[tuple[float, float]],
    problems: list[str],
) -> tuple[list[Call], dict[str, procs.Gateway]]:
    callers = procs.clients(2 * args.callers)
    server = postgres.server_url()
    url = await postgres.create_database(server)
    store = json.dumps({"backend": "postgres", "url": url, "lease_seconds": LEASE_SECONDS})
    gateways: dict[str, procs.Gateway] = {}
    try:
        for name in "abc":  # one after another: their migrations must not race anyway
            (home / name).mkdir()
            port = procs.free_port()
            audit = home / name / "audit.jsonl"
            routes = procs.HTTP_ROUTES
            config = procs.config_text(
                port, store, audit, upstreams, routes, callers, procs.REPEATABLE
            )
            gateways[name] = procs.Gateway(name, home / name, config, port, args.gateway, routes)
            gateways[name].start()
        plan = Plan(
            "replicas",
            gateways,
            procs.HTTP_ROUTES,
            callers[: args.callers],
            callers[args.callers :],
            args.replica_seconds,
            args.depth,
            grace=30.0,
            faults=fault_plan(args.replica_seconds, args.cycles, list(gateways)),
        )
        before = procs.cpu_times()
        calls = await drive(plan, rng, faults, lags, problems)
        busy["replicas"] = _busy(before, procs.cpu_times())
        list_changes["replicas"] = plan.list_changes
        await asyncio.sleep(SETTLE_SECONDS)
    finally:
        procs.stop_all(list(gateways.values()))
        await postgres.drop_database(server, url)
    return calls, gateways


async def run(args: argparse.Namespace, home: Path) -> int:
    rng = random.Random(args.seed)
    runs = home / "runs.jsonl"
    runs.touch()
    upstreams = procs.Upstreams(home, runs)
    calls: list[Call] = []
    faults: list[Fault] = []
    ended: dict[str, float] = {}
    audit = Audit()
    lags: dict[str, list[tuple[float, float]]] = {"one": [], "replicas": []}
    problems: list[str] = []
    loads = [os.getloadavg()[0]]
    began = time.monotonic()
    try:
        upstreams.start()
        templates = await probe(upstreams)
        print(f"integrity: upstreams up and probed in {time.monotonic() - began:.1f} s")
        if args.only in (None, "one"):
            phase = time.monotonic()
            done, gateways = await one(args, home, upstreams, rng, lags["one"], problems)
            ended["one"] = time.time()
            calls += done
            for name, gateway in gateways.items():
                audit.read(name, gateway.audit)
            print(f"integrity: one gateway: {len(done)} calls ({time.monotonic() - phase:.0f} s)")
        if args.only in (None, "replicas"):
            phase = time.monotonic()
            lag = lags["replicas"]
            done, gateways = await replicas(args, home, upstreams, rng, faults, lag, problems)
            ended["replicas"] = time.time()
            calls += done
            for name, gateway in gateways.items():
                audit.read(name, gateway.audit)
            shown = ", ".join(f"{f.kind} {f.gateway}" for f in faults)
            took = time.monotonic() - phase
            print(f"integrity: three replicas: {len(done)} calls ({took:.0f} s); faults: {shown}")
    finally:
        upstreams.stop()
    loads.append(os.getloadavg()[0])
    with (home / "calls.jsonl").open("w") as out:  # for a look afterwards (--keep)
        for call in calls:
            out.write(json.dumps(dataclasses.asdict(call)) + "\n")
        out.write(json.dumps({"faults": [dataclasses.asdict(f) for f in faults]}) + "\n")
    bounds = {t: args.bounds[t] for t in ended}
    judge = Judge(templates, Runs.read(runs), audit, faults, bounds, ended, lags)
    verdict = judge.all(calls)
    for problem in problems:
        verdict.violate("protocol", None, problem)
    print("\n".join(lines(verdict, bounds)))
    for topology in ended:
        share = f"; the machine's CPU {busy.get(topology, 0):.0%} busy while it ran"
        share += f"; list_changed on the member route: {list_changes.get(topology, 0)}"
        print(f"{topology}: {loop_lag([lag for _, lag in lags[topology]])}{share}")
    cores = os.cpu_count()
    print(f"load average (1 min): {loads[0]:.1f} at start, {loads[1]:.1f} at end; {cores} cores")
    if args.json:
        print(as_json(verdict))
    took = time.monotonic() - began
    failed = sum(verdict.violations.values())
    print(f"integrity: {'FAIL' if failed else 'PASS'} ({failed} violations, {took:.0f} s)")
    return 1 if failed else 0


def main(argv: list[str]) -> int:
    args = arguments(argv)
    lacking = procs.missing()
    if lacking:
        print("integrity: cannot run without " + "; ".join(lacking), file=sys.stderr)
        return 2
    form = "short" if args.short else "long"
    print(
        f"integrity: {form} form, seed {args.seed}, {args.callers}+{args.callers} callers "
        f"(2025-11-25 + 2026-07-28), {args.depth} workers each sending batches of 1 to 3 calls"
    )
    home = Path(tempfile.mkdtemp(prefix="integrity-"))
    try:
        return asyncio.run(run(args, home))
    except (RuntimeError, TimeoutError, OSError, subprocess.SubprocessError) as exc:
        print(f"integrity: setup failed: {exc} (logs in {home})", file=sys.stderr)
        args.keep = True
        return 2
    finally:
        if args.keep:
            print(f"integrity: logs, audit lines and runs in {home}")
        else:
            shutil.rmtree(home, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
