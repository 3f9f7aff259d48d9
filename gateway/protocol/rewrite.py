"""The few rewrites the gateway makes to what crosses it (DESIGN.md, decision 3)."""

from __future__ import annotations

from typing import Any

from gateway.config import TaskPolicy
from gateway.protocol import jsonrpc
from gateway.protocol.outcome import Outcome
from gateway.protocol.versions import LATEST_PROTOCOL_VERSION, SUPPORTED_PROTOCOL_VERSIONS

RELATED_TASK = "io.modelcontextprotocol/related-task"
IMMEDIATE_RESPONSE = "io.modelcontextprotocol/model-immediate-response"

#: What the gateway serves itself, whatever the upstream can do.
TASKS_CAPABILITY: dict[str, Any] = {
    "list": {},
    "cancel": {},
    "requests": {"tools": {"call": {}}},
}


def negotiate_version(initialize: jsonrpc.Request) -> str:
    """The downstream version: the client's if we speak it, else our latest (lifecycle spec)."""
    requested = (initialize.params or {}).get("protocolVersion")
    return requested if requested in SUPPORTED_PROTOCOL_VERSIONS else LATEST_PROTOCOL_VERSION


def initialize_result(
    upstream: jsonrpc.Response, downstream_version: str, offer_tasks: bool, offer_list: bool
) -> jsonrpc.Response:
    """The upstream's InitializeResult under the version negotiated with the client.

    The upstream may have settled on an older revision; the client and the gateway still
    speak the one they agreed on. With tasks offered, the capability is the gateway's own:
    an upstream's `tasks` capability is replaced, because the gateway owns every task.
    """
    result = {**upstream.result, "protocolVersion": downstream_version}
    capabilities = dict(result.get("capabilities") or {})
    if offer_tasks:
        tasks = dict(TASKS_CAPABILITY)
        if not offer_list:
            del tasks["list"]
        capabilities["tasks"] = tasks
    else:
        capabilities.pop("tasks", None)
    result["capabilities"] = capabilities
    return upstream.model_copy(update={"result": result})


def tool_names(answer: jsonrpc.Response) -> list[str]:
    tools = answer.result.get("tools")
    if not isinstance(tools, list):
        return []
    return [t["name"] for t in tools if isinstance(t, dict) and isinstance(t.get("name"), str)]


def tools_list(answer: jsonrpc.Response, policy: TaskPolicy) -> jsonrpc.Response:
    """Every listed tool gets `execution.taskSupport` from the route's policy."""
    tools = answer.result.get("tools")
    if not isinstance(tools, list):
        return answer
    rewritten = []
    for tool in tools:
        if isinstance(tool, dict) and isinstance(tool.get("name"), str):
            execution = {
                **(tool.get("execution") or {}),
                "taskSupport": policy.support(tool["name"]),
            }
            tool = {**tool, "execution": execution}
        rewritten.append(tool)
    return answer.model_copy(update={"result": {**answer.result, "tools": rewritten}})


def task_result(
    request_id: jsonrpc.RequestId, task_id: str, outcome: Outcome
) -> jsonrpc.Response | jsonrpc.ErrorResponse:
    """What tasks/result answers: exactly the call's own result or error.

    A result carries the related-task meta (the spec's MUST, merged into any `_meta` the
    upstream sent); an error object has no `_meta`, so it is returned exactly as it came.
    """
    if outcome.kind == "error":
        error = jsonrpc.ErrorObject.model_validate(outcome.body)
        return jsonrpc.ErrorResponse(jsonrpc="2.0", id=request_id, error=error)
    meta = {**(outcome.body.get("_meta") or {}), RELATED_TASK: {"taskId": task_id}}
    return jsonrpc.Response(jsonrpc="2.0", id=request_id, result={**outcome.body, "_meta": meta})


def create_task_result(
    request_id: jsonrpc.RequestId, task: dict[str, Any], policy: TaskPolicy
) -> jsonrpc.Response:
    result: dict[str, Any] = {"task": task}
    if policy.immediate_response is not None:
        result["_meta"] = {IMMEDIATE_RESPONSE: policy.immediate_response}
    return jsonrpc.Response(jsonrpc="2.0", id=request_id, result=result)
