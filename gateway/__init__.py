"""mcp-task-gateway: adds MCP Tasks (2025-11-25) to MCP servers that lack them."""

__version__ = "0.1.0"
