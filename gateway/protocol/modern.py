"""The 2026-07-28 generation's front end, decided without I/O: which path a request takes,
whether its per-request envelope and headers hold, and what the gateway does with it.

A 2026-07-28 request has no session: every request carries its protocol version and client
capabilities in `params._meta`, and the version again in the `MCP-Protocol-Version` header
(plus `Mcp-Method`, and `Mcp-Name` where the method names something). `classify` checks them
in the order the spec's reference implementation does, so a client that disagrees with
itself is told so (-32020) before it is told its version is unsupported (-32022). `decide`
then says what the gateway does with a valid request: answer `server/discover`, run a
call that may take MRTR rounds or become a task (`Call`), answer the tasks extension
(`Local`), relay anything else (`Forward`, the envelope removed), or refuse; `Reject`,
`Local` and `Forward` are the types the 2025-11-25 `dispatch` returns too (`decisions`).
What a `Call` then does with its window is `call_plan`; what the answers look like is
`modern_results`; the `Mcp-Param-*` header checks are `modern_headers`.
"""

from __future__ import annotations

from dataclasses import dataclass

from gateway.config import TaskPolicy
from gateway.protocol import jsonrpc
from gateway.protocol.decisions import TASK_METHODS_2026, Forward, Local, Reject
from gateway.protocol.errors import (
    HEADER_MISMATCH,
    INVALID_PARAMS,
    INVALID_REQUEST,
    METHOD_NOT_FOUND,
    MISSING_REQUIRED_CLIENT_CAPABILITY,
    PARSE_ERROR,
    UNSUPPORTED_PROTOCOL_VERSION,
)
from gateway.protocol.modern_headers import decode
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
NAME_BEARING = {
    "tools/call": "name",
    "prompts/get": "name",
    "resources/read": "uri",
    "tasks/get": "taskId",
    "tasks/update": "taskId",
    "tasks/cancel": "taskId",
}
#: The requests an upstream's questions may interrupt: answered in MRTR rounds (spec,
#: "Supported Requests"); the others are relayed over a session that invites no questions.
MRTR_METHODS = frozenset({"tools/call", "prompts/get", "resources/read"})
#: A retry's round parameters (MRTR): for the gateway, never for the upstream.
ROUND_PARAMS = ("inputResponses", "requestState")
#: The base protocol's other requests, relayed over a held upstream session as they are.
FORWARDED = frozenset(
    {
        "resources/list",
        "resources/templates/list",
        "resources/read",
        "prompts/list",
        "prompts/get",
        "completion/complete",
    }
)
#: What the modern path serves today; any other method is 404 with -32601.
SERVED = frozenset({"server/discover", "tools/list", "tools/call", *TASK_METHODS_2026, *FORWARDED})
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
    names it (even on `initialize`, which this generation removed: as the reference server
    does, the header decides), the body carries the per-request protocol version, or the
    method exists only in 2026-07-28 (`server/discover`). A 2025-11-25 client's
    `initialize` carries no such header."""
    if header_version == MODERN_PROTOCOL_VERSION:
        return True
    if isinstance(message, jsonrpc.Request) and message.method in ("initialize", "server/discover"):
        return message.method == "server/discover"
    if isinstance(message, jsonrpc.Request | jsonrpc.Notification):
        meta = (message.params or {}).get("_meta")
        return isinstance(meta, dict) and VERSION_META in meta
    return False


def new_call(message: jsonrpc.Message) -> bool:
    """A 2026-07-28 tools/call that is not the retry of a call waiting for answers."""
    return (
        isinstance(message, jsonrpc.Request)
        and message.method == "tools/call"
        and jsonrpc.param(message, "requestState") is None
    )


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
        if named is not None and decode(headers.get(NAME_HEADER.lower())) != named:
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


@dataclass(frozen=True, slots=True)
class Discover:
    """Answer server/discover from the upstream's initialize result."""


@dataclass(frozen=True, slots=True)
class Call:
    """tools/call, prompts/get or resources/read: run upstream, maybe parked between MRTR
    rounds, maybe (a tools/call) become a task."""

    #: What the upstream is sent (the first round's; a retry continues that call).
    request: jsonrpc.Request
    #: "optional" or "required" when the call may become a task; None when it may not.
    task: str | None
    #: The retry's `requestState` and `inputResponses`, when it is a retry.
    state: object = None
    responses: object = None

    @property
    def retry(self) -> bool:
        """A retry names its round by `requestState`; `inputResponses` without one answer
        nothing the gateway asked, and are ignored (spec: unrecognized input is ignored)."""
        return self.state is not None


def decide(
    checked: ModernRequest, policy: TaskPolicy
) -> Discover | Forward | Call | Local | Reject:
    request = checked.request
    if request.method not in SERVED:
        return Reject(
            METHOD_NOT_FOUND,
            f"method {request.method!r} is not served on the 2026-07-28 path of this gateway",
        )
    if request.method == "server/discover":
        return Discover()
    if request.method in TASK_METHODS_2026:
        if not checked.declares_tasks:
            return Reject(
                MISSING_REQUIRED_CLIENT_CAPABILITY,
                f"{request.method} belongs to the tasks extension: the request must declare it",
                {"requiredCapabilities": {"extensions": {TASKS_EXTENSION: {}}}},
            )
        return Local(request)
    name_key = NAME_BEARING.get(request.method)  # tools/call's and prompts/get's name, a uri
    if name_key is not None and not isinstance(jsonrpc.param(request, name_key), str):
        return Reject(INVALID_PARAMS, f"params.{name_key} must be a string")
    if request.method not in MRTR_METHODS:
        return Forward(upstream_request(request))
    task = None
    if request.method == "tools/call":
        name = jsonrpc.param(request, "name")
        support = policy.support(name) if policy.enabled else "forbidden"
        if support == "required" and not checked.declares_tasks:
            return Reject(
                MISSING_REQUIRED_CLIENT_CAPABILITY,
                f"tool {name!r} runs only as a task: the request must declare the tasks extension",
                {"requiredCapabilities": {"extensions": {TASKS_EXTENSION: {}}}},
            )
        if checked.declares_tasks and support != "forbidden":
            task = support
    responses = jsonrpc.param(request, "inputResponses")
    if responses is not None and not (
        isinstance(responses, dict) and all(isinstance(v, dict) for v in responses.values())
    ):
        return Reject(INVALID_PARAMS, "params.inputResponses must be an object of answers")
    return Call(upstream_request(request), task, jsonrpc.param(request, "requestState"), responses)


def upstream_request(request: jsonrpc.Request) -> jsonrpc.Request:
    """What a legacy upstream is sent: no envelope keys in `_meta`, no legacy `task`, no
    MRTR round parameters."""
    for key in ("task", *ROUND_PARAMS):
        request = jsonrpc.without_param(request, key)
    meta = request.meta
    if not any(key in meta for key in ENVELOPE_META):
        return request
    kept = {key: value for key, value in meta.items() if key not in ENVELOPE_META}
    if kept:
        return jsonrpc.with_param(request, "_meta", kept)
    return jsonrpc.without_param(request, "_meta")


def native_request(request: jsonrpc.Request) -> jsonrpc.Request:
    """What an upstream that speaks 2026-07-28 is sent: the request as it came, less the
    tasks extension in its capabilities (the gateway makes the tasks, so the upstream must
    never answer with one of its own)."""
    meta = request.meta
    capabilities = meta.get(CAPABILITIES_META)
    extensions = capabilities.get("extensions") if isinstance(capabilities, dict) else None
    if not isinstance(extensions, dict) or TASKS_EXTENSION not in extensions:
        return request
    kept = {name: value for name, value in extensions.items() if name != TASKS_EXTENSION}
    assert isinstance(capabilities, dict)
    capabilities = {**capabilities, "extensions": kept}
    return jsonrpc.with_param(request, "_meta", {**meta, CAPABILITIES_META: capabilities})
