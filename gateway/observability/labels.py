"""The label values that come from outside, each from a closed set: the client-facing
methods with a label of their own, and the tool names each route's upstream listed (up to a
cap per route). Anything else is counted as `other`, so no client or upstream can make the
registry grow without bound.
"""

from __future__ import annotations

#: Client-facing methods with a label of their own; the rest are "other".
METHODS = frozenset(
    {
        "initialize", "ping", "server/discover", "tools/list", "tools/call", "tasks/get",
        "tasks/result", "tasks/list", "tasks/cancel", "tasks/update", "resources/list",
        "resources/read", "resources/templates/list", "resources/subscribe",
        "resources/unsubscribe", "subscriptions/listen", "prompts/list", "prompts/get",
        "completion/complete", "logging/setLevel", "notification", "response", "GET", "DELETE",
    }
)  # fmt: skip
_MAX_TOOLS_PER_ROUTE = 200


def method(name: str) -> str:
    """`name` as the `method` label: itself if `METHODS` lists it, else "other"."""
    return name if name in METHODS else "other"


class ToolNames:
    """The tool names each route's upstream listed: the values of its `tool` label."""

    def __init__(self) -> None:
        self._tools: dict[str, set[str]] = {}

    def add_route(self, route: str) -> bool:
        """Whether `route` is new: its tools are learnt from now on."""
        if route in self._tools:
            return False
        self._tools[route] = set()
        return True

    def learn(self, route: str, names: list[str]) -> None:
        """Tool names an upstream listed become label values (up to a cap per route)."""
        known = self._tools.get(route)
        if known is not None:
            for name in names:
                if len(known) >= _MAX_TOOLS_PER_ROUTE:
                    break
                known.add(name)

    def tool(self, route: str, name: object) -> str:
        """`name` as the `tool` label of `route`: itself if its upstream listed it, else
        "other"."""
        known = self._tools.get(route)
        return name if isinstance(name, str) and known and name in known else "other"
