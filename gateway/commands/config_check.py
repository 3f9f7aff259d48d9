"""`mcp-task-gateway config check [--config FILE] [--json]`: can the gateway serve this
configuration?

The file is loaded as the gateway loads it (an error names the file and the key path; every
unset variable a `${VAR}` or a `*_env` key names is listed, never a value), the app is built
as the gateway builds it (key files, signing keys), the files it would write are checked
(`writable`: `store.path`, `audit.file`), then every route's upstream is probed at once
(`reachability.check`). The table goes to stdout, one row per route (per member of a route of
several, `route/member`):

    ROUTE  TRANSPORT  UPSTREAM  TOOLS  TASKS  MODERN

(TOOLS: how many tools the upstream lists, or on a route with `tools:` curation how many of
them a client sees, `3/8`; MODERN: how 2026-07-28 callers reach the upstream, `native` or
`bridge`, `(auto)` when server/discover decided it), or with `--json` one document in its
place (`check_report`); what went wrong goes to stderr, with the last lines a stdio child that
exited at once wrote to its stderr. Exit 0 when every file can be written and every upstream
answered, 2 otherwise.
"""

from __future__ import annotations

import argparse
import asyncio
import json
from collections.abc import Sequence

from gateway.app import create_app
from gateway.commands import writable
from gateway.commands.check_report import Report
from gateway.config import ConfigError, RouteConfig, TaskPolicy, load_settings, route_key
from gateway.observability import logs
from gateway.protocol.curation import Curation
from gateway.upstream.reachability import DEFAULT_TIMEOUT, ProbeResult, check_route, unmatched_by

HEADER = ("ROUTE", "TRANSPORT", "UPSTREAM", "TOOLS", "TASKS", "MODERN")


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="mcp-task-gateway config",
        description="Checks a configuration before the gateway uses it.",
    )
    commands = parser.add_subparsers(dest="command", required=True)
    checking = commands.add_parser(
        "check",
        help="validate the file, resolve its variables, check that the store and audit files "
        "can be written, and reach every upstream once",
    )
    checking.add_argument("--config", help="YAML settings (default: the built-in demo settings)")
    checking.add_argument(
        "--timeout",
        type=_seconds,
        default=DEFAULT_TIMEOUT,
        help=f"seconds each upstream gets for initialize and tools/list ({DEFAULT_TIMEOUT:g})",
    )
    checking.add_argument(
        "--log-level",
        default="WARNING",
        help="the gateway's own log on stderr while it checks; INFO shows stdio children's "
        "stderr (WARNING)",
    )
    checking.add_argument(
        "--json",
        action="store_true",
        help="print a JSON document on stdout instead of the table: routes, problems, ok",
    )
    args = parser.parse_args(argv)
    report = Report(args.config or "built-in settings")
    try:
        settings = load_settings(args.config)
    except ConfigError as exc:
        return report.refused(f"configuration error:\n{exc}", args.json)
    try:
        logs.configure(args.log_level)
    except ValueError as exc:
        checking.error(str(exc))
    try:
        create_app(settings)  # what else stops a gateway before it listens: key files, keys
    except ValueError as exc:
        return report.refused(f"configuration error:\n{report.source}: {exc}", args.json)
    for key, problem in writable.problems(settings):
        report.problem(f"{key}: {problem}", key=key)
    by_route = asyncio.run(_check_all(settings.routes, args.timeout))
    outcomes = [outcome for results in by_route for outcome in results]
    for results in by_route:
        for line in unmatched_by(results):
            report.warning(line)
    for outcome in outcomes:
        report.outcome(outcome)
    if args.json:
        print(json.dumps(report.document(outcomes, HEADER, _row), indent=2), flush=True)
    else:
        print(table(outcomes), flush=True)
    return report.finish(len(outcomes))


async def _check_all(routes: Sequence[RouteConfig], seconds: float) -> list[list[ProbeResult]]:
    checks = (check_route(route, route_key(routes, route), seconds) for route in routes)
    return list(await asyncio.gather(*checks))


def table(outcomes: Sequence[ProbeResult]) -> str:
    """The header and one row per route, in columns; the last is not padded."""
    rows = [HEADER, *(_row(outcome) for outcome in outcomes)]
    widths = [max(len(row[i]) for row in rows) for i in range(len(HEADER) - 1)]
    return "\n".join(
        "  ".join([*(cell.ljust(width) for cell, width in zip(row, widths, strict=False)), row[-1]])
        for row in rows
    )


def _row(outcome: ProbeResult) -> tuple[str, ...]:
    route = outcome.route
    reached = outcome.reached
    modern = "-"
    if reached is not None:
        tools = _tools(outcome, reached.tools)
        modern = reached.modern if reached.learned is None else f"{reached.modern}(auto)"
    else:
        tools = "?" if outcome.refused is not None else "-"
    upstream = outcome.upstream
    location = _shown(upstream.location)
    return (outcome.where, upstream.transport, location, tools, tasks(route.tasks), modern)


def _tools(outcome: ProbeResult, listed: int) -> str:
    """How many tools the upstream `listed`; with curation, how many of them a client sees
    first: `3/8` (a member's, on a route of several, by the names curation gives them)."""
    curation = Curation(outcome.route.tools)
    if not curation.active:
        return str(listed)
    seen = sum(1 for name in outcome.names if curation.client_name(name) is not None)
    return f"{seen}/{listed}"


def tasks(policy: TaskPolicy) -> str:
    """A route's task policy in a few words: `off`, or the default support, the tools that
    differ from it, and the tools run again after a restart, e.g. `optional; required:
    build_report; repeatable: annotated`."""
    if not policy.enabled:
        return "off"
    parts: list[str] = [policy.default]
    for support in ("required", "optional", "forbidden"):
        tools = sorted(tool for tool, said in policy.tools.items() if said == support)
        if tools and support != policy.default:
            parts.append(f"{support}: {', '.join(tools)}")
    if policy.repeatable == "annotated":
        parts.append("repeatable: annotated")
    elif policy.repeatable:
        parts.append(f"repeatable: {', '.join(policy.repeatable)}")
    return _shown("; ".join(parts))


def _shown(text: str) -> str:
    return logs.printable(text, limit=500)


def _seconds(value: str) -> float:
    try:
        seconds = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {value!r}") from None
    if not 0 < seconds <= 3600:
        raise argparse.ArgumentTypeError("must be more than 0 and at most 3600 seconds")
    return seconds
