"""decide(): every routing rule as a row."""

from __future__ import annotations

from typing import Any

import pytest

from gateway.config import TaskPolicy
from gateway.protocol import dispatch, jsonrpc
from gateway.protocol.errors import INVALID_PARAMS, METHOD_NOT_FOUND

POLICY = TaskPolicy(tools={"quick": "forbidden", "report": "required"})


def request(method: str, **params: Any) -> jsonrpc.Request:
    return jsonrpc.Request(jsonrpc="2.0", id=1, method=method, params=params)


@pytest.mark.parametrize(
    ("message", "version", "expected"),
    [
        (request("initialize"), None, dispatch.Initialize),
        (request("server/discover"), None, dispatch.Reject),
        (request("tools/call", name="x", task={}), "2025-11-25", dispatch.RunAsTask),
        (request("tools/call", name="x"), "2025-11-25", dispatch.Forward),
        (request("tools/call", name="quick", task={}), "2025-11-25", dispatch.Reject),
        (request("tools/call", name="report"), "2025-11-25", dispatch.Reject),
        (request("tools/call", name="report", task={}), "2025-11-25", dispatch.RunAsTask),
        (request("tasks/get", taskId="t"), "2025-11-25", dispatch.Local),
        (request("tasks/list"), "2025-11-25", dispatch.Local),
        (request("tools/list"), "2025-11-25", dispatch.Forward),
        (request("resources/read", uri="x"), "2025-11-25", dispatch.Forward),
        # Older clients see a plain proxy: tasks/* and `task` go upstream untouched or dropped.
        (request("tasks/get", taskId="t"), "2025-06-18", dispatch.Forward),
        (request("tools/call", name="report"), "2025-06-18", dispatch.Forward),
        (
            jsonrpc.Notification(jsonrpc="2.0", method="notifications/initialized"),
            "2025-11-25",
            dispatch.Deliver,
        ),
    ],
)
def test_decide_routes_each_message(
    message: jsonrpc.Message, version: str | None, expected: type
) -> None:
    assert isinstance(dispatch.decide(message, POLICY, version), expected)


def test_policy_rejections_use_the_spec_codes() -> None:
    forbidden = dispatch.decide(request("tools/call", name="quick", task={}), POLICY, "2025-11-25")
    required = dispatch.decide(request("tools/call", name="report"), POLICY, "2025-11-25")
    bad_task = dispatch.decide(request("tools/call", name="x", task=5), POLICY, "2025-11-25")
    assert isinstance(forbidden, dispatch.Reject) and forbidden.code == METHOD_NOT_FOUND
    assert isinstance(required, dispatch.Reject) and required.code == METHOD_NOT_FOUND
    assert isinstance(bad_task, dispatch.Reject) and bad_task.code == INVALID_PARAMS


def test_tools_list_is_rewritten_and_task_field_dropped_when_tasks_are_off() -> None:
    listed = dispatch.decide(request("tools/list"), POLICY, "2025-11-25")
    assert isinstance(listed, dispatch.Forward) and listed.rewrite is dispatch.Rewrite.TOOLS_LIST
    off = TaskPolicy(enabled=False)
    plain = dispatch.decide(request("tools/call", name="x", task={"ttl": 5}), off, "2025-11-25")
    assert isinstance(plain, dispatch.Forward) and "task" not in (plain.request.params or {})
