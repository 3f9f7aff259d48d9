"""The bundled demo: a task-unaware MCP server to put the gateway in front of.

Nothing in the gateway imports it; the default run (no --config) starts it as a stdio child,
`python -m gateway.demo`, like any upstream. `server` is a legacy MCP server core that ignores
`params.task` (as servers written before MCP Tasks do); `stdio` serves it on stdin/stdout.
"""
