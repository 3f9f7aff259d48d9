"""dispatch.decide() (2025-11-25): every routing rule as a row, inputs -> decision.

A row that exists because of the spec quotes it (spec/tasks-2025-11-25.md). A `Reject` is
checked by its code, never its text.
"""

from __future__ import annotations

from typing import Any

import pytest

from gateway.config import TaskPolicy
from gateway.protocol import dispatch, jsonrpc
from gateway.protocol.decisions import Forward, Local, Reject, Rewrite
from gateway.protocol.errors import INVALID_PARAMS, METHOD_NOT_FOUND

POLICY = TaskPolicy(tools={"quick": "forbidden", "report": "required"})
OFF = TaskPolicy(enabled=False)
V = "2025-11-25"
OLDER = "2025-06-18"


def request(method: str, **params: Any) -> jsonrpc.Request:
    return jsonrpc.Request(jsonrpc="2.0", id=1, method=method, params=params)


def call(name: str, **params: Any) -> jsonrpc.Request:
    return request("tools/call", name=name, **params)


INIT = request("initialize")
DISCOVER = request("server/discover")
LIST_TOOLS = request("tools/list")
READ = request("resources/read", uri="x")
GET = request("tasks/get", taskId="t")
RESULT = request("tasks/result", taskId="t")
CANCEL = request("tasks/cancel", taskId="t")
LIST_TASKS = request("tasks/list")
UPDATE = request("tasks/update", taskId="t")
NOTE = jsonrpc.Notification(jsonrpc="2.0", method="notifications/initialized")
ANSWER = jsonrpc.Response(jsonrpc="2.0", id=7, result={"action": "accept"})

#: An expected decision: an error code for a `Reject`, a decision type for that type made of
#: the message as it came, or the decision itself.
Expected = int | type | dispatch.Decision

ROWS = [
    # (message, policy, negotiated version, lists_tasks) -> decision
    pytest.param(INIT, POLICY, None, True, dispatch.Initialize, id="initialize"),
    pytest.param(DISCOVER, POLICY, None, True, METHOD_NOT_FOUND, id="discover-probe"),
    pytest.param(LIST_TOOLS, POLICY, None, True, Forward, id="no-session"),
    pytest.param(call("x", task={}), POLICY, V, True, dispatch.RunAsTask, id="task-call"),
    pytest.param(call("x"), POLICY, V, True, Forward, id="plain-call"),
    # "If `execution.taskSupport` is not present or "forbidden", clients MUST NOT attempt
    # to invoke the tool as a task. Servers SHOULD return a -32601 (Method not found) error"
    pytest.param(call("quick", task={}), POLICY, V, True, METHOD_NOT_FOUND, id="forbidden-task"),
    pytest.param(call("quick"), POLICY, V, True, Forward, id="forbidden-plain"),
    # "If `execution.taskSupport` is "required", clients MUST invoke the tool as a task.
    # Servers MUST return a -32601 (Method not found) error if a client does not"
    pytest.param(call("report"), POLICY, V, True, METHOD_NOT_FOUND, id="required-plain"),
    pytest.param(call("report", task={}), POLICY, V, True, dispatch.RunAsTask, id="required-task"),
    pytest.param(call("x", task=5), POLICY, V, True, INVALID_PARAMS, id="task-not-object"),
    pytest.param(GET, POLICY, V, True, Local, id="tasks-get"),
    pytest.param(RESULT, POLICY, V, True, Local, id="tasks-result"),
    pytest.param(CANCEL, POLICY, V, True, Local, id="tasks-cancel"),
    pytest.param(LIST_TASKS, POLICY, V, True, Local, id="tasks-list"),
    # "receivers that cannot identify requestors SHOULD NOT declare the tasks.list capability"
    pytest.param(LIST_TASKS, POLICY, V, False, METHOD_NOT_FOUND, id="tasks-list-anonymous"),
    pytest.param(UPDATE, POLICY, V, True, Forward, id="extension-method-relayed"),
    pytest.param(
        LIST_TOOLS, POLICY, V, True, Forward(LIST_TOOLS, Rewrite.TOOLS_LIST), id="tools-list"
    ),
    pytest.param(READ, POLICY, V, True, Forward, id="other-request"),
    # "Receivers that do not declare the task capability for a request type MUST process
    # requests of that type normally, ignoring any task-augmentation metadata if present."
    pytest.param(call("x", task={"ttl": 5}), OFF, V, True, Forward(call("x")), id="off-task"),
    pytest.param(LIST_TOOLS, OFF, V, True, Forward, id="off-tools-list"),
    pytest.param(call("x", task={}), POLICY, OLDER, True, Forward(call("x")), id="old-task"),
    pytest.param(call("report"), POLICY, OLDER, True, Forward, id="old-required-plain"),
    pytest.param(GET, POLICY, OLDER, True, Forward, id="old-tasks-get"),
    pytest.param(NOTE, POLICY, V, True, dispatch.Deliver, id="notification"),
    pytest.param(ANSWER, POLICY, V, True, dispatch.Deliver, id="answer"),
]


@pytest.mark.parametrize(("message", "policy", "version", "lists_tasks", "expected"), ROWS)
def test_decide_routes_each_message(
    message: jsonrpc.Message,
    policy: TaskPolicy,
    version: str | None,
    lists_tasks: bool,
    expected: Expected,
) -> None:
    decision = dispatch.decide(message, policy, version, lists_tasks)
    if isinstance(expected, int):
        assert isinstance(decision, Reject) and decision.code == expected
    elif isinstance(expected, type):
        assert decision == expected(message)
    else:
        assert decision == expected


def test_tasks_are_offered_from_2025_11_25_on_and_only_when_enabled() -> None:
    assert dispatch.tasks_offered(POLICY, V)
    assert not dispatch.tasks_offered(POLICY, OLDER)
    assert not dispatch.tasks_offered(POLICY, None)
    assert not dispatch.tasks_offered(OFF, V)
