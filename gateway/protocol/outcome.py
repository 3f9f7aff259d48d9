"""What an upstream call produced, kept as it came: the raw outcome tasks are stored as.

Each protocol generation derives what its clients see from it (DESIGN, decision 9), so it
lives here, where both the task store and the rewrites toward clients may use it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from gateway.protocol.jsonrpc import JsonObject


@dataclass(frozen=True, slots=True)
class Outcome:
    """What the upstream call produced: its result object or its JSON-RPC error object.

    A dataclass, as a `Task` is: made by the gateway from an answer already parsed, or from
    its own rows, so pydantic's validation and its attribute hook would buy nothing."""

    kind: Literal["result", "error"]
    body: JsonObject

    @classmethod
    def error(cls, code: int, message: str, data: Any = None) -> Outcome:
        body: JsonObject = {"code": code, "message": message}
        if data is not None:
            body["data"] = data
        return cls(kind="error", body=body)
