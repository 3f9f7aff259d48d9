"""Turn the conformance suite's checks.json files into pass/fail tables.

Used by `.ci/conformance.sh`; standard library only, so it runs under any Python 3.11.

Layout read (PART is one part of a run: .cache/conformance/results/<2025-11-25|2026-07-28|tasks>):

    PART/scenarios.txt                        selected scenario names, one a line
    PART/notes.tsv                            optional: scenario, note shown beside its name
    PART/<half>/runs.tsv                      scenario, exit code, seconds (tab separated)
    PART/<half>/<scenario>/*/checks.json      written by `conformance server -o`
    PART/<half>/NOT_RUN                       why scenarios without a run were not run

A half is `direct` (the server itself), `gateway` (the gateway's plain route in front of it) or
`member` (the gateway's route of one member in front of it, which must serve what the plain
route serves). A scenario passes in a half when its run exited 0 and its checks.json has at
least one SUCCESS and no FAILURE or WARNING. Through the gateway (either route) it must also
succeed at every check that succeeded directly in the same run ("passes exactly as it passes
directly"): a SUCCESS that turns into INFO or SKIPPED (e.g. an SSE test that got a JSON
answer) is a failure. When both routes ran, the scenarios that fail through one only are named.
`--lenient` keeps only the suite's own verdict: no FAILURE and at least one SUCCESS.

`--direct-baseline` (the 2026-07-28 requirements): what fails directly is listed but held
against nobody; the verdict counts only the gateway's failures on scenarios that pass directly
(or that were not run directly). `--allow-skipped` (the tasks-* extension scenarios): a
scenario whose checks are all SKIPPED or INFO passes as SKIP (tasks-status-notifications
is always skipped by the suite).

    python3 summarize.py [FLAGS] table PART HALF           one half; exit 1 on a failure
    python3 summarize.py [FLAGS] final PART HALF [HALF]    combined table and details
    FLAGS: --lenient, --direct-baseline, --allow-skipped, --label TEXT (the verdict's name)
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HALVES = ("direct", "gateway", "member")
#: How a half's problems name it.
THROUGH = {
    "direct": "directly",
    "gateway": "through the gateway",
    "member": "through the one-member route",
}


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
    allow_skipped: bool = False,
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
    skipped_only = bool(checks) and all(str(c.get("status")) in ("SKIPPED", "INFO") for c in checks)
    if skipped_only and allow_skipped and rc == 0:
        n_skip = len(by_status.get("SKIPPED", []))
        return Outcome(True, True, f"SKIP ({n_skip} skipped)", seconds)
    if not succeeded:
        problems.append("no check succeeded")
    if direct_ok_ids is not None and strict:
        for missing in sorted(direct_ok_ids - succeeded):
            statuses = sorted({str(c.get("status")) for c in checks if c.get("id") == missing})
            got = "/".join(statuses) or "absent"
            problems.append(f"{missing}: SUCCESS directly, {got} {THROUGH[half]}")
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


def _notes(results: Path) -> dict[str, str]:
    path = results / "notes.tsv"
    notes: dict[str, str] = {}
    if path.exists():
        for line in path.read_text().splitlines():
            name, _, note = line.partition("\t")
            if name and note:
                notes[name] = note
    return notes


def _outcomes(
    results: Path, halves: list[str], strict: bool, allow_skipped: bool = False
) -> dict[str, dict[str, Outcome]]:
    # The gateway is compared with the direct run whenever this run has one, even when
    # only the gateway's table is asked for.
    have_direct = (results / "direct" / "runs.tsv").exists()
    table: dict[str, dict[str, Outcome]] = {}
    for scenario in _scenarios(results):
        row: dict[str, Outcome] = {}
        direct_ok: set[str] | None = None
        if "direct" in halves or have_direct:
            direct = evaluate(results, "direct", scenario, None, strict, allow_skipped)
            if "direct" in halves:
                row["direct"] = direct
            if direct.ok:
                direct_ok = direct.succeeded
        for half in halves:
            if half != "direct":
                row[half] = evaluate(results, half, scenario, direct_ok, strict, allow_skipped)
        table[scenario] = row
    return table


def _cell(outcome: Outcome) -> str:
    if outcome.seconds is None:
        return outcome.cell
    return f"{outcome.cell} {outcome.seconds:.1f}s"


def print_table(
    table: dict[str, dict[str, Outcome]], halves: list[str], notes: dict[str, str] | None = None
) -> None:
    """A fixed-width table: one row per scenario, one column per half."""
    notes = notes or {}
    names = {s: f"{s} ({notes[s]})" if s in notes else s for s in table}
    width = max([len("scenario")] + [len(n) for n in names.values()])
    columns = {h: max([len(h)] + [len(_cell(r[h])) for r in table.values()]) for h in halves}
    header = "  ".join([f"{'scenario':<{width}}"] + [f"{h:<{columns[h]}}" for h in halves])
    print(header)
    print("-" * len(header))
    for scenario, row in table.items():
        cells = [f"{_cell(row[h]):<{columns[h]}}" for h in halves]
        print("  ".join([f"{names[scenario]:<{width}}"] + cells).rstrip())


def _held_against(
    table: dict[str, dict[str, Outcome]], half: str, scenario: str, baseline: bool
) -> bool:
    """Whether a failure of `scenario` in `half` counts in the verdict."""
    if not baseline:
        return True
    if half == "direct":
        return False
    direct = table[scenario].get("direct")
    return direct is None or not direct.ran or direct.ok


def print_problems(
    table: dict[str, dict[str, Outcome]], halves: list[str], baseline: bool = False
) -> int:
    """List what failed where; return the number of failing (scenario, half) pairs that count."""
    failures = 0
    excused: list[tuple[str, str, Outcome]] = []
    for half in halves:
        bad = [(s, row[half]) for s, row in table.items() if not row[half].ok]
        counted = [(s, o) for s, o in bad if _held_against(table, half, s, baseline)]
        excused += [(half, s, o) for s, o in bad if not _held_against(table, half, s, baseline)]
        if not counted:
            continue
        print(f"\nFailed {half} ({len(counted)}):")
        for scenario, outcome in counted:
            failures += 1
            _print_outcome(scenario, outcome)
    if excused:
        print(f"\nFailing directly, so not held against the gateway ({len(excused)}):")
        for half, scenario, outcome in excused:
            _print_outcome(f"{scenario} [{half}]", outcome)
    return failures


def print_route_differences(table: dict[str, dict[str, Outcome]], halves: list[str]) -> None:
    """Name the scenarios that pass through one of the gateway's routes, fail through the other."""
    if "gateway" not in halves or "member" not in halves:
        return
    for bad, good in (("member", "gateway"), ("gateway", "member")):
        names = [s for s, row in table.items() if row[good].ok and row[bad].ran and not row[bad].ok]
        if names:
            print(f"\nFailing {THROUGH[bad]} only ({len(names)}): {', '.join(names)}")


def _print_outcome(name: str, outcome: Outcome) -> None:
    print(f"  {name}:")
    for problem in outcome.problems[:8]:
        print(f"      {problem}")
    if len(outcome.problems) > 8:
        print(f"      ... {len(outcome.problems) - 8} more")


def main(argv: list[str]) -> int:
    flags = {"--lenient", "--direct-baseline", "--allow-skipped"}
    strict = "--lenient" not in argv
    baseline = "--direct-baseline" in argv
    allow_skipped = "--allow-skipped" in argv
    label = ""
    if "--label" in argv:
        at = argv.index("--label")
        label = argv[at + 1] if at + 1 < len(argv) else ""
        argv = argv[:at] + argv[at + 2 :]
    argv = [a for a in argv if a not in flags]
    if len(argv) < 3 or argv[0] not in ("table", "final"):
        print(__doc__, file=sys.stderr)
        return 2
    mode, results, halves = argv[0], Path(argv[1]), argv[2:]
    unknown = [h for h in halves if h not in HALVES]
    if unknown:
        print(f"unknown half: {', '.join(unknown)}", file=sys.stderr)
        return 2
    table = _outcomes(results, halves, strict, allow_skipped)
    if not table:
        print("no scenarios selected", file=sys.stderr)
        return 1
    print_table(table, halves, _notes(results))
    failures = print_problems(table, halves, baseline)
    print_route_differences(table, halves)
    for half in halves:
        passed = sum(1 for row in table.values() if row[half].ok)
        print(f"{half}: {passed} passed, {len(table) - passed} failed")
    if mode == "final":
        name = f"conformance {label}" if label else "conformance"
        if not failures:
            verdict = "all selected scenarios pass"
            if baseline and any(not row[h].ok for row in table.values() for h in halves):
                through = [THROUGH[h] for h in halves if h != "direct"]
                verdict = f"every scenario that passes directly passes {' and '.join(through)}"
        else:
            counted = len(table) * len(halves)
            verdict = f"{failures}/{counted} failed"
        print(f"{name}: {verdict} ({', '.join(halves)})")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
