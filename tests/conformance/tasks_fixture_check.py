# mypy: ignore-errors
# (mcp 2.3.0 code: it runs in .cache/conformance/everything-venv, not under the mcp 1.30 that
# mypy sees; pyproject.toml excludes tests/modern/ for the same reason.)
"""Checks tasks_fixture.py directly, without the gateway: each tool answers as the tasks-*
scenarios need, and asks its questions at the moments the gateway's sync window relies on.

Runs under mcp 2.3.0 (.cache/conformance/everything-venv) as a 2025-11-25 client
(`mode="legacy"`), the way the gateway talks to the fixture. The seven calls run at the same
time; elicitations are answered `{"name": "Alice", "confirm": true}` (what the schema asks for).

    python tasks_fixture_check.py URL [WORK_BEFORE]   e.g. http://127.0.0.1:3002/mcp 1.0

WORK_BEFORE is the fixture's --work-before (default 0: its tools ask and fail at once).

Prints one line per tool and exits 1 if any of them misbehaves.
"""

from __future__ import annotations

import asyncio
import sys
import time
from typing import Any

from mcp import Client
from mcp.shared.exceptions import MCPError
from mcp.types import ElicitRequestParams, ElicitResult, ErrorData

ANSWERS: dict[str, Any] = {"name": "Alice", "confirm": True}
#: The route's sync window (tasks_fixture.SYNC_WINDOW_MS): test_tool_with_task's work after
#: its answer outlasts it well.
WINDOW_S = 0.6
#: multi_input's answers wait this long: two questions asked one after the other would then
#: arrive this far apart.
SLOW_ANSWER_S = 0.3


class Recorder:
    """Answers every elicitation and remembers when each tool asked (seconds since its call)."""

    def __init__(self) -> None:
        self.started: dict[str, float] = {}
        self.asked: dict[str, list[float]] = {}

    async def elicit(self, context: Any, params: ElicitRequestParams) -> ElicitResult | ErrorData:
        message = getattr(params, "message", "")
        tool = next((name for name in self.started if _asks(name, message)), "?")
        self.asked.setdefault(tool, []).append(time.monotonic() - self.started.get(tool, 0.0))
        schema = getattr(params, "requested_schema", None) or {}
        wanted = schema.get("properties", {}) if isinstance(schema, dict) else {}
        content = {key: ANSWERS[key] for key in wanted if key in ANSWERS}
        if tool == "multi_input":
            await asyncio.sleep(SLOW_ANSWER_S)
        return ElicitResult(action="accept", content=content)


def _asks(tool: str, message: str) -> bool:
    hints = {
        "confirm_delete": "Delete ",
        "multi_input": "multi_input",
        "test_tool_with_task": "user_name",
    }
    return tool in hints and hints[tool] in message


async def call(
    client: Client, recorder: Recorder, name: str, arguments: dict[str, Any]
) -> dict[str, Any]:
    recorder.started[name] = time.monotonic()
    try:
        result = await client.call_tool(name, arguments)
    except MCPError as exc:
        return {
            "error": exc.error.code,
            "message": exc.error.message,
            "seconds": round(_since(recorder, name), 2),
        }
    text = " ".join(getattr(part, "text", "") for part in result.content)
    return {
        "isError": bool(result.is_error),
        "text": text,
        "seconds": round(_since(recorder, name), 2),
    }


def _since(recorder: Recorder, name: str) -> float:
    return time.monotonic() - recorder.started[name]


async def main(url: str, work_before: float = 0.0) -> int:
    recorder = Recorder()
    calls: dict[str, dict[str, Any]] = {
        "greet": {"name": "World"},
        "slow_compute": {"seconds": 1, "label": "check"},
        "failing_job": {},
        "protocol_error_job": {},
        "confirm_delete": {"filename": "check.txt"},
        "multi_input": {},
        "test_tool_with_task": {},
    }
    async with Client(url, mode="legacy", elicitation_callback=recorder.elicit) as client:
        listed = sorted(tool.name for tool in (await client.list_tools()).tools)
        outcomes = dict(
            zip(
                calls,
                await asyncio.gather(
                    *(call(client, recorder, name, args) for name, args in calls.items())
                ),
                strict=True,
            )
        )
    asked = recorder.asked
    expectations: dict[str, tuple[bool, str]] = {
        "greet": (outcomes["greet"].get("text") == "Hello, World!", 'text "Hello, World!"'),
        "slow_compute": (
            "check" in outcomes["slow_compute"].get("text", "")
            and 0.9 <= outcomes["slow_compute"]["seconds"] < 3,
            "text after ~1 s",
        ),
        "failing_job": (
            outcomes["failing_job"].get("isError") is True
            and outcomes["failing_job"]["seconds"] >= work_before - 0.1,
            f"an isError result after ~{work_before:g} s",
        ),
        "protocol_error_job": (
            outcomes["protocol_error_job"].get("error") == -32603,
            "a JSON-RPC error -32603",
        ),
        "confirm_delete": (
            outcomes["confirm_delete"].get("text") == "deleted check.txt"
            and len(asked.get("confirm_delete", [])) == 1
            and asked["confirm_delete"][0] >= work_before - 0.1,
            f"one question after ~{work_before:g} s, then text",
        ),
        "multi_input": (
            outcomes["multi_input"].get("text") == "multi_input: name=Alice, confirm=True"
            and len(asked.get("multi_input", [])) == 2
            and min(asked["multi_input"]) >= work_before - 0.1
            and max(asked["multi_input"]) - min(asked["multi_input"]) < SLOW_ANSWER_S,
            f"two questions at once after ~{work_before:g} s, then text with both answers",
        ),
        "test_tool_with_task": (
            "Alice" in outcomes["test_tool_with_task"].get("text", "")
            and len(asked.get("test_tool_with_task", [])) == 1
            and outcomes["test_tool_with_task"]["seconds"] - asked["test_tool_with_task"][0]
            >= max(1.4, 2 * WINDOW_S),
            "one question before its 1.5 s of work, then text with the answer",
        ),
    }
    failed = 0
    missing = sorted(set(calls) - set(listed))
    if missing:
        failed += 1
        print(f"FAIL tools/list lacks {missing}")
    for name, (ok, wanted) in expectations.items():
        failed += 0 if ok else 1
        questions = ", ".join(f"{t:.2f}s" for t in asked.get(name, []))
        print(
            f"{'ok  ' if ok else 'FAIL'} {name:<20} {outcomes[name]}"
            + (f" asked at {questions}" if questions else "")
            + ("" if ok else f"  (wanted {wanted})")
        )
    return 1 if failed else 0


if __name__ == "__main__":
    if len(sys.argv) not in (2, 3):
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    work = float(sys.argv[2]) if len(sys.argv) == 3 else 0.0
    sys.exit(asyncio.run(main(sys.argv[1], work)))
