"""The 2026-07-28 generation's front end, decided without I/O: which path a request takes,
whether its per-request envelope and headers hold, and what its answer looks like.

A 2026-07-28 request has no session: every request carries its protocol version and client
capabilities in `params._meta`, and the version again in the `MCP-Protocol-Version` header
(plus `Mcp-Method`, and `Mcp-Name` where the method names something). `classify` checks them
in the order the spec's reference implementation does, so a client that disagrees with
itself is told so (-32020) before it is told its version is unsupported (-32022). `decide`
then says what the gateway does with a valid request: answer `server/discover` itself,
forward a tools request over a held upstream session, or refuse. Every result gets
`resultType`; cacheable ones get `ttlMs` and `cacheScope`.
"""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass
from typing import Any

from gateway.config import TaskPolicy
from gateway.protocol import jsonrpc
from gateway.protocol.errors import (
    HEADER_MISMATCH,
    INVALID_PARAMS,
    INVALID_REQUEST,
    METHOD_NOT_FOUND,
    MISSING_REQUIRED_CLIENT_CAPABILITY,
    PARSE_ERROR,
    UNSUPPORTED_PROTOCOL_VERSION,
)
from gateway.protocol.versions import MODERN_PROTOCOL_VERSION

VERSION_META = "io.modelcontextprotocol/protocolVersion"
CAPABILITIES_META = "io.modelcontextprotocol/clientCapabilities"
CLIENT_INFO_META = "io.modelcontextprotocol/clientInfo"
LOG_LEVEL_META = "io.modelcontextprotocol/logLevel"
SERVER_INFO_META = "io.modelcontextprotocol/serverInfo"
#: The envelope keys: they describe the caller to the gateway, and never go upstream.
ENVELOPE_META = (VERSION_META, CAPABILITIES_META, CLIENT_INFO_META, LOG_LEVEL_META)
TASKS_EXTENSION = "io.modelcontextprotocol/tasks"

VERSION_HEADER = "MCP-Protocol-Version"
METHOD_HEADER = "Mcp-Method"
NAME_HEADER = "Mcp-Name"
#: The body parameter `Mcp-Name` repeats, per method.
NAME_BEARING = {"tools/call": "name", "prompts/get": "name", "resources/read": "uri"}
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
#: What the modern path serves today; any other method is 404 with -32601.
SERVED = frozenset({"server/discover", "tools/list", "tools/call"})

#: HTTP status of an error answer on the modern path (others are 200).
_ERROR_STATUS = {
    PARSE_ERROR: 400,
    INVALID_REQUEST: 400,
    INVALID_PARAMS: 400,
    HEADER_MISMATCH: 400,
    MISSING_REQUIRED_CLIENT_CAPABILITY: 400,
    UNSUPPORTED_PROTOCOL_VERSION: 400,
    METHOD_NOT_FOUND: 404,
}


def wants_modern(message: jsonrpc.Message, header_version: str | None) -> bool:
    """Whether a session-less message is the 2026-07-28 generation's: the version header
    names it, the body carries the per-request protocol version, or the method exists only
    in 2026-07-28 (`server/discover`). `initialize` never is."""
    if isinstance(message, jsonrpc.Request) and message.method in ("initialize", "server/discover"):
        return message.method == "server/discover"
    if header_version == MODERN_PROTOCOL_VERSION:
        return True
    if isinstance(message, jsonrpc.Request | jsonrpc.Notification):
        meta = (message.params or {}).get("_meta")
        return isinstance(meta, dict) and VERSION_META in meta
    return False


def http_status(error: jsonrpc.ErrorResponse) -> int:
    return _ERROR_STATUS.get(error.error.code, 200)


@dataclass(frozen=True, slots=True)
class ModernRequest:
    """A request whose envelope and headers held."""

    request: jsonrpc.Request
    protocol_version: str
    capabilities: jsonrpc.JsonObject

    @property
    def declares_tasks(self) -> bool:
        extensions = self.capabilities.get("extensions")
        return isinstance(extensions, dict) and TASKS_EXTENSION in extensions


@dataclass(frozen=True, slots=True)
class Reject:
    code: int
    message: str
    data: Any = None


def classify(request: jsonrpc.Request, headers: dict[str, str]) -> ModernRequest | Reject:
    """Check the envelope, then the headers against it, then the version; first failure wins.

    `headers` maps lower-case header names to values.
    """
    meta = (request.params or {}).get("_meta")
    if not isinstance(meta, dict):
        return Reject(
            INVALID_PARAMS,
            f"params._meta must be an object carrying {VERSION_META!r} and {CAPABILITIES_META!r}",
        )
    missing = [key for key in (VERSION_META, CAPABILITIES_META) if key not in meta]
    if missing:
        return Reject(INVALID_PARAMS, f"params._meta lacks {', '.join(missing)}")
    version = meta[VERSION_META]
    if headers.get(VERSION_HEADER.lower()) != version:
        return Reject(
            HEADER_MISMATCH,
            f"the {VERSION_HEADER} header does not match params._meta[{VERSION_META!r}]",
        )
    if headers.get(METHOD_HEADER.lower()) != request.method:
        return Reject(HEADER_MISMATCH, f"the {METHOD_HEADER} header does not match the method")
    name_key = NAME_BEARING.get(request.method)
    if name_key is not None:
        named = jsonrpc.param(request, name_key)
        if named is not None and _decode(headers.get(NAME_HEADER.lower())) != named:
            return Reject(
                HEADER_MISMATCH, f"the {NAME_HEADER} header does not match params.{name_key}"
            )
    if not isinstance(version, str):
        return Reject(INVALID_PARAMS, f"params._meta[{VERSION_META!r}] must be a string")
    if version != MODERN_PROTOCOL_VERSION:
        return Reject(
            UNSUPPORTED_PROTOCOL_VERSION,
            "Unsupported protocol version",
            {"supported": [MODERN_PROTOCOL_VERSION], "requested": version},
        )
    capabilities = meta[CAPABILITIES_META]
    if not isinstance(capabilities, dict):
        return Reject(INVALID_PARAMS, f"params._meta[{CAPABILITIES_META!r}] must be an object")
    for key, kind in ((CLIENT_INFO_META, dict), (LOG_LEVEL_META, str)):
        if key in meta and not isinstance(meta[key], kind):
            return Reject(INVALID_PARAMS, f"params._meta[{key!r}] has the wrong type")
    return ModernRequest(request, version, capabilities)


def _decode(value: str | None) -> str | None:
    """A header value, with the spec's `=?base64?…?=` sentinel decoded (None if malformed)."""
    if value is None or not (value.startswith("=?base64?") and value.endswith("?=")):
        return value
    try:
        return base64.b64decode(value[9:-2], validate=True).decode()
    except (binascii.Error, UnicodeDecodeError):
        return None


@dataclass(frozen=True, slots=True)
class Discover:
    """Answer server/discover from the upstream's initialize result."""


@dataclass(frozen=True, slots=True)
class Forward:
    """Send `request` (the envelope removed) over a held upstream session."""

    request: jsonrpc.Request


def decide(checked: ModernRequest, policy: TaskPolicy) -> Discover | Forward | Reject:
    request = checked.request
    if request.method not in SERVED:
        return Reject(
            METHOD_NOT_FOUND,
            f"method {request.method!r} is not served on the 2026-07-28 path of this gateway",
        )
    if request.method == "server/discover":
        return Discover()
    if request.method == "tools/call":
        name = jsonrpc.param(request, "name")
        if not isinstance(name, str):
            return Reject(INVALID_PARAMS, "params.name must be a string")
        if policy.enabled and policy.support(name) == "required":
            return _task_required(name, checked.declares_tasks)
    return Forward(upstream_request(request))


def _task_required(name: str, declared: bool) -> Reject:
    if declared:
        # The extension is not served on this path yet; discover does not advertise it.
        return Reject(
            MISSING_REQUIRED_CLIENT_CAPABILITY,
            f"tool {name!r} runs only as a task, and this gateway serves tasks to 2026-07-28 "
            "clients not yet: call it in a 2025-11-25 session (initialize)",
        )
    return Reject(
        MISSING_REQUIRED_CLIENT_CAPABILITY,
        f"tool {name!r} runs only as a task: the request must declare the tasks extension",
        {"requiredCapabilities": {"extensions": {TASKS_EXTENSION: {}}}},
    )


def upstream_request(request: jsonrpc.Request) -> jsonrpc.Request:
    """What a legacy upstream is sent: no envelope keys in `_meta`, no legacy `task`."""
    request = jsonrpc.without_param(request, "task")
    meta = request.meta
    if not any(key in meta for key in ENVELOPE_META):
        return request
    kept = {key: value for key, value in meta.items() if key not in ENVELOPE_META}
    if kept:
        return jsonrpc.with_param(request, "_meta", kept)
    return jsonrpc.without_param(request, "_meta")


def complete(answer: jsonrpc.Response, method: str) -> jsonrpc.Response:
    """An upstream result as a 2026-07-28 result: `resultType`, and the cache fields where
    the method needs them (not cacheable across callers: what a caller sees may be theirs)."""
    result = {"resultType": "complete", **answer.result}
    if method in CACHEABLE:
        result.setdefault("ttlMs", 0)
        result.setdefault("cacheScope", "private")
    return jsonrpc.Response(jsonrpc="2.0", id=answer.id, result=result)


def discover_result(request_id: jsonrpc.RequestId, initialized: jsonrpc.JsonObject) -> str:
    """server/discover from the upstream's initialize result; its own 2025-11-25 `tasks`
    capability is not the extension and is not passed on."""
    capabilities = initialized.get("capabilities")
    capabilities = dict(capabilities) if isinstance(capabilities, dict) else {}
    capabilities.pop("tasks", None)
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
