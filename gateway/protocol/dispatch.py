"""decide(): what the gateway does with one client message. Pure: no I/O, no state.

The HTTP layer has already parsed the body into a typed message; this module looks at the
method, the route's task policy and the protocol version negotiated with the client, and
names the path the message takes:

    Initialize   open a session: initialize the upstream, answer with our own session id
    Reject       answer an error at once (a server/discover probe, a task-policy violation)
    RunAsTask    a task-augmented tools/call: the gateway creates and runs the task
    Local        tasks/get, tasks/result, tasks/list, tasks/cancel: answered by the task API
                 from the store, never the upstream
    Forward      relay a request to the upstream; the answer comes back on its stream,
                 rewritten when `rewrite` says so (tools/list gains execution.taskSupport)
    Deliver      relay a notification, or the client's answer to a server request

Reject, Local and Forward are the types both generations share (`decisions`). The endpoint
calls `decide` once per request. Keeping this a pure function means every routing rule is a
row in a table test, and the HTTP, session and upstream code never decide policy.
"""

from __future__ import annotations

from dataclasses import dataclass

from gateway.config import TaskPolicy
from gateway.protocol import jsonrpc
from gateway.protocol.decisions import TASK_METHODS_2025, Forward, Local, Reject, Rewrite
from gateway.protocol.errors import INVALID_PARAMS, METHOD_NOT_FOUND

#: Tasks exist from this protocol revision on; older clients see a plain proxy.
TASKS_SINCE = "2025-11-25"


@dataclass(frozen=True, slots=True)
class Initialize:
    request: jsonrpc.Request


@dataclass(frozen=True, slots=True)
class RunAsTask:
    request: jsonrpc.Request


@dataclass(frozen=True, slots=True)
class Deliver:
    message: jsonrpc.Notification | jsonrpc.Response | jsonrpc.ErrorResponse


Decision = Initialize | Reject | RunAsTask | Local | Forward | Deliver


def tasks_offered(policy: TaskPolicy, protocol_version: str | None) -> bool:
    return policy.enabled and protocol_version is not None and protocol_version >= TASKS_SINCE


def decide(
    message: jsonrpc.Message,
    policy: TaskPolicy,
    protocol_version: str | None,
    lists_tasks: bool = True,
) -> Decision:
    """`protocol_version` is the session's, or None for a message that came without one;
    `lists_tasks` is False where callers cannot be identified and tasks/list is not offered."""
    if not isinstance(message, jsonrpc.Request):
        return Deliver(message)
    if message.method == "initialize":
        return Initialize(message)
    if message.method == "server/discover":
        # A success here would tell 2026-07-28 clients we speak their revision; any error
        # makes them fall back to initialize, which is what we serve.
        return Reject(
            METHOD_NOT_FOUND,
            "server/discover is not served: this route speaks MCP up to 2025-11-25 "
            "(its 2026-07-28 generation is switched off); send initialize",
        )
    if not tasks_offered(policy, protocol_version):
        if message.method == "tools/call" and jsonrpc.param(message, "task") is not None:
            # Without the tasks capability the spec says: process normally, ignore `task`.
            return Forward(jsonrpc.without_param(message, "task"))
        return Forward(message)
    if message.method == "tasks/list" and not lists_tasks:
        return Reject(
            METHOD_NOT_FOUND,
            "tasks/list is not offered without authentication: callers cannot be told apart "
            "(auth.list_tasks_without_auth opts in)",
        )
    if message.method in TASK_METHODS_2025:
        return Local(message)
    if message.method == "tools/list":
        return Forward(message, Rewrite.TOOLS_LIST)
    if message.method == "tools/call":
        return _tool_call(message, policy)
    return Forward(message)


def _tool_call(request: jsonrpc.Request, policy: TaskPolicy) -> Decision:
    name = jsonrpc.param(request, "name")
    task = jsonrpc.param(request, "task")
    support = policy.support(name) if isinstance(name, str) else policy.default
    if task is None:
        if support == "required":
            return Reject(
                METHOD_NOT_FOUND,
                f"tool {name!r} must be called as a task (execution.taskSupport is 'required'); "
                "add params.task",
            )
        return Forward(request)
    if not isinstance(task, dict):
        return Reject(INVALID_PARAMS, 'params.task must be an object, e.g. {"ttl": 60000}')
    if support == "forbidden":
        return Reject(
            METHOD_NOT_FOUND,
            f"tool {name!r} cannot be called as a task (execution.taskSupport is 'forbidden'); "
            "call it without params.task",
        )
    return RunAsTask(request)
