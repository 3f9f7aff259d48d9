"""`mcp-task-gateway tasks list|show|cancel|purge` and `sessions list|end`: the operator's
commands, answered by a running gateway's admin API (`gateway.http.admin`).

Each reads the admin section of `--config` alone (where the API listens, which variable holds
its token; the clients' secrets the rest of the file names are not needed), asks over HTTP,
and prints a table (a header row, whole ids, aligned columns) or, with `--json`, JSON: a list
of rows for the list commands. `tasks purge` deletes nothing unless told which finished tasks:
a filter, or `--all` for every one; `--dry-run` says how many it would delete and lists the
first of them, deleting none. Every failure is one line on stderr and exit code 2: no admin
section, the token variable unset, the gateway unreachable, a refused token, an unknown id, a
cancel of a finished task, a filter the API refuses, a purge with neither filter nor `--all`.
"""

from __future__ import annotations

import argparse
import http.client
import json
import sys
from typing import Any
from urllib.parse import quote, urlencode

from gateway.commands.printing import (
    SESSION_COLUMNS,
    TASK_COLUMNS,
    cell,
    print_json,
    print_table,
    print_task,
    print_would_purge,
    typed_text,
    whose,
)
from gateway.config import AdminConfig, ConfigError, load_admin
from gateway.http.admin_query import MAX_LIMIT, BadQuery, parse_age
from gateway.observability.logs import printable
from gateway.tasks.models import TERMINAL, TaskStatus

#: Seconds to wait for an answer; a purge of many tasks is the slowest.
TIMEOUT = 120.0


#: The options a purge narrows its choice by; without one it must say --all.
_PURGE_FILTERS = ("route", "principal", "status", "older_than")


class _Failed(Exception):
    """What went wrong, in one line for the operator."""


def _age(text: str) -> str:
    try:
        parse_age(text)
    except BadQuery as exc:
        raise argparse.ArgumentTypeError(str(exc).removeprefix("older_than: ")) from None
    return text


def _limit(text: str) -> int:
    if not (text.isascii() and text.isdecimal() and len(text) <= 6) or not (
        1 <= int(text) <= MAX_LIMIT
    ):
        raise argparse.ArgumentTypeError(f"a whole number from 1 to {MAX_LIMIT}")
    return int(text)


def _parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--config", required=True, help="the gateway's YAML settings (its admin section)"
    )
    common.add_argument("--json", action="store_true", help="print JSON, for scripts")
    parser = argparse.ArgumentParser(
        prog="mcp-task-gateway",
        description="Tasks and sessions of every principal, from a running gateway's admin API.",
    )
    groups = parser.add_subparsers(dest="group", required=True)
    tasks = groups.add_parser(
        "tasks",
        help="list, show, cancel or purge tasks",
        description="Tasks of every principal, from a running gateway's admin API.",
    )
    task_commands = tasks.add_subparsers(dest="command", required=True)
    listing = task_commands.add_parser("list", parents=[common], help="tasks, oldest first")
    purge = task_commands.add_parser(
        "purge",
        parents=[common],
        help="delete finished tasks a filter picks (or --all); --dry-run shows them first",
    )
    for command, statuses in ((listing, list(TaskStatus)), (purge, sorted(TERMINAL))):
        command.add_argument("--route", type=typed_text, help="only this route's tasks")
        command.add_argument("--principal", type=typed_text, help="only this principal's tasks")
        command.add_argument("--status", choices=[s.value for s in statuses])
        command.add_argument(
            "--older-than", type=_age, metavar="AGE", help="created over AGE ago: 30s, 15m, 2h, 7d"
        )
    listing.add_argument("--limit", type=_limit, default=1000, help="at most this many (1000)")
    purge.add_argument("--all", action="store_true", help="every finished task: no filter")
    purge.add_argument(
        "--dry-run",
        action="store_true",
        help="say how many it would delete, and which; delete none",
    )
    for name, what in (("show", "a task in detail"), ("cancel", "as its owner's tasks/cancel")):
        task_commands.add_parser(name, parents=[common], help=what).add_argument(
            "id", type=typed_text
        )
    sessions = groups.add_parser(
        "sessions",
        help="list or end sessions",
        description="Sessions of every principal, from a running gateway's admin API.",
    )
    session_commands = sessions.add_subparsers(dest="command", required=True)
    sessions_list = session_commands.add_parser(
        "list", parents=[common], help="sessions, oldest first"
    )
    sessions_list.add_argument("--route", type=typed_text, help="only this route's sessions")
    sessions_list.add_argument(
        "--principal", type=typed_text, help="only this principal's sessions"
    )
    sessions_list.add_argument("--limit", type=_limit, default=1000, help="at most this many")
    end = session_commands.add_parser("end", parents=[common], help="as the client's DELETE")
    end.add_argument("id", type=typed_text)
    return parser


def _dashed_ids(argv: list[str]) -> list[str]:
    """`argv` with an id that begins with '-' (one id in 64 does: they are URL-safe base64)
    moved after '--', where argparse takes it for the id rather than an unknown option."""
    if argv[1:2] not in (["show"], ["cancel"], ["end"]) or "--" in argv:
        return argv
    kept: list[str] = []
    dashed: list[str] = []
    rest = iter(argv[2:])
    for token in rest:
        if token == "--config":
            kept += [token, next(rest, "")]
        elif token.startswith("-") and token not in ("--json", "-h", "--help"):
            (kept if token.startswith("--config=") else dashed).append(token)
        else:
            kept.append(token)
    return [*argv[:2], *kept, *(["--", *dashed] if dashed else [])]


def main(argv: list[str]) -> int:
    args = _parser().parse_args(_dashed_ids(argv))
    refusal = _purge_refusal(args)
    if refusal is not None:
        print(f"mcp-task-gateway: tasks purge: {refusal}", file=sys.stderr)
        return 2
    try:
        admin = load_admin(args.config)
        if admin is None:
            raise _Failed(
                f"{args.config} has no admin section: the gateway serves no admin API "
                "(docs/operations.md, admin API: admin: {listen: {host: 127.0.0.1, port: 8081}, "
                "token_env: ADMIN_TOKEN})"
            )
        _run(args, admin)
    except ConfigError as exc:
        # One problem is one line, as every other failure of these commands is.
        sep = "\n" if "\n" in str(exc) else " "
        print(f"mcp-task-gateway: configuration error:{sep}{exc}", file=sys.stderr)
        return 2
    except _Failed as exc:
        print(f"mcp-task-gateway: {exc}", file=sys.stderr)
        return 2
    return 0


def _purge_refusal(args: argparse.Namespace) -> str | None:
    """Why a purge's options cannot stand: a purge of everything is asked for by name."""
    if f"{args.group} {args.command}" != "tasks purge":
        return None
    filtered = any(getattr(args, key) is not None for key in _PURGE_FILTERS)
    if not filtered and not args.all:
        return "pass a filter (--route, --principal, --status, --older-than) or --all"
    if filtered and args.all:
        return "--all is every finished task: give it or filters, not both"
    return None


def _run(args: argparse.Namespace, admin: AdminConfig) -> None:
    query = {
        key: value
        for key in ("route", "principal", "status", "older_than", "limit")
        if (value := getattr(args, key, None)) is not None
    }
    command = f"{args.group} {args.command}"
    if command in ("tasks show", "tasks cancel"):
        method = "GET" if args.command == "show" else "POST"
        suffix = "" if args.command == "show" else "/cancel"
        task = _ask(admin, args.config, method, f"/admin/tasks/{quote(args.id, safe='')}{suffix}")
        if args.json:
            print_json(task)
        elif args.command == "show":
            print_task(task)
        else:
            print(f"cancelled task {cell(task['taskId'])} ({whose(task)})")
    elif command == "tasks purge":
        if args.dry_run:
            query["dry_run"] = 1
        answer = _ask(admin, args.config, "POST", "/admin/tasks/purge", query)
        if args.json:
            print_json(answer)
        elif args.dry_run:
            print_would_purge(answer)
        else:
            print(f"purged {answer['purged']} finished task(s)")
    elif command == "sessions end":
        ended = _ask(admin, args.config, "DELETE", f"/admin/sessions/{quote(args.id, safe='')}")
        if args.json:
            print_json(ended)
        else:
            print(f"ended session {cell(ended['sessionId'])} ({whose(ended)})")
    else:
        what, columns = (
            ("tasks", TASK_COLUMNS) if args.group == "tasks" else ("sessions", SESSION_COLUMNS)
        )
        answer = _ask(admin, args.config, "GET", f"/admin/{what}", query)
        rows: list[dict[str, Any]] = answer[what]
        if args.json:
            print_json(rows)
        else:
            print_table(list(columns), [[row[key] for key in columns.values()] for row in rows])
        if answer["more"]:
            print(
                f"more {what} match: these are the first {len(rows)} (narrow the filters, or "
                f"raise --limit up to {MAX_LIMIT})",
                file=sys.stderr,
            )


def _ask(
    admin: AdminConfig, config: str, method: str, path: str, query: dict[str, Any] | None = None
) -> Any:
    """The admin API's JSON answer to one request.

    Raises:
        _Failed: unreachable, refused, or an error answer (its message).
    """
    host = {"": "127.0.0.1", "0.0.0.0": "127.0.0.1", "::": "::1"}.get(
        admin.listen.host, admin.listen.host
    )
    where = f"http://{f'[{host}]' if ':' in host else host}:{admin.listen.port}/admin/"
    target = path + (f"?{urlencode(query)}" if query else "")
    connection = http.client.HTTPConnection(host, admin.listen.port, timeout=TIMEOUT)
    try:
        connection.request(method, target, headers={"Authorization": f"Bearer {admin.token}"})
        response = connection.getresponse()
        body = response.read()
    except UnicodeEncodeError:
        raise _Failed(f"the token in {admin.token_env} is not one HTTP can carry") from None
    except (OSError, http.client.HTTPException) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise _Failed(
            f"cannot reach the admin API at {where} ({reason or type(exc).__name__}): is the "
            f"gateway running with the admin section of {config}?"
        ) from None
    finally:
        connection.close()
    if response.status == 401:
        raise _Failed(
            f"the admin API at {where} refused the token in {admin.token_env} (401): it is "
            "not the token the gateway started with"
        )
    try:
        answer = json.loads(body)
    except ValueError:
        answer = None
    if not isinstance(answer, dict):
        raise _Failed(f"{where} answered HTTP {response.status} without the admin API's JSON")
    if response.status != 200:
        raise _Failed(printable(str(answer.get("error", f"HTTP {response.status}")), 500))
    return answer
