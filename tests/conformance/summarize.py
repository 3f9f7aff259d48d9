"""Turn the conformance suite's checks.json files into pass/fail tables.

Used by `.ci/conformance.sh`; standard library only, so it runs under any Python 3.11.

Layout read (RESULTS is the run's results directory):

    RESULTS/scenarios.txt                        selected scenario names, one a line
    RESULTS/<half>/runs.tsv                      scenario, exit code, seconds (tab separated)
    RESULTS/<half>/<scenario>/*/checks.json      written by `conformance server -o`
    RESULTS/<half>/NOT_RUN                       why scenarios without a run were not run

A scenario passes in a half when its run exited 0 and its checks.json has at least one
SUCCESS and no FAILURE or WARNING. Through the gateway it must also succeed at every check
that succeeded directly in the same run ("passes exactly as it passes directly"): a SUCCESS
that turns into INFO or SKIPPED (e.g. an SSE test that got a JSON answer) is a failure.
`--lenient` keeps only the suite's own verdict: no FAILURE and at least one SUCCESS.

    python3 summarize.py [--lenient] table RESULTS HALF          one half; exit 1 on a failure
    python3 summarize.py [--lenient] final RESULTS HALF [HALF]   combined table and details
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HALVES = ("direct", "gateway")


@dataclass
class Outcome:
    """One scenario in one half."""

    ran: bool
    ok: bool
    cell: str
    seconds: float | None = None
    problems: list[str] = field(default_factory=list)
    succeeded: set[str] = field(default_factory=set)


def _runs(half_dir: Path) -> dict[str, tuple[int, float]]:
    runs: dict[str, tuple[int, float]] = {}
    tsv = half_dir / "runs.tsv"
    if tsv.exists():
        for line in tsv.read_text().splitlines():
            parts = line.split("\t")
            if len(parts) == 3:
                runs[parts[0]] = (int(parts[1]), float(parts[2]))
    return runs


def _load_checks(scenario_dir: Path) -> list[dict[str, Any]] | None:
    files = sorted(scenario_dir.glob("*/checks.json"))
    if not files:
        return None
    data = json.loads(files[-1].read_text())
    return data if isinstance(data, list) else None


def evaluate(
    results: Path,
    half: str,
    scenario: str,
    direct_ok_ids: set[str] | None = None,
    strict: bool = True,
) -> Outcome:
    """Judge `scenario` in `half`; `direct_ok_ids` are the checks that succeeded directly."""
    half_dir = results / half
    run = _runs(half_dir).get(scenario)
    if run is None:
        why_file = half_dir / "NOT_RUN"
        why = why_file.read_text().strip() if why_file.exists() else "not run"
        return Outcome(ran=False, ok=False, cell="NOT RUN", problems=[why])
    rc, seconds = run
    checks = _load_checks(half_dir / scenario)
    if checks is None:
        reason = "timed out (killed)" if rc in (124, 137) else f"exit {rc}, no checks.json"
        return Outcome(True, False, "FAIL", seconds, [reason])

    by_status: dict[str, list[dict[str, Any]]] = {}
    for check in checks:
        by_status.setdefault(str(check.get("status")), []).append(check)
    succeeded = {str(c.get("id")) for c in by_status.get("SUCCESS", [])}
    problems: list[str] = []
    for status in ("FAILURE", "WARNING") if strict else ("FAILURE",):
        for check in by_status.get(status, []):
            message = str(check.get("errorMessage") or check.get("description") or "")
            problems.append(f"{status} {check.get('id')}: {_one_line(message)}")
    if not succeeded:
        problems.append("no check succeeded")
    if direct_ok_ids is not None and strict:
        for missing in sorted(direct_ok_ids - succeeded):
            statuses = sorted({str(c.get("status")) for c in checks if c.get("id") == missing})
            got = "/".join(statuses) or "absent"
            problems.append(f"{missing}: SUCCESS directly, {got} through the gateway")
    if rc != 0 and not problems:
        problems.append(f"conformance exited {rc}")
    ok = not problems
    n_fail = len(by_status.get("FAILURE", []))
    n_warn = len(by_status.get("WARNING", []))
    detail = f"{len(succeeded)} ok"
    if n_fail:
        detail += f", {n_fail} fail"
    if n_warn:
        detail += f", {n_warn} warn"
    cell = f"{'PASS' if ok else 'FAIL'} ({detail})"
    return Outcome(True, ok, cell, seconds, problems, succeeded)


def _one_line(text: str, limit: int = 240) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."


def _scenarios(results: Path) -> list[str]:
    path = results / "scenarios.txt"
    return [s for s in path.read_text().split() if s] if path.exists() else []


def _outcomes(results: Path, halves: list[str], strict: bool) -> dict[str, dict[str, Outcome]]:
    # The gateway is compared with the direct run whenever this run has one, even when
    # only the gateway's table is asked for.
    have_direct = (results / "direct" / "runs.tsv").exists()
    table: dict[str, dict[str, Outcome]] = {}
    for scenario in _scenarios(results):
        row: dict[str, Outcome] = {}
        direct_ok: set[str] | None = None
        if "direct" in halves or have_direct:
            direct = evaluate(results, "direct", scenario, strict=strict)
            if "direct" in halves:
                row["direct"] = direct
            if direct.ok:
                direct_ok = direct.succeeded
        if "gateway" in halves:
            row["gateway"] = evaluate(results, "gateway", scenario, direct_ok, strict)
        table[scenario] = row
    return table


def _cell(outcome: Outcome) -> str:
    if outcome.seconds is None:
        return outcome.cell
    return f"{outcome.cell} {outcome.seconds:.1f}s"


def print_table(table: dict[str, dict[str, Outcome]], halves: list[str]) -> None:
    """A fixed-width table: one row per scenario, one column per half."""
    width = max([len("scenario")] + [len(s) for s in table])
    columns = {h: max([len(h)] + [len(_cell(r[h])) for r in table.values()]) for h in halves}
    header = "  ".join([f"{'scenario':<{width}}"] + [f"{h:<{columns[h]}}" for h in halves])
    print(header)
    print("-" * len(header))
    for scenario, row in table.items():
        cells = [f"{_cell(row[h]):<{columns[h]}}" for h in halves]
        print("  ".join([f"{scenario:<{width}}"] + cells).rstrip())


def print_problems(table: dict[str, dict[str, Outcome]], halves: list[str]) -> int:
    """List what failed where; return the number of failing (scenario, half) pairs."""
    failures = 0
    for half in halves:
        bad = [(s, row[half]) for s, row in table.items() if not row[half].ok]
        if not bad:
            continue
        print(f"\nFailed {half} ({len(bad)}):")
        for scenario, outcome in bad:
            failures += 1
            print(f"  {scenario}:")
            for problem in outcome.problems[:8]:
                print(f"      {problem}")
            if len(outcome.problems) > 8:
                print(f"      ... {len(outcome.problems) - 8} more")
    return failures


def main(argv: list[str]) -> int:
    strict = "--lenient" not in argv
    argv = [a for a in argv if a != "--lenient"]
    if len(argv) < 3 or argv[0] not in ("table", "final"):
        print(__doc__, file=sys.stderr)
        return 2
    mode, results, halves = argv[0], Path(argv[1]), argv[2:]
    unknown = [h for h in halves if h not in HALVES]
    if unknown:
        print(f"unknown half: {', '.join(unknown)}", file=sys.stderr)
        return 2
    table = _outcomes(results, halves, strict)
    if not table:
        print("no scenarios selected", file=sys.stderr)
        return 1
    print_table(table, halves)
    failures = print_problems(table, halves)
    total = len(table) * len(halves)
    for half in halves:
        passed = sum(1 for row in table.values() if row[half].ok)
        print(f"{half}: {passed} passed, {len(table) - passed} failed")
    if mode == "final":
        verdict = "all selected scenarios pass" if not failures else f"{failures}/{total} failed"
        print(f"conformance: {verdict} ({', '.join(halves)})")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
