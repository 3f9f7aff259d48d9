"""The integrity harness: every task of a run of concurrent clients, checked against the contract
of DESIGN.md, "What a task's result must be, under load". A script, not a pytest test::

    .venv/bin/python -m tests.integrity            # the long form (about ten minutes)
    .venv/bin/python -m tests.integrity --short    # what CI runs (about a minute)

Real SDK servers upstream, each with six tools that put the call's nonce in their answers
(`instant`, `slow` with progress, `ask` with an elicitation, `fail` with an isError result,
`error` with a JSON-RPC error, `hang` until cancelled): the Python mcp 2.3 server in stateful
mode over Streamable HTTP (`upstream_py.py`) and as a stdio child (each forked from a server
that imported mcp once, `stdio_fork.py`), and the TypeScript SDK 1.32.2 server
(`upstream_ts.mjs`). Each upstream is first asked directly (`probe.py`): its answers are the
reference. Then two topologies: one gateway on SQLite with the three upstreams, and three
replicas on one PostgreSQL database with the HTTP ones, the clients' requests spread over the
replicas with no stickiness, one replica killed with SIGKILL and another restarted with SIGTERM
mid-run. In each, a route per upstream and the member route (`routes[].upstreams`,
docs/members.md) of the same upstreams, its tools called as MEMBER__TOOL (`py-http__slow`) in
the same random workload. Clients of both generations (`legacy.py`, `modern.py`) make a random
mix of calls; `checks.py` judges every one of them alike (a member's call against its member's
own answers and runs); `report.py` prints the counts. Exit status 1 on any violation.
"""
