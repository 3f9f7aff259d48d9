"""What `config check` says: a line on stderr for each problem and warning (the file first, then
the key or route), the closing verdict and exit code, and with `--json` one document on stdout:

    {"config": FILE, "ok": BOOL,
     "routes": [{"route", "transport", "upstream", "tools", "tasks", "modern", "state"}, ...],
     "problems": [{"key" or "route", "message", "stderr": [LINE, ...]}, ...],
     "warnings": [{"route"?, "message"}, ...]}

`state` is `answered`, `refused` (an upstream that wants a caller's identity: not a problem) or
`failed`; `stderr`, for a stdio child that exited during the check, its last lines.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Sequence
from typing import Any

from gateway.observability.logs import printable
from gateway.upstream.reachability import ProbeResult

PROGRAM = "mcp-task-gateway"


class Report:
    """Problems and warnings as they are found, printed to stderr at the end."""

    def __init__(self, source: str) -> None:
        self.source = source
        self._lines: list[str] = []
        self._problems: list[dict[str, Any]] = []
        self._warnings: list[dict[str, Any]] = []
        self._files = 0
        self._failed = 0

    def refused(self, text: str, as_json: bool) -> int:
        """The configuration cannot be used at all: nothing else is checked. Exit code 2."""
        print(f"{PROGRAM}: {text}", file=sys.stderr)
        if as_json:
            self._problems.append({"message": text})
            print(json.dumps(self._document([]), indent=2))
        return 2

    def problem(self, text: str, key: str) -> None:
        """A file the gateway could not write, named by its key."""
        self._files += 1
        self._problems.append({"key": key, "message": text})
        self._lines.append(f"{self.source}: {text}")

    def warning(self, text: str) -> None:
        self._warnings.append({"message": text})
        self._lines.append(f"{self.source}: warning: {text}")

    def outcome(self, outcome: ProbeResult) -> None:
        name = outcome.where
        if outcome.refused is not None:
            text = (
                f"its upstream answered, but refuses a request without a caller "
                f"({_shown(outcome.refused)}); the route sends the caller's identity, so its "
                "tools are seen by callers only"
            )
            self._warnings.append({"route": name, "message": text})
            self._lines.append(f"{self.source}: route {name}: {text}")
        elif outcome.failure is not None:
            self._failed += 1
            text = f"upstream check (initialize, tools/list) failed: {_shown(outcome.failure)}"
            said = list(outcome.stderr)
            self._problems.append({"route": name, "message": text, "stderr": said})
            self._lines.append(f"{self.source}: route {name}: {text}")
            if said:
                self._lines.append(f"  the last lines of its stderr ({len(said)}):")
                self._lines += [f"  | {line}" for line in said]

    def document(
        self,
        outcomes: Sequence[ProbeResult],
        header: Sequence[str],
        row: Callable[[ProbeResult], Sequence[str]],
    ) -> dict[str, Any]:
        """The `--json` document, each route's row under the table's column names."""
        rows = [
            {
                **dict(zip((name.lower() for name in header), row(outcome), strict=True)),
                "state": _state(outcome),
            }
            for outcome in outcomes
        ]
        return self._document(rows)

    def _document(self, rows: list[dict[str, Any]]) -> dict[str, Any]:
        return {
            "config": self.source,
            "ok": not self._problems,
            "routes": rows,
            "problems": self._problems,
            "warnings": self._warnings,
        }

    def finish(self, upstreams: int) -> int:
        """Prints what was found and the verdict; the exit code: 2 for any problem, else 0."""
        for line in self._lines:
            print(line, file=sys.stderr)
        said = []
        if self._files:
            said.append(f"{self._files} file(s) the gateway could not write")
        if self._failed:
            said.append(f"{self._failed} of {upstreams} upstream(s) failed")
        if said:
            print(f"{PROGRAM}: {'; '.join(said)}", file=sys.stderr)
            return 2
        print(f"{self.source}: valid, and every upstream answered", file=sys.stderr)
        return 0


def _state(outcome: ProbeResult) -> str:
    if outcome.reached is not None:
        return "answered"
    return "refused" if outcome.refused is not None else "failed"


def _shown(text: str) -> str:
    return printable(text, limit=500)
