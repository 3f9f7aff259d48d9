"""A route's curated tools (`routes[].tools`), applied where tools cross the gateway: the
tools/list answers a client gets (filtered page by page, renamed, described) and the
tools/call requests the upstream gets (under the upstream's name, or refused as unknown).

A client sees a tool under its client name: `rename[upstream_name]`, or else the upstream's
own name unless that name is a rename target (the renamed tool wins; the other is hidden,
`shadowed` names it for a WARNING). It sees it only if the client name matches `allow`
(when given) and no `deny` glob. Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable
from fnmatch import fnmatchcase

from gateway.config import RouteConfig
from gateway.config.tools import ToolsConfig
from gateway.protocol import jsonrpc, rewrite
from gateway.protocol.decisions import Reject
from gateway.protocol.errors import INVALID_PARAMS


class Curation:
    """The tools one route shows, and the names its calls go upstream under."""

    def __init__(self, config: ToolsConfig) -> None:
        self.config = config
        #: Whether this route curates at all (read on every tools/list and tools/call).
        self.active = config.curated
        self._rename = dict(config.rename)
        self._upstream_of = {target: source for source, target in config.rename.items()}

    def client_name(self, upstream_name: str) -> str | None:
        """What a client sees a tool listed as `upstream_name` as; None: hidden."""
        name = self.renamed(upstream_name)
        return name if name is not None and self.shows(name) else None

    def renamed(self, upstream_name: str) -> str | None:
        """The client's name for a tool listed as `upstream_name`, before `allow` and `deny`;
        None: shadowed by a renamed tool."""
        name = self._rename.get(upstream_name)
        if name is None:
            if upstream_name in self._upstream_of:
                return None
            name = upstream_name
        return name

    def upstream_name(self, client_name: str) -> str | None:
        """The upstream's name for what a client calls `client_name`; None: no such tool."""
        if not self.shows(client_name):
            return None
        source = self._upstream_of.get(client_name)
        if source is not None:
            return source
        return None if client_name in self._rename else client_name

    def shows(self, client_name: str) -> bool:
        allow, deny = self.config.allow, self.config.deny
        if allow is not None and not any(fnmatchcase(client_name, glob) for glob in allow):
            return False
        return not any(fnmatchcase(client_name, glob) for glob in deny)

    def hides_everything(self) -> bool:
        """Whether no name at all can be shown (an empty `allow`, or a `deny` of `*`)."""
        allow = self.config.allow
        return (allow is not None and not allow) or "*" in self.config.deny

    def shadowed(self, answer: jsonrpc.Response) -> list[str]:
        """Upstream tools in a tools/list page hidden because a rename took their name."""
        return [
            name
            for name in rewrite.tool_names(answer)
            if name in self._upstream_of and name not in self._rename
        ]

    def tools_list(self, answer: jsonrpc.Response) -> jsonrpc.Response:
        """A tools/list page as the client sees it: hidden tools left out (the page may be
        shorter, or empty; its nextCursor is kept), the rest renamed and described."""
        if not self.active:
            return answer
        tools = answer.result.get("tools")
        if not isinstance(tools, list):
            return answer
        shown = []
        for tool in tools:
            if not isinstance(tool, dict) or not isinstance(tool.get("name"), str):
                continue
            name = self.client_name(tool["name"])
            if name is None:
                continue
            tool = {**tool, "name": name}
            description = self.config.describe.get(name)
            if description is not None:
                tool["description"] = description
            shown.append(tool)
        return answer.model_copy(update={"result": {**answer.result, "tools": shown}})

    def call(self, request: jsonrpc.Request) -> jsonrpc.Request | Reject:
        """A tools/call as the upstream gets it, or the refusal of an unknown tool (what the
        2025-11-25 tools page shows for one: -32602, "Unknown tool: NAME")."""
        if not self.active:
            return request
        name = jsonrpc.param(request, "name")
        if not isinstance(name, str):
            return request
        upstream = self.upstream_name(name)
        if upstream is None:
            return Reject(INVALID_PARAMS, f"Unknown tool: {name}")
        if upstream == name:
            return request
        return jsonrpc.with_param(request, "name", upstream)


def unmatched(route: RouteConfig, listed: Iterable[str]) -> list[str]:
    """What the route's configuration names that no tool it lists matches, each as a line
    fit for a WARNING: a `tools.rename` key not among the upstream's names, and a client name
    (`tools.describe`, `tasks.tools`, `tasks.repeatable`, `tool_scopes`) no client sees."""
    curation = Curation(route.tools)
    upstream = set(listed)
    named = {name for u in upstream if (name := curation.renamed(u)) is not None}
    seen = {name for name in named if curation.shows(name)}
    repeatable = () if route.tasks.repeatable == "annotated" else route.tasks.repeatable
    lines = [
        f"route {route.name}: tools.rename names {name!r}, which matches no tool its upstream lists"
        for name in route.tools.rename
        if name not in upstream
    ]
    # A glob that matches no name is most often an upstream name where the client's is meant.
    for key, globs in (("tools.allow", route.tools.allow or ()), ("tools.deny", route.tools.deny)):
        lines += [
            f"route {route.name}: {key} has {glob!r}, which matches no tool name a client "
            "could see (names here are the client's, after tools.rename)"
            for glob in globs
            if not any(fnmatchcase(name, glob) for name in named)
        ]
    if upstream and not seen:
        lines.append(
            f"route {route.name}: tools.allow and tools.deny hide every tool its upstream lists"
        )
    for key, names in (
        ("tools.describe", route.tools.describe),
        ("tasks.tools", route.tasks.tools),
        ("tasks.repeatable", repeatable),
        ("tool_scopes", route.tool_scopes),
    ):
        lines += [
            f"route {route.name}: {key} names {name!r}, which matches no tool a client sees"
            for name in names
            if name not in seen
        ]
    return lines


def named(request: jsonrpc.Request, name: str | None) -> jsonrpc.Request:
    """`request` calling `name` (the upstream's), or as it is if None."""
    return request if name is None else jsonrpc.with_param(request, "name", name)
