"""The 2025-11-25 session: what `http/` hands a message to once it knows the session.

`registry.py` holds the live sessions (in the table of `live.py`): it creates them within the
gateway's and the route's caps, finds one per request, and ends the idle. A session it does not
hold is rebuilt from its stored record (`records.py`), after a restart or, with replicas, one
that another replica opened. A `Session` (`session.py`) has the gateway's own `MCP-Session-Id`
and one upstream client. Forwarded requests go upstream through its `Calls` (`calls.py`) under
ids of the gateway's choosing, and so do its tasks' calls, which the runner starts through the
session's `SessionTaskHost` (`task_host.py`). Its `Streams` (`streams.py`) carry everything
toward the client, resumably: the GET stream, one stream per POST, one per open tasks/result.
Its `Questions` (`questions.py`) hold what the upstream asks the client: plain server requests,
and the questions that make a task `input_required` (one such question, where it is delivered
and the gateway's own answers upstream: `question.py`; the task's wait for them: `waiting.py`).
Questions kept in the store (`tasks.inputs`) meet the session in `stored_questions.py`: the
rows of tasks whose call runs elsewhere, relayed to this client, and with replicas this
session's own.

A message from the upstream finds its stream through the upstream id it relates to (the
request it belongs to, its progress token, or on stdio and HTTP+SSE the only call in
flight): that call's stream while open; for a task's call the task's open tasks/result
stream; otherwise the GET stream. The client's answer to a server request comes back under
the downstream id the session gave it, and goes upstream under the upstream's own.

`task_api.py` answers the 2025-11-25 task methods (tasks/get, result, list, cancel) for
the session's caller; a blocking tasks/result relays the task's questions on its stream.

The 2026-07-28 generation brings no session: its calls are `gateway.calls`'.
"""
