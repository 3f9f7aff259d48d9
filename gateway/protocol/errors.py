"""The gateway's exceptions, each knowing its HTTP status and JSON-RPC code.

    GatewayError                      (-32603, 500)
    ├── HttpRequestError              transport-level rejection of a client request
    │   ├── ParseError                (-32700, 400) body is not JSON
    │   ├── InvalidRequest            (-32600, 400) not one JSON-RPC message, batching, bad header
    │   ├── SessionRequired           (-32600, 400) non-initialize request without MCP-Session-Id
    │   ├── SessionNotFound           (-32600, 404) unknown, ended or foreign session id
    │   ├── ForbiddenOrigin           (-32600, 403) Origin not on the allow-list
    │   ├── NotAcceptable             (-32600, 406) Accept header lacks what we answer with
    │   ├── UnsupportedMediaType      (-32600, 415) Content-Type is not application/json
    │   ├── PayloadTooLarge           (-32600, 413) body over limits.max_body_bytes
    │   ├── RequestTimeout            (-32600, 408) body slower than http.body_timeout_seconds
    │   ├── MisdirectedRequest        (-32600, 421) Host not on http.allowed_hosts (DNS rebinding)
    │   ├── UnsupportedVersion        (-32022, 400) a session-less request pins a version we lack
    │   ├── MethodNotAllowed          (-32600, 405) GET/DELETE without a session on a modern route
    │   ├── Unauthorized              (-32600, 401) missing or invalid credentials
    │   ├── LimitExceeded             (-32600, 429) a per-principal limit (rate, sessions)
    │   └── CapacityExceeded          (-32603, 503) a configured cap (sessions, children) is reached
    ├── security.errors.IdentityProviderUnavailable (-32603, 503) a jwks_url key set is unfetchable
    ├── security.errors.InsufficientScope (-32600, 403) a token lacks a scope the route or tool asks
    ├── StoreUnreachable              (-32603, 503) the shared task store cannot be reached now
    └── UpstreamError                 the upstream could not give an answer (plane a)
        ├── UpstreamUnavailable       connection refused/reset, child died, stream ended early
        │   └── UpstreamRefused       it answered, but with an HTTP error status (401, 403, ...)
        │       └── UpstreamNotModern it refused the 2026-07-28 wire as a 2025-11-25 server does
        ├── UpstreamTimeout           no answer within the route's timeout
        └── UpstreamProtocolError     the upstream answered with something that is not MCP
            └── ResultTooLarge        its message is over the route's max_result_bytes

An upstream JSON-RPC error (plane b) and an `isError` tool result (plane c) are messages,
not exceptions: they are relayed as they came.

`TaskError` stands apart: a tasks/* request that names no task the caller may see (or asks
for the impossible, like cancelling a finished task) is answered with -32602 under the
request's own id, in an ordinary HTTP 200 response; its `TaskLimitReached` (a caller at
limits.active_tasks_per_principal) with -32000.
"""

from __future__ import annotations

from typing import Any

PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603
#: The 2026-07-28 revision's codes: a header disagrees with the body, a request lacks a
#: client capability the server needs, a protocol version the server does not speak.
HEADER_MISMATCH = -32020
MISSING_REQUIRED_CLIENT_CAPABILITY = -32021
UNSUPPORTED_PROTOCOL_VERSION = -32022
#: JSON-RPC's range for implementation-defined server errors starts here.
SERVER_ERROR = -32000


class GatewayError(Exception):
    code = INTERNAL_ERROR
    http_status = 500

    def __init__(
        self, message: str, data: Any = None, headers: dict[str, str] | None = None
    ) -> None:
        super().__init__(message)
        self.message = message
        self.data = data
        #: HTTP headers the response must carry (WWW-Authenticate, Retry-After).
        self.headers = headers or {}


class HttpRequestError(GatewayError):
    code = INVALID_REQUEST
    http_status = 400


class ParseError(HttpRequestError):
    code = PARSE_ERROR


class InvalidRequest(HttpRequestError):
    pass


class SessionRequired(HttpRequestError):
    pass


class SessionNotFound(HttpRequestError):
    http_status = 404


class ForbiddenOrigin(HttpRequestError):
    http_status = 403


class NotAcceptable(HttpRequestError):
    http_status = 406


class UnsupportedMediaType(HttpRequestError):
    http_status = 415


class PayloadTooLarge(HttpRequestError):
    http_status = 413


class RequestTimeout(HttpRequestError):
    http_status = 408


class MisdirectedRequest(HttpRequestError):
    http_status = 421


class UnsupportedVersion(HttpRequestError):
    code = UNSUPPORTED_PROTOCOL_VERSION


class MethodNotAllowed(HttpRequestError):
    http_status = 405


class Unauthorized(HttpRequestError):
    http_status = 401


class LimitExceeded(HttpRequestError):
    http_status = 429


class CapacityExceeded(HttpRequestError):
    code = INTERNAL_ERROR
    http_status = 503


class StoreUnreachable(GatewayError):
    """The shared task store cannot be reached now (its server restarts, the network is
    cut): 503, so that the client retries, rather than a defect of ours."""

    http_status = 503


class UpstreamError(GatewayError):
    """The upstream gave no usable answer; relayed to the client as a -32603 error."""


class UpstreamUnavailable(UpstreamError):
    pass


class UpstreamRefused(UpstreamUnavailable):
    """The upstream is there, but refused the request (an HTTP error status): a reachability
    check tells it from one that cannot be reached."""


class UpstreamNotModern(UpstreamRefused):
    """A request on the 2026-07-28 wire refused as a 2025-11-25 server refuses it (it wants a
    session, or names the version unsupported): the upstream does not speak 2026-07-28."""


class UpstreamTimeout(UpstreamError):
    pass


class UpstreamProtocolError(UpstreamError):
    pass


class ResultTooLarge(UpstreamProtocolError):
    """The upstream's message is larger than the route's max_result_bytes."""

    @classmethod
    def past(cls, what: str, limit: int) -> ResultTooLarge:
        """`what` ("the upstream's answer is larger", say) than `limit` bytes."""
        return cls(
            f"{what} than {limit} bytes (routes[].max_result_bytes): it is neither relayed "
            "nor stored"
        )


class TaskError(Exception):
    """A tasks/* request the task API refuses with -32602 (Invalid params)."""

    code = INVALID_PARAMS

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class TaskLimitReached(TaskError):
    """The caller already has as many live tasks as limits.active_tasks_per_principal allows."""

    code = SERVER_ERROR
