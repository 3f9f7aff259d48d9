"""How the operator's commands print what the admin API answers: tables with a header row,
whole ids and aligned columns, every value escaped and cut (it came over the network); and
`typed_text`, what they take as a name or an id."""

from __future__ import annotations

import argparse
import json
from typing import Any

from gateway.observability.logs import printable


def typed_text(text: str) -> str:
    """An argument that names a principal, a route or an id (an argparse type): a byte that
    is not UTF-8 in it (the shell passes such bytes on) was a traceback, where the request
    or the statement it goes into could not encode it."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise argparse.ArgumentTypeError(
            f"'{printable(text, 60)}' holds a byte that is not UTF-8"
        ) from None
    return text


TASK_COLUMNS = {
    "TASK": "taskId",
    "ROUTE": "route",
    "PRINCIPAL": "principal",
    "STATUS": "status",
    "TOOL": "tool",
    "CREATED": "createdAt",
    "UPDATED": "lastUpdatedAt",
}
SESSION_COLUMNS = {
    "SESSION": "sessionId",
    "ROUTE": "route",
    "PRINCIPAL": "principal",
    "CREATED": "createdAt",
}


def cell(value: object) -> str:
    return "-" if value is None else printable(str(value), 200)


def whose(row: dict[str, Any]) -> str:
    return f"route {cell(row['route'])}, principal {cell(row['principal'])}"


def print_table(header: list[str], rows: list[list[Any]]) -> None:
    cells = [header, *([cell(value) for value in row] for row in rows)]
    widths = [max(len(line[i]) for line in cells) for i in range(len(header))]
    for line in cells:
        print(
            "  ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True)).rstrip()
        )


#: What `tasks show` prints apart from its FIELD VALUE table, each in a table of its own.
_TASK_PARTS = ("history", "historyDropped", "progress", "questions", "outcome")


def print_task(task: dict[str, Any]) -> None:
    """A task's fields, then its status history and pending questions, each as a table
    (a gateway that shows none of them, an older one, prints its fields alone)."""
    fields = [[key, value] for key, value in task.items() if key not in _TASK_PARTS]
    progress, outcome = task.get("progress"), task.get("outcome")
    if isinstance(progress, dict):
        fields.append(["progress", f"{progress.get('message')} (at {progress.get('at')})"])
    if isinstance(outcome, dict):
        fields.append(["outcome", f"{outcome.get('kind')}, {outcome.get('bytes')} bytes"])
    print_table(["FIELD", "VALUE"], fields)
    history = task.get("history")
    if isinstance(history, list):
        print(f"\nHISTORY{_earlier(task.get('historyDropped'))}")
        print_table(
            ["AT", "STATUS", "ATTEMPT", "MESSAGE"],
            [[c.get("at"), c.get("status"), c.get("attempt"), c.get("message")] for c in history],
        )
    questions = task.get("questions")
    if questions:
        print("\nPENDING QUESTIONS")
        print_table(
            ["KEY", "METHOD", "ASKED"],
            [[q.get("key"), q.get("method"), q.get("askedAt")] for q in questions],
        )
    if isinstance(outcome, dict) and "content" in outcome:
        print("\nOUTCOME")
        print_json(outcome["content"])


def _earlier(dropped: object) -> str:
    """What the history's header says of the changes it no longer shows."""
    if dropped is None:
        return " (earlier changes unknown: the task was made before histories were kept)"
    return f" ({dropped} earlier changes not kept)" if dropped else ""


def print_json(value: Any) -> None:
    print(json.dumps(value, indent=2))


def print_would_purge(answer: dict[str, Any]) -> None:
    """A dry run's answer: how many, then the first of them as `tasks list` shows them."""
    count, rows = answer["wouldPurge"], answer["tasks"]
    print(f"would purge {'at least ' if answer['more'] else ''}{count} finished task(s)")
    if rows:
        columns = TASK_COLUMNS
        print_table(list(columns), [[row[key] for key in columns.values()] for row in rows])
    if count > len(rows):
        print(f"and {count - len(rows)} more")
    print("nothing was deleted (--dry-run)")
