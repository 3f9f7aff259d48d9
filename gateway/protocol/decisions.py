"""What the gateway may do with a client request, in either generation: the decision types
both `dispatch` (2025-11-25) and `modern` (2026-07-28) return where they mean the same
thing, and the task API's methods of each. Generations differ in their wire; what the
gateway does with a request they share.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Any

from gateway.protocol import jsonrpc

#: Answered from the store by the task API, never sent upstream. The tasks extension
#: (2026-07-28) has tasks/update, and no tasks/result or tasks/list.
TASK_METHODS_2025 = frozenset({"tasks/get", "tasks/result", "tasks/list", "tasks/cancel"})
TASK_METHODS_2026 = frozenset({"tasks/get", "tasks/update", "tasks/cancel"})


class Rewrite(Enum):
    TOOLS_LIST = "tools/list"


@dataclass(frozen=True, slots=True)
class Reject:
    """Answer the request with this JSON-RPC error at once."""

    code: int
    message: str
    data: Any = None


@dataclass(frozen=True, slots=True)
class Forward:
    """Relay `request` (as the generation's rules made it) to the upstream; the answer comes
    back rewritten when `rewrite` says so."""

    request: jsonrpc.Request
    rewrite: Rewrite | None = None


@dataclass(frozen=True, slots=True)
class Local:
    """A method of the task API of the caller's generation: answered from the store."""

    request: jsonrpc.Request
