"""Behind a reverse proxy: the client's address, scheme and host, as the proxy says.

A proxy's headers are believed only when the TCP peer is one of `http.trusted_proxies`;
anyone else could write them. `Forwarded` (RFC 7239) wins over the `X-Forwarded-*` family.
The client is found from the right: each proxy appends the address it saw, so the rightmost
address that is not itself a trusted proxy is the first one a trusted hop vouches for, and
whatever stands left of it is the client's own say, not to be believed.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence
from dataclasses import dataclass

from aiohttp import web
from multidict import CIMultiDict, CIMultiDictProxy

Headers = CIMultiDictProxy[str] | CIMultiDict[str]
Network = ipaddress.IPv4Network | ipaddress.IPv6Network


@dataclass(frozen=True, slots=True)
class Forwarded:
    """What the trusted proxies say of a request (None: they said nothing of it)."""

    client: str | None
    scheme: str | None
    host: str | None


def trusted(address: str | None, networks: Sequence[Network]) -> bool:
    if not address or not networks:
        return False
    try:
        ip = ipaddress.ip_address(address.split("%", 1)[0])
    except ValueError:
        return False
    return any(ip in network for network in networks)


def apply(request: web.Request, networks: Sequence[Network]) -> web.Request:
    """The request as its client sent it to the first trusted proxy, when the peer is one."""
    if not networks or not trusted(request.remote, networks):
        return request
    said = read(request.headers, networks)
    scheme = said.scheme if said.scheme in ("http", "https") else request.scheme
    if not said.host:
        return request.clone(remote=said.client or request.remote or "", scheme=scheme)
    # The Host header too, so that every reader of it (the Host check) sees the client's.
    headers = CIMultiDict(request.headers)
    headers["Host"] = said.host
    return request.clone(
        remote=said.client or request.remote or "",
        scheme=scheme,
        host=said.host,
        headers=CIMultiDictProxy(headers),
    )


def read(headers: Headers, networks: Sequence[Network]) -> Forwarded:
    """The client, scheme and host from `Forwarded`, else `X-Forwarded-*`."""
    elements = [
        _pairs(element)
        for value in headers.getall("Forwarded", [])
        for element in _split(value, ",")
        if element.strip()
    ]
    if elements:
        chain = [_address(pairs.get("for", "")) for pairs in elements]
        index = _first_untrusted(chain, networks)
        chosen = elements[index]
        return Forwarded(chain[index], chosen.get("proto", "").lower() or None, chosen.get("host"))
    chain = [
        _address(part)
        for value in headers.getall("X-Forwarded-For", [])
        for part in value.split(",")
        if part.strip()
    ]
    client = chain[_first_untrusted(chain, networks)] if chain else None
    proto = _last(headers, "X-Forwarded-Proto")
    return Forwarded(client, proto.lower() if proto else None, _last(headers, "X-Forwarded-Host"))


def _first_untrusted(chain: list[str], networks: Sequence[Network]) -> int:
    """The rightmost hop that is not a trusted proxy (the leftmost if all of them are)."""
    for index in range(len(chain) - 1, -1, -1):
        if not trusted(chain[index], networks):
            return index
    return 0


def _last(headers: Headers, name: str) -> str | None:
    """The value the nearest proxy added (the last of a comma-separated list)."""
    values = [v.strip() for value in headers.getall(name, []) for v in value.split(",")]
    values = [v for v in values if v]
    return values[-1] if values else None


def _split(text: str, separator: str) -> list[str]:
    """`text` split at `separator` outside double quotes."""
    parts: list[str] = []
    current: list[str] = []
    quoted = False
    for char in text:
        if char == '"':
            quoted = not quoted
        if char == separator and not quoted:
            parts.append("".join(current))
            current = []
        else:
            current.append(char)
    parts.append("".join(current))
    return parts


def _pairs(element: str) -> dict[str, str]:
    pairs: dict[str, str] = {}
    for pair in _split(element, ";"):
        name, equals, value = pair.strip().partition("=")
        if equals:
            pairs[name.strip().lower()] = value.strip().strip('"')
    return pairs


def _address(node: str) -> str:
    """An address without its port or brackets; anything else (`unknown`, `_hidden`) as is."""
    node = node.strip().strip('"')
    if node.startswith("["):
        return node[1 : node.find("]")] if "]" in node else node
    if node.count(":") == 1:  # IPv4 with a port
        return node.split(":", 1)[0]
    return node
