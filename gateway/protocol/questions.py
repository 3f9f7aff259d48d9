"""The pure rules of a question an upstream asks the client during a task's call.

Elicitation, sampling and roots requests are asked of the client in the middle of a call. A
task's question carries the related-task meta so that the client knows which task waits on
it; a question nobody answers (past `tasks.input_timeout_seconds`, or once the session that
would have answered it ended) still needs an answer upstream, the default one here. Both
generations' question paths (`session.questions`, `calls.task_host`) use these.
"""

from __future__ import annotations

from typing import TypeVar

from gateway.protocol import jsonrpc
from gateway.protocol.errors import INTERNAL_ERROR
from gateway.protocol.rewrite import RELATED_TASK


def default_answer(up_id: jsonrpc.RequestId, method: str, reason: str) -> jsonrpc.Answer:
    """What the upstream is told when nobody answers its request."""
    if method == "elicitation/create":
        # Elicitation has a way to say "nobody answered": the user dismissed the dialog.
        return jsonrpc.Response(jsonrpc="2.0", id=up_id, result={"action": "cancel"})
    return jsonrpc.error_response(up_id, INTERNAL_ERROR, reason)


_Related = TypeVar("_Related", jsonrpc.Request, jsonrpc.Notification)


def related_to_task(message: _Related, task_id: str) -> _Related:
    """The message with `_meta["io.modelcontextprotocol/related-task"]` (spec: MUST)."""
    return jsonrpc.with_meta(message, RELATED_TASK, {"taskId": task_id})
