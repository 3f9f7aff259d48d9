"""One server made of several (`routes[].upstreams`): names, list cursors and capabilities.

A member's tools and prompts reach clients as MEMBER__NAME, and a client's name is split at
its first separator back into the member and the member's own name (a member's name holds
no separator, so a tool's own name may). A route of one member has nothing to tell apart: its
names are the member's own (`Naming`), so it serves what a route of one upstream serves.

A merged list's page holds a page of each member's (so a client that reads only the first
page sees every member), and the gateway's cursor names the members with more to come and
each one's own cursor: no page is held between requests. Capabilities are merged so that a
client is offered what any member offers. Pure: the members' sessions are
`gateway.upstream.fanout`'s.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Mapping, Sequence

from gateway.config import SEPARATOR
from gateway.protocol import jsonrpc

#: The list methods that are merged, and the key each page's items are under.
LISTS = {
    "tools/list": "tools",
    "prompts/list": "prompts",
    "resources/list": "resources",
    "resources/templates/list": "resourceTemplates",
}
#: Lists whose items' names are the member's, and are qualified with it.
NAMED = frozenset({"tools", "prompts"})
#: The capability each list comes with.
CAPABILITY_OF = {"tools": "tools", "prompts": "prompts"} | {
    "resources": "resources",
    "resourceTemplates": "resources",
}
#: The longest cursor taken back from a client (ours are short; a member's rides inside).
MAX_CURSOR = 4096


def qualify(member: str, name: str) -> str:
    return f"{member}{SEPARATOR}{name}"


def split(name: str) -> tuple[str, str] | None:
    """(member, the member's own name) for a client's name, None for one with no member."""
    member, sep, own = name.partition(SEPARATOR)
    return (member, own) if sep and member and own else None


class Naming:
    """How the names of a route's `members` read to clients: qualified, unless it has one."""

    def __init__(self, members: Sequence[str]) -> None:
        self._only = members[0] if len(members) == 1 else None
        self._members = frozenset(members)

    def prefix(self, member: str) -> str:
        """What goes before `member`'s own names: MEMBER__, or nothing on a route of one."""
        return "" if self._only is not None else f"{member}{SEPARATOR}"

    def client(self, member: str, name: str) -> str:
        return f"{self.prefix(member)}{name}"

    def member_of(self, name: str) -> tuple[str, str] | None:
        """(member, its own name) for a client's name; None for a name of no member."""
        if self._only is not None:
            return (self._only, name) if name else None
        where = split(name)
        return where if where is not None and where[0] in self._members else None


def cursor(pending: Sequence[tuple[int, str]]) -> str:
    """The cursor of the page that continues each member `index` listed with more to come,
    at its own cursor."""
    raw = json.dumps([list(entry) for entry in pending], separators=(",", ":"))
    return base64.urlsafe_b64encode(raw.encode()).decode()


def read_cursor(value: object, members: int) -> list[tuple[int, str]] | None:
    """The members a client's cursor continues, each at its own cursor; None for the first
    page (every member from its start).

    Raises:
        ValueError: not a cursor this route gave (the spec's -32602).
    """
    if value is None:
        return None
    if not isinstance(value, str) or not value or len(value) > MAX_CURSOR:
        raise ValueError("invalid cursor")
    try:
        entries = json.loads(base64.urlsafe_b64decode(value.encode()))
    except (ValueError, TypeError, binascii.Error, RecursionError):
        # (RecursionError: nested deeper than the parser goes, within MAX_CURSOR.)
        raise ValueError("invalid cursor") from None
    pending: list[tuple[int, str]] = []
    for entry in entries if isinstance(entries, list) else [None]:
        if not (isinstance(entry, list) and len(entry) == 2):
            raise ValueError("invalid cursor")
        index, inner = entry
        if type(index) is not int or not 0 <= index < members or not isinstance(inner, str):
            raise ValueError("invalid cursor")
        if pending and index <= pending[-1][0]:
            raise ValueError("invalid cursor")
        pending.append((index, inner))
    if not pending:
        raise ValueError("invalid cursor")
    return pending


def qualified_page(
    result: jsonrpc.JsonObject, key: str, member: str, naming: Naming | None = None
) -> list[object]:
    """A member's page of `key` items as clients see them: names qualified where they are
    the member's; items that are not objects with a string name are left out."""
    items = result.get(key)
    if not isinstance(items, list):
        return []
    if key not in NAMED:
        return [item for item in items if isinstance(item, dict)]
    page: list[object] = []
    for item in items:
        if isinstance(item, dict) and isinstance(name := item.get("name"), str) and name:
            shown = naming.client(member, name) if naming is not None else qualify(member, name)
            page.append({**item, "name": shown})
    return page


def merged_capabilities(answers: Sequence[jsonrpc.JsonObject]) -> jsonrpc.JsonObject:
    """What a client is offered: each capability any member offers, with each flag (such
    as `listChanged`) true if any member's is."""
    merged: dict[str, object] = {}
    for capabilities in answers:
        for name, value in capabilities.items():
            if not isinstance(value, dict):
                continue
            into = merged.setdefault(name, {})
            assert isinstance(into, dict)
            for flag, setting in value.items():
                if setting is True or flag not in into:
                    into[flag] = setting
    return merged


def merged_initialize(
    route: str, version: str, members: Mapping[str, jsonrpc.JsonObject], gateway_version: str
) -> jsonrpc.JsonObject:
    """The initialize result of the route's one server, from each member's that answered."""
    capabilities = merged_capabilities(
        [c for r in members.values() if isinstance(c := r.get("capabilities"), dict)]
    )
    for name in ("tools", "prompts", "resources"):
        offered = capabilities.get(name)
        if isinstance(offered, dict):
            # Members come and go: the route's lists change even when no member's does.
            capabilities[name] = {**offered, "listChanged": True}
    result: dict[str, object] = {
        "protocolVersion": version,
        "capabilities": capabilities,
        "serverInfo": {"name": route, "version": gateway_version},
    }
    notes = [
        f"{name}: {text}"
        for name, answer in members.items()
        if isinstance(text := answer.get("instructions"), str) and text
    ]
    if notes:
        result["instructions"] = "\n\n".join(notes)
    return result


def offers(capabilities: jsonrpc.JsonObject, key: str) -> bool:
    """Whether a member's capabilities offer the list `key` (resources for templates)."""
    return isinstance(capabilities.get(CAPABILITY_OF[key]), dict)


def sessions_text(ids: Mapping[str, tuple[str, str | None]]) -> str | None:
    """Each member's upstream session id and protocol version, as the one string a session's
    record keeps for its upstream session (None when no member has one)."""
    return json.dumps({m: list(v) for m, v in ids.items()}, separators=(",", ":")) if ids else None


def read_sessions(text: str) -> dict[str, tuple[str, str]]:
    """What `sessions_text` wrote; whatever else it finds is nobody's (an empty map)."""
    try:
        ids = json.loads(text)
    except (ValueError, RecursionError):
        return {}
    found: dict[str, tuple[str, str]] = {}
    for member, entry in ids.items() if isinstance(ids, dict) else ():
        if isinstance(entry, list) and len(entry) == 2 and all(isinstance(e, str) for e in entry):
            found[member] = (entry[0], entry[1])
    return found
