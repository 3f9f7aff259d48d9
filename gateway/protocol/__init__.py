"""The protocol: what the gateway decides about a message, with no I/O at all.

`jsonrpc` turns bytes into typed envelopes (and refuses what could not be stored or relayed
faithfully). Each generation has one decision, made once per request: `dispatch.decide()`
(2025-11-25) names the path a client message takes (Initialize, Reject, RunAsTask, Local,
Forward, Deliver); `modern.decide()` (2026-07-28) does the same for a session-less request,
and `call_plan.plan()` says whether its call is answered at once, parked between MRTR rounds
or made a task. `decisions` holds the types both generations share. `rewrite` makes the few
changes the gateway makes to what crosses it (the tasks capability, `execution.taskSupport`,
CreateTaskResult, tasks/result with related-task meta); `outcome` is the raw result of an
upstream call, which tasks are stored as; `errors` is the exception tree, each class knowing
its HTTP status and JSON-RPC code; `versions` the protocol revisions served. Pure: no
aiohttp, no store, no sessions, so every rule is a row in a table test.
"""
