"""How the log names where things are: a listener's base URL, and a route's line, the same at
start-up and when a reload adds the route:

    route demo: http://127.0.0.1:8080/demo/mcp -> stdio /usr/bin/python3
    route work: http://127.0.0.1:8080/work/mcp -> search=streamable_http https://s.internal/mcp,
                files=stdio npx     (one line: a route of members names each)

An upstream is named by its transport and `location`: an HTTP URL without credentials, query or
fragment, a stdio command's program without its arguments (either may hold secrets).
"""

from __future__ import annotations

from gateway.config import ListenConfig, RouteConfig


def url_host(host: str) -> str:
    """`host` as a URL writes it: an IPv6 address in brackets, and the empty host (every
    address) as 0.0.0.0, as for its IPv4 half: `http://:8080` is no URL."""
    return f"[{host}]" if ":" in host else host or "0.0.0.0"


def base_url(listen: ListenConfig) -> str:
    """Where a listener serves, e.g. `http://127.0.0.1:8080`."""
    return f"http://{url_host(listen.host)}:{listen.port}"


def route_line(route: RouteConfig, base: str) -> str:
    """A route's full URL under `base`, and where its calls go."""
    return f"route {route.name}: {base}{route.http_path} -> {upstreams(route)}"


def upstreams(route: RouteConfig) -> str:
    """Where a route's calls go: `stdio python`, or each member's, `search=streamable_http ...`."""
    if route.upstreams is None:
        return f"{route.single.transport} {route.single.location}"
    return ", ".join(f"{m.name}={m.transport} {m.location}" for m in route.upstreams)
