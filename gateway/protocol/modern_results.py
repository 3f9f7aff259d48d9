"""What 2026-07-28 results look like: a relayed upstream result made one of this generation
(`resultType`, the cache fields), an MRTR round, and `server/discover` built from the
upstream's initialize result or taken from its own discover."""

from __future__ import annotations

from gateway.protocol import jsonrpc
from gateway.protocol.errors import INVALID_PARAMS
from gateway.protocol.modern import SERVER_INFO_META, TASKS_EXTENSION
from gateway.protocol.versions import MODERN_PROTOCOL_VERSION

#: Results that carry `ttlMs` and `cacheScope` (SEP-2549).
CACHEABLE = frozenset(
    {
        "server/discover",
        "tools/list",
        "prompts/list",
        "resources/list",
        "resources/read",
        "resources/templates/list",
    }
)
#: Resource not found before 2026-07-28, which now forbids the code: -32602 replaces it.
LEGACY_RESOURCE_NOT_FOUND = -32002
#: Capability flags that promise notifications, which 2026-07-28 delivers only on
#: `subscriptions/listen` streams (not served): discover leaves them out.
_UNKEPT_PROMISES = {
    "tools": ("listChanged",),
    "prompts": ("listChanged",),
    "resources": ("listChanged", "subscribe"),
}


def complete(answer: jsonrpc.Response, method: str) -> jsonrpc.Response:
    """An upstream result as a 2026-07-28 result: `resultType`, and the cache fields where
    the method needs them (not cacheable across callers: what a caller sees may be theirs).
    A result that has its own `resultType` other than complete (an MRTR round) is kept."""
    if answer.result.get("resultType", "complete") != "complete":
        return answer
    result = {"resultType": "complete", **answer.result}
    if method in CACHEABLE:
        result.setdefault("ttlMs", 0)
        result.setdefault("cacheScope", "private")
    return jsonrpc.Response(jsonrpc="2.0", id=answer.id, result=result)


def renumbered(answer: jsonrpc.ErrorResponse) -> jsonrpc.ErrorResponse:
    """An error as 2026-07-28 numbers it: a legacy upstream's resource not found (-32002)
    is -32602 (Invalid Params), its message and data kept."""
    if answer.error.code != LEGACY_RESOURCE_NOT_FOUND:
        return answer
    error = answer.error.model_copy(update={"code": INVALID_PARAMS})
    return answer.model_copy(update={"error": error})


def input_required(
    request_id: jsonrpc.RequestId, requests: jsonrpc.JsonObject, state: str
) -> jsonrpc.Response:
    """An MRTR round: the upstream's questions by key, and the state the retry echoes."""
    result = {"resultType": "input_required", "inputRequests": requests, "requestState": state}
    return jsonrpc.Response(jsonrpc="2.0", id=request_id, result=result)


def native_discover(answer: jsonrpc.Response, tasks: bool) -> jsonrpc.Response:
    """An upstream's own server/discover, with the tasks extension the gateway's to offer."""
    capabilities = answer.result.get("capabilities")
    capabilities = dict(capabilities) if isinstance(capabilities, dict) else {}
    extensions = capabilities.get("extensions")
    extensions = dict(extensions) if isinstance(extensions, dict) else {}
    extensions.pop(TASKS_EXTENSION, None)
    if tasks:
        extensions[TASKS_EXTENSION] = {}
    if extensions:
        capabilities["extensions"] = extensions
    else:
        capabilities.pop("extensions", None)
    result = {**answer.result, "capabilities": capabilities}
    return jsonrpc.Response(jsonrpc="2.0", id=answer.id, result=result)


def discover_result(
    request_id: jsonrpc.RequestId, initialized: jsonrpc.JsonObject, tasks: bool
) -> str:
    """server/discover from the upstream's initialize result; its own 2025-11-25 `tasks`
    capability is not the extension and is not passed on. With `tasks`, the gateway's own
    tasks extension is advertised."""
    capabilities = initialized.get("capabilities")
    capabilities = dict(capabilities) if isinstance(capabilities, dict) else {}
    capabilities.pop("tasks", None)
    for name, flags in _UNKEPT_PROMISES.items():
        if isinstance(kept := capabilities.get(name), dict):
            capabilities[name] = {key: value for key, value in kept.items() if key not in flags}
    if tasks:
        extensions = capabilities.get("extensions")
        extensions = dict(extensions) if isinstance(extensions, dict) else {}
        extensions[TASKS_EXTENSION] = {}
        capabilities["extensions"] = extensions
    result: jsonrpc.JsonObject = {
        "supportedVersions": [MODERN_PROTOCOL_VERSION],
        "capabilities": capabilities,
    }
    if isinstance(instructions := initialized.get("instructions"), str):
        result["instructions"] = instructions
    if isinstance(server_info := initialized.get("serverInfo"), dict):
        result["_meta"] = {SERVER_INFO_META: server_info}
    return jsonrpc.dump(
        complete(jsonrpc.Response(jsonrpc="2.0", id=request_id, result=result), "server/discover")
    )
