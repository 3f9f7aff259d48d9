"""decide(): what the gateway does with one client message. Pure: no I/O, no state.

The HTTP layer has already parsed the body into a typed message; this module looks at the
method and whether the request came with a session, and names the path it takes:

    Initialize   open a session: initialize the upstream, answer with our own session id
    Reject       answer an error at once (a 2026-07-28 `server/discover` probe)
    Forward      relay a request to the upstream; the answer comes back on its stream
    Deliver      relay a notification, or the client's answer to a server request

Keeping this a pure function of the message means every routing rule can be tested as a
table, and later paths (tasks run by the gateway, the tasks/* API) slot in as new outcomes
without touching the HTTP or upstream code.
"""

from __future__ import annotations

from dataclasses import dataclass

from . import jsonrpc
from .errors import METHOD_NOT_FOUND


@dataclass(frozen=True, slots=True)
class Initialize:
    request: jsonrpc.Request


@dataclass(frozen=True, slots=True)
class Reject:
    request: jsonrpc.Request
    code: int
    message: str


@dataclass(frozen=True, slots=True)
class Forward:
    request: jsonrpc.Request


@dataclass(frozen=True, slots=True)
class Deliver:
    message: jsonrpc.Notification | jsonrpc.Response | jsonrpc.ErrorResponse


Decision = Initialize | Reject | Forward | Deliver


def decide(message: jsonrpc.Message) -> Decision:
    if not isinstance(message, jsonrpc.Request):
        return Deliver(message)
    if message.method == "initialize":
        return Initialize(message)
    if message.method == "server/discover":
        # A success here would tell 2026-07-28 clients we speak their revision; any error
        # makes them fall back to initialize, which is what we serve.
        return Reject(
            message,
            METHOD_NOT_FOUND,
            "server/discover is not supported: this gateway speaks MCP up to 2025-11-25; "
            "send initialize",
        )
    return Forward(message)
