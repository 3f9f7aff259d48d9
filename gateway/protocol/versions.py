"""The MCP protocol revisions this gateway speaks to clients, oldest first.

Upstreams may speak any of them; the two sides negotiate independently (DESIGN, decision 2).
"""

SUPPORTED_PROTOCOL_VERSIONS = ("2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25")
LATEST_PROTOCOL_VERSION = SUPPORTED_PROTOCOL_VERSIONS[-1]
