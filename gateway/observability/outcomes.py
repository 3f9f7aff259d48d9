"""The short words metrics and traces label how a request or a call ended with."""

from __future__ import annotations

from gateway.protocol import jsonrpc
from gateway.protocol.errors import ResultTooLarge, UpstreamProtocolError, UpstreamTimeout


def request_outcome(status: int) -> str:
    """One word for how a client request ended, from its HTTP status (0: the client left)."""
    if status == 0:
        return "disconnected"
    if status < 400:
        return "ok"
    return "rejected" if status < 500 else "error"


def call_outcome(answer: jsonrpc.Message | None, error: BaseException | None = None) -> str:
    """One word for how an upstream call ended, for the `outcome` label."""
    # An answer first: nearly every call has one, and each check of an error's type (a
    # union made, a miss through the models' ABC check) costs more than the answer's.
    if error is None:
        if type(answer) is jsonrpc.Response:
            return "tool_error" if answer.result.get("isError") is True else "ok"
        return "jsonrpc_error" if isinstance(answer, jsonrpc.ErrorResponse) else "ok"
    if isinstance(error, TimeoutError | UpstreamTimeout):
        return "timeout"
    if isinstance(error, ResultTooLarge):
        return "too_large"
    if isinstance(error, UpstreamProtocolError):
        return "protocol"
    return "connection"
