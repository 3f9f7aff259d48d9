"""Calls made for a caller who brings no session (2026-07-28, or the gateway itself when it
runs a lost task again), and the tasks they become.

A 2026-07-28 request stands alone, but a legacy upstream needs a session: `held.py` holds
upstream sessions for these callers, leased per call, exclusive when the call invites
questions, shared per route and principal otherwise, never shared by anonymous callers;
`held_session.py` is one such session, which hands the upstream's questions to their call.
`call.py` is one call on such a session, from its first request through its MRTR rounds
(`parked.py` keeps it between them and signs the `requestState` that finds it again);
`direct.py` is the same call sent straight to an upstream that speaks 2026-07-28 itself.
`task_host.py` is the runner's seam when such a call becomes a task, its questions stored
as the task's input requests (`tasks.inputs`); `task_api.py` answers the extension's task
methods (tasks/get, update, cancel).

Below `http/` (which decides, `protocol.call_plan`, what becomes of each call) and above
`tasks/` and `upstream/`; the 2025-11-25 session (`session/`) is a sibling.
"""
