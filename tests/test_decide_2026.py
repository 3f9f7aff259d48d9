"""The 2026-07-28 decisions as tables, inputs -> decision: `modern.decide()` (which path a
session-less request takes) and `call_plan.plan()` (whether a call is answered at once,
parked between MRTR rounds, or made a task).

A row that exists because of the spec quotes it (spec/tasks-extension-2026-07-28.md, from
SEP-2663 and the 2026-07-28 base protocol). A `Reject` is checked by its code, never its text.
"""

from __future__ import annotations

from typing import Any

import pytest

from gateway.config import TaskPolicy
from gateway.protocol import call_plan, jsonrpc, modern
from gateway.protocol.call_plan import PARK_LIMIT_SECONDS, CallPlan, Heard, Then
from gateway.protocol.decisions import Forward, Local, Reject
from gateway.protocol.errors import (
    HEADER_MISMATCH,
    INVALID_PARAMS,
    METHOD_NOT_FOUND,
    MISSING_REQUIRED_CLIENT_CAPABILITY,
    UNSUPPORTED_PROTOCOL_VERSION,
)
from gateway.protocol.modern import CAPABILITIES_META, TASKS_EXTENSION, VERSION_META

V = "2026-07-28"
POLICY = TaskPolicy(tools={"quick": "forbidden", "report": "required"})
OFF = TaskPolicy(enabled=False, tools={"report": "required"})
EXTENSION: jsonrpc.JsonObject = {"extensions": {TASKS_EXTENSION: {}}}


def checked(method: str, *, ext: bool = False, **params: Any) -> modern.ModernRequest:
    """A request whose envelope held; `ext`: it declares the tasks extension."""
    capabilities = EXTENSION if ext else {}
    meta = {VERSION_META: V, CAPABILITIES_META: capabilities}
    request = jsonrpc.Request(jsonrpc="2.0", id=1, method=method, params={**params, "_meta": meta})
    return modern.ModernRequest(request, V, capabilities)


def bare(method: str, **params: Any) -> jsonrpc.Request:
    """The request as a 2025-11-25 upstream is sent it: no envelope, no round parameters."""
    return jsonrpc.Request(jsonrpc="2.0", id=1, method=method, params=params)


def call(name: str, *, ext: bool = False, **params: Any) -> modern.ModernRequest:
    return checked("tools/call", ext=ext, name=name, **params)


GET = checked("tasks/get", taskId="t")
GET_EXT = checked("tasks/get", ext=True, taskId="t")
UPDATE_EXT = checked("tasks/update", ext=True, taskId="t", inputResponses={})
CANCEL_EXT = checked("tasks/cancel", ext=True, taskId="t")
ANSWERS = {"elicitation-1": {"action": "accept"}}

DECIDE_ROWS = [
    # (request, policy) -> decision; an int is a Reject's code
    pytest.param(checked("server/discover"), POLICY, modern.Discover(), id="discover"),
    # "An unknown method gives 404 with -32601."
    pytest.param(checked("sampling/createMessage"), POLICY, METHOD_NOT_FOUND, id="unknown"),
    # "`tasks/result` and `tasks/list` → -32601"
    pytest.param(
        checked("tasks/result", ext=True, taskId="t"), POLICY, METHOD_NOT_FOUND, id="result"
    ),
    pytest.param(checked("tasks/list", ext=True), POLICY, METHOD_NOT_FOUND, id="list"),
    # "`tasks/get|update|cancel` from a non-declaring request MUST get `-32021`."
    pytest.param(GET, POLICY, MISSING_REQUIRED_CLIENT_CAPABILITY, id="get-undeclared"),
    pytest.param(GET_EXT, POLICY, Local(GET_EXT.request), id="get"),
    pytest.param(UPDATE_EXT, POLICY, Local(UPDATE_EXT.request), id="update"),
    pytest.param(CANCEL_EXT, POLICY, Local(CANCEL_EXT.request), id="cancel"),
    pytest.param(checked("tools/call", name=5), POLICY, INVALID_PARAMS, id="name-not-string"),
    pytest.param(checked("tools/list"), POLICY, Forward(bare("tools/list")), id="tools-list"),
    pytest.param(checked("prompts/list"), POLICY, Forward(bare("prompts/list")), id="prompts-list"),
    pytest.param(
        checked("prompts/get", ext=True, name="p"),
        POLICY,
        modern.Call(bare("prompts/get", name="p"), None),
        id="prompts-get",
    ),
    pytest.param(
        checked("resources/read", uri="file:///a"),
        POLICY,
        modern.Call(bare("resources/read", uri="file:///a"), None),
        id="resources-read",
    ),
    # "The server MUST NOT return `CreateTaskResult` to a request that lacks the capability"
    pytest.param(call("x"), POLICY, modern.Call(bare("tools/call", name="x"), None), id="plain"),
    pytest.param(
        call("x", ext=True), POLICY, modern.Call(bare("tools/call", name="x"), "optional"), id="ext"
    ),
    pytest.param(
        call("quick", ext=True),
        POLICY,
        modern.Call(bare("tools/call", name="quick"), None),
        id="forbidden",
    ),
    # "If a tool cannot run without a task, the server returns `-32021`"
    pytest.param(call("report"), POLICY, MISSING_REQUIRED_CLIENT_CAPABILITY, id="required-plain"),
    pytest.param(
        call("report", ext=True),
        POLICY,
        modern.Call(bare("tools/call", name="report"), "required"),
        id="required",
    ),
    pytest.param(
        call("report", ext=True),
        OFF,
        modern.Call(bare("tools/call", name="report"), None),
        id="off",
    ),
    # "The server alone decides; legacy `params.task` MUST be ignored."
    pytest.param(
        call("x", task={"ttl": 5}),
        POLICY,
        modern.Call(bare("tools/call", name="x"), None),
        id="legacy-task-ignored",
    ),
    pytest.param(
        call("x", ext=True, requestState="s", inputResponses=ANSWERS),
        POLICY,
        modern.Call(bare("tools/call", name="x"), "optional", "s", ANSWERS),
        id="retry",
    ),
    pytest.param(call("x", inputResponses=[1]), POLICY, INVALID_PARAMS, id="answers-not-object"),
    pytest.param(
        call("x", inputResponses={"k": 1}), POLICY, INVALID_PARAMS, id="answer-not-object"
    ),
]


@pytest.mark.parametrize(("request_", "policy", "expected"), DECIDE_ROWS)
def test_decide_routes_each_request(
    request_: modern.ModernRequest, policy: TaskPolicy, expected: object
) -> None:
    decision = modern.decide(request_, policy)
    if isinstance(expected, int):
        assert isinstance(decision, Reject) and decision.code == expected
    else:
        assert decision == expected


def test_a_missing_capability_names_the_extension_the_request_must_declare() -> None:
    for request_ in (GET, call("report")):
        decision = modern.decide(request_, POLICY)
        assert isinstance(decision, Reject)
        assert decision.data == {"requiredCapabilities": EXTENSION}


def test_a_retry_is_named_by_its_request_state_alone() -> None:
    # "unrecognized input is ignored": answers without a requestState answer nothing asked
    decision = modern.decide(call("x", inputResponses=ANSWERS), POLICY)
    assert isinstance(decision, modern.Call) and not decision.retry
    decision = modern.decide(call("x", requestState="s"), POLICY)
    assert isinstance(decision, modern.Call) and decision.retry


HEADERS = {"mcp-protocol-version": V, "mcp-method": "tools/list"}


@pytest.mark.parametrize(
    ("meta", "headers", "code"),
    [
        pytest.param({CAPABILITIES_META: {}}, HEADERS, INVALID_PARAMS, id="no-version"),
        pytest.param({VERSION_META: V}, HEADERS, INVALID_PARAMS, id="no-capabilities"),
        # "A header/body mismatch gives 400 with `-32020` HeaderMismatch", and a client that
        # disagrees with itself is told so before its version is judged.
        pytest.param(
            {VERSION_META: "2099-01-01", CAPABILITIES_META: {}},
            HEADERS,
            HEADER_MISMATCH,
            id="mismatch",
        ),
        pytest.param(
            {VERSION_META: V, CAPABILITIES_META: {}},
            {**HEADERS, "mcp-method": "tools/call"},
            HEADER_MISMATCH,
            id="method-mismatch",
        ),
        # "Unsupported version → `-32022` with `data.supported`."
        pytest.param(
            {VERSION_META: "2099-01-01", CAPABILITIES_META: {}},
            {**HEADERS, "mcp-protocol-version": "2099-01-01"},
            UNSUPPORTED_PROTOCOL_VERSION,
            id="unsupported",
        ),
        pytest.param({VERSION_META: V, CAPABILITIES_META: []}, HEADERS, INVALID_PARAMS, id="caps"),
    ],
)
def test_classify_refuses_a_broken_envelope(
    meta: jsonrpc.JsonObject, headers: dict[str, str], code: int
) -> None:
    request = jsonrpc.Request(jsonrpc="2.0", id=1, method="tools/list", params={"_meta": meta})
    refused = modern.classify(request, headers)
    assert isinstance(refused, Reject) and refused.code == code


def test_classify_passes_a_sound_envelope_on() -> None:
    meta = {VERSION_META: V, CAPABILITIES_META: EXTENSION}
    request = jsonrpc.Request(jsonrpc="2.0", id=1, method="tools/list", params={"_meta": meta})
    assert modern.classify(request, HEADERS) == modern.ModernRequest(request, V, EXTENSION)


WINDOWED = TaskPolicy(sync_window_ms=250, time_limit_seconds=60)
NO_WINDOW = TaskPolicy(sync_window_ms=0, time_limit_seconds=None)
ANSWER, PARK, TASK = Then.ANSWER, Then.PARK, Then.TASK

PLAN_ROWS = [
    # (task, policy, shared store) -> (window, limit, ended, asked, running)
    # "tools/call without [the capability] runs sync": the whole call, under the time limit
    # a task of the tool would get; a question is an MRTR round. (`running` is a known gap:
    # see CallPlan.running.)
    pytest.param(None, WINDOWED, False, (None, 60, ANSWER, PARK, TASK), id="plain"),
    pytest.param(None, WINDOWED, True, (None, 60, ANSWER, PARK, TASK), id="plain-replicas"),
    pytest.param(None, NO_WINDOW, False, (None, None, ANSWER, PARK, TASK), id="plain-unlimited"),
    # "If MRTR rounds precede the task, they SHOULD be resolved synchronously before
    # `CreateTaskResult` is returned."
    pytest.param("optional", WINDOWED, False, (0.25, None, ANSWER, PARK, TASK), id="optional"),
    pytest.param("optional", NO_WINDOW, False, (0.0, None, ANSWER, PARK, TASK), id="no-window"),
    # With replicas the retry may reach another replica than the parked call: a task instead.
    pytest.param(
        "optional", WINDOWED, True, (0.25, None, ANSWER, TASK, TASK), id="optional-replicas"
    ),
    # DESIGN: "A `required` tool's call is a task from its first moment in both generations"
    pytest.param("required", WINDOWED, False, (0.0, None, TASK, TASK, TASK), id="required"),
    pytest.param("required", WINDOWED, True, (0.0, None, TASK, TASK, TASK), id="required-replicas"),
]


@pytest.mark.parametrize(("task", "policy", "shared", "expected"), PLAN_ROWS)
def test_plan_says_how_long_a_call_waits_and_what_follows(
    task: str | None,
    policy: TaskPolicy,
    shared: bool,
    expected: tuple[float | None, float | None, Then, Then, Then],
) -> None:
    plan = call_plan.plan(task, policy, shared)
    assert (plan.window, plan.limit, plan.ended, plan.asked, plan.running) == expected


def test_the_plan_answers_what_the_call_did() -> None:
    plan = CallPlan(None, None, 60.0, ended=ANSWER, asked=PARK, running=TASK)
    assert [plan.after(heard) for heard in Heard] == [ANSWER, PARK, TASK]


@pytest.mark.parametrize(("input_timeout", "seconds"), [(600.0, 600.0), (None, PARK_LIMIT_SECONDS)])
def test_a_parked_call_waits_the_routes_input_timeout_else_the_park_limit(
    input_timeout: float | None, seconds: float
) -> None:
    policy = TaskPolicy(input_timeout_seconds=input_timeout)
    assert call_plan.plan(None, policy, False).park_seconds == seconds
