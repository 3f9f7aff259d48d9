"""The MCP protocol revisions this gateway speaks to clients, oldest first.

The session-based generation (2024-11-05 to 2025-11-25, opened by `initialize`) and the
session-less 2026-07-28 generation (`gateway.protocol.modern`) are served on one endpoint;
a route may switch either off (`routes[].generations`).

Upstreams may speak any session-based revision; the two sides negotiate independently
(DESIGN, decision 2).
"""

SUPPORTED_PROTOCOL_VERSIONS = ("2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25")
LATEST_PROTOCOL_VERSION = SUPPORTED_PROTOCOL_VERSIONS[-1]
#: The session-less generation, served by `gateway.protocol.modern`.
MODERN_PROTOCOL_VERSION = "2026-07-28"
#: The names `routes[].generations` takes: the newest revision of each generation.
LEGACY_GENERATION = LATEST_PROTOCOL_VERSION
GENERATIONS = (LEGACY_GENERATION, MODERN_PROTOCOL_VERSION)


def served_versions(generations: tuple[str, ...]) -> list[str]:
    """Every protocol version a route with these generations answers, oldest first."""
    versions = list(SUPPORTED_PROTOCOL_VERSIONS) if LEGACY_GENERATION in generations else []
    if MODERN_PROTOCOL_VERSION in generations:
        versions.append(MODERN_PROTOCOL_VERSION)
    return versions
