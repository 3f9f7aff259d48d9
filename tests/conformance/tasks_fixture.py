# mypy: ignore-errors
# (mcp 2.3.0 code: it runs in .cache/conformance/everything-venv, not under the mcp 1.30 that
# mypy sees; pyproject.toml excludes tests/modern/ for the same reason.)
"""A task-unaware upstream with the seven tools the conformance suite's `tasks-*` scenarios call.

The `tasks-*` scenarios of `@modelcontextprotocol/conformance@0.2.0-alpha.12` (SEP-2663, the
2026-07-28 tasks extension) expect a server that lists `greet`, `slow_compute`, `failing_job`,
`protocol_error_job`, `confirm_delete`, `multi_input` and `test_tool_with_task`. Here they are
plain tools of an mcp 2.3.0 `MCPServer`: no task runtime, elicitation as ordinary
`elicitation/create` requests on the 2025-11-25 session the gateway opens. The gateway in front
(`.ci/conformance.sh --generation 2026-07-28`) makes the tasks, by its route policy
(`TASK_POLICY` below) and its `sync_window_ms` (600 ms here, `SYNC_WINDOW_MS`): a call still
running after the window becomes a task, a question asked within it becomes an MRTR round.

Timing is part of the fixture, measured against that window:

* `confirm_delete` and `multi_input` work about 1 s before they ask, so the call is a task first
  and the questions show up as `inputRequests` in `tasks/get` (answered with `tasks/update`).
* `test_tool_with_task` asks at once (an MRTR round, `InputRequiredResult`), then works 1.5 s
  after the answer (so the retry becomes a task) and returns text containing the answer.
* `failing_job` and `protocol_error_job` work about 1 s, then fail (an `isError` result; a
  JSON-RPC error).

What the scenarios send, from their sources (`src/scenarios/server/tasks/*.ts`): `greet
{name}` expects exactly "Hello, {name}!"; `slow_compute {seconds, label}` (0, 1, 2 or 60
seconds); `confirm_delete {filename}` answered `{confirm: true}`; `multi_input {}` answered
`{name, confirm}` per key; `test_tool_with_task {}` answered `{name: "Alice"}` and the final
text must contain "Alice".

Usage (mcp 2.3.0 is needed only to serve; .cache/conformance/everything-venv has it):

    python tasks_fixture.py [--port N] [--host 127.0.0.1]     serve /mcp (env TASKS_FIXTURE_PORT;
                                            TASKS_FIXTURE_LOG_LEVEL=INFO logs every request)
    python tasks_fixture.py --print-route [--port N] [--route tasks] [--member NAME]
                                            print the gateway's route entry for it (YAML);
                                            --member: a route of that one member (upstreams:)
    python tasks_fixture.py --write-config FILE --gateway-port P [--port N] [--store DB]
                                            write a whole gateway config (one route, 127.0.0.1)
"""

# No `from __future__ import annotations`: MCPServer reads the tools' annotations, and
# `Context` is imported inside build_server (so --print-route runs without mcp installed).
import argparse
import os
import sys
from typing import Any

DEFAULT_PORT = 3002
ROUTE = "tasks"
#: How the gateway may run each tool as a task (`routes[].tasks.tools`). `slow_compute` stays
#: `optional`: tasks-capability-negotiation calls it without the extension and expects a plain
#: result (`required` would give -32021 there). `failing_job` must be `required`:
#: tasks-required-task-error expects -32021 for it without the extension.
TASK_POLICY: dict[str, str] = {
    "greet": "forbidden",
    "slow_compute": "optional",
    "failing_job": "required",
    "protocol_error_job": "required",
    "confirm_delete": "required",
    "multi_input": "required",
    # `optional`: tasks-mrtr-composition wants one MRTR round, then a task. The sync window and
    # MRTR rounds are for optional tools; a required tool's call is a task from its first
    # moment, its question the task's (confirm_delete and multi_input).
    "test_tool_with_task": "optional",
}
#: Work before the first question (confirm_delete, multi_input) or before failing: none by
#: default, as a plain "confirm, then act" tool asks at once (`--work-before` delays it, the
#: variant in which the question comes during the task, after the gateway's sync window).
WORK_BEFORE_ASKING_S = float(os.environ.get("TASKS_FIXTURE_WORK_BEFORE", "0"))
#: Work after test_tool_with_task's answer: the retry must outlast the window and become a task.
WORK_AFTER_ANSWER_S = 1.5
#: The route's tasks.sync_window_ms (see `route_yaml`).
SYNC_WINDOW_MS = 600


def route_yaml(port: int, route: str = ROUTE, indent: str = "  ", member: str | None = None) -> str:
    """The gateway's `routes:` list entry for a fixture listening on 127.0.0.1:port.

    With `member`, a route of that one member (`upstreams:`), which keeps the tools' names.
    """
    tools = ", ".join(f"{name}: {support}" for name, support in TASK_POLICY.items())
    upstream = [
        "transport: streamable_http",
        f"url: http://127.0.0.1:{port}/mcp",
        # Its tools ask mid-call (ctx.elicit, as a 2025-11-25 server does), which the
        # 2026-07-28 wire cannot carry, though its server/discover lists 2026-07-28 (mcp 2.3
        # speaks both): `auto` would choose native, so the route says bridge, as an operator
        # of such a server would.
        "modern: bridge",
    ]
    if member is None:
        upstream_lines = ["  upstream:"] + [f"    {line}" for line in upstream]
    else:
        upstream_lines = ["  upstreams:", f"    - name: {member}"]
        upstream_lines += [f"      {line}" for line in upstream]
    lines = [
        f"- name: {route}",
        *upstream_lines,
        "  tasks:",
        "    default: optional",
        f"    tools: {{{tools}}}",
        # The suite polls tasks/get every 200 ms whatever pollIntervalMs says; a short
        # interval keeps what the gateway advertises honest.
        "    poll_interval_ms: 200",
        # Wider than the default 250 ms: CI runs some 240 suite processes on two cores, and
        # test_tool_with_task's question, asked at once, once took longer than 250 ms to reach
        # the gateway there (a task instead of the MRTR round). 600 ms still parts every timing
        # of the fixture: slow_compute's 1 s and the 1.5 s after the answer outlast it.
        f"    sync_window_ms: {SYNC_WINDOW_MS}",
    ]
    return "".join(f"{indent}{line}\n" for line in lines)


def gateway_config(port: int, gateway_port: int, store: str) -> str:
    return (
        f"listen: {{host: 127.0.0.1, port: {gateway_port}}}\n"
        f"store: {{path: {store}}}\n"
        "routes:\n" + route_yaml(port)
    )


def build_server() -> Any:
    """The MCPServer with the seven tools (imports mcp 2.3.0 only here)."""
    import anyio
    from mcp.server.mcpserver import Context, MCPServer
    from mcp.server.mcpserver.exceptions import ToolError
    from mcp.shared.exceptions import MCPError
    from pydantic import BaseModel, Field

    class Confirmation(BaseModel):
        confirm: bool = Field(description="Go ahead?")

    class Name(BaseModel):
        name: str = Field(description="Your name")

    server = MCPServer(
        name="tasks-conformance-fixture",
        version="1.0.0",
        instructions="Plain tools for the tasks-* scenarios; the gateway in front makes the tasks.",
        # INFO shows every HTTP request (uvicorn's access log), for debugging the gateway.
        log_level=os.environ.get("TASKS_FIXTURE_LOG_LEVEL", "WARNING").upper(),
    )

    @server.tool()
    def greet(name: str) -> str:
        """Answers at once: "Hello, {name}!" (never a task)."""
        return f"Hello, {name}!"

    @server.tool()
    async def slow_compute(seconds: float = 1.0, label: str = "") -> str:
        """Works `seconds` seconds (0 answers at once), then reports what it computed."""
        if seconds > 0:
            await anyio.sleep(seconds)
        return f"slow_compute{f' {label}' if label else ''} finished after {seconds:g} s"

    @server.tool()
    async def failing_job() -> str:
        """Fails as a tool (an isError result, not a protocol error), after WORK_BEFORE_ASKING_S."""
        await anyio.sleep(WORK_BEFORE_ASKING_S)
        raise ToolError("failing_job failed on purpose")

    @server.tool()
    async def protocol_error_job() -> str:
        """Fails with a JSON-RPC error (-32603), not a tool result, after WORK_BEFORE_ASKING_S."""
        await anyio.sleep(WORK_BEFORE_ASKING_S)
        raise MCPError(code=-32603, message="protocol_error_job failed on purpose")

    @server.tool()
    async def confirm_delete(ctx: Context, filename: str = "file.txt") -> str:
        """Asks once for confirmation (elicitation; after WORK_BEFORE_ASKING_S), then answers."""
        await anyio.sleep(WORK_BEFORE_ASKING_S)
        answer = await ctx.elicit(f"Delete {filename}?", Confirmation)
        if answer.action == "accept" and answer.data.confirm:
            return f"deleted {filename}"
        return f"kept {filename} ({answer.action})"

    @server.tool()
    async def multi_input(ctx: Context) -> str:
        """Asks two questions at the same time (after WORK_BEFORE_ASKING_S); answers with both."""
        await anyio.sleep(WORK_BEFORE_ASKING_S)
        answers: dict[str, str] = {}

        async def ask_name() -> None:
            answer = await ctx.elicit("multi_input, question 1: your name?", Name)
            answers["name"] = answer.data.name if answer.action == "accept" else answer.action

        async def ask_confirm() -> None:
            answer = await ctx.elicit("multi_input, question 2: go ahead?", Confirmation)
            answers["confirm"] = (
                str(answer.data.confirm) if answer.action == "accept" else answer.action
            )

        async with anyio.create_task_group() as group:
            group.start_soon(ask_name)
            group.start_soon(ask_confirm)
        return f"multi_input: name={answers['name']}, confirm={answers['confirm']}"

    @server.tool()
    async def test_tool_with_task(ctx: Context) -> str:
        """Asks for user_name at once, works 1.5 s, then greets that name."""
        answer = await ctx.elicit("What is your user_name?", Name)
        name = answer.data.name if answer.action == "accept" else f"({answer.action})"
        await anyio.sleep(WORK_AFTER_ANSWER_S)
        return f"Hello, {name}! test_tool_with_task finished."

    return server


def _port(value: int | None) -> int:
    if value is not None:
        return value
    return int(os.environ.get("TASKS_FIXTURE_PORT", DEFAULT_PORT))


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("port_arg", nargs="?", type=int, help="port (same as --port)")
    parser.add_argument(
        "--port", type=int, help=f"port (env TASKS_FIXTURE_PORT, default {DEFAULT_PORT})"
    )
    parser.add_argument("--host", default="127.0.0.1", help="interface (default 127.0.0.1)")
    parser.add_argument(
        "--work-before",
        type=float,
        help="seconds of work before the first question or failure (env "
        "TASKS_FIXTURE_WORK_BEFORE, default 0: at once)",
    )
    parser.add_argument(
        "--print-route", action="store_true", help="print the gateway route entry and exit"
    )
    parser.add_argument(
        "--route", default=ROUTE, help=f"route name for --print-route (default {ROUTE})"
    )
    parser.add_argument(
        "--member",
        metavar="NAME",
        help="--print-route: a route of this one member (upstreams:) instead of upstream:",
    )
    parser.add_argument("--write-config", metavar="FILE", help="write a gateway config and exit")
    parser.add_argument(
        "--gateway-port", type=int, default=8080, help="the gateway's port in --write-config"
    )
    parser.add_argument(
        "--store", default="data/tasks-conformance.db", help="the gateway's store in --write-config"
    )
    args = parser.parse_args(argv)
    port = _port(args.port if args.port is not None else args.port_arg)

    if args.print_route:
        sys.stdout.write(route_yaml(port, args.route, member=args.member))
        return 0
    if args.write_config:
        with open(args.write_config, "w", encoding="utf-8") as out:
            out.write(gateway_config(port, args.gateway_port, args.store))
        return 0
    if args.work_before is not None:
        global WORK_BEFORE_ASKING_S
        WORK_BEFORE_ASKING_S = args.work_before
    # MCPServer.run binds 127.0.0.1 by default and then turns on its DNS rebinding protection.
    build_server().run("streamable-http", host=args.host, port=port)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
