"""The client side: where a request enters the gateway and its answer leaves.

A request meets, in order:

* `listen` and `server`: the port, and aiohttp's server with a public-facing gateway's
  connection rules (head and body deadlines, connection caps, 431 for huge headers);
* `middleware`: metrics, the Host and Origin checks, and the one place exceptions become
  responses;
* `urls`: the URL table, one Streamable HTTP endpoint per configured route plus /healthz
  and /metrics;
* `admission`: credentials, rate, headers, the body, the session the request names;
* `endpoint`: hands the parsed message to `gateway.protocol.dispatch`, then acts on the
  decision: open a session, relay through `gateway.session`, start a task in
  `gateway.tasks`, or answer a tasks/* request from the task API;
* `endpoint_modern`: a session-less 2026-07-28 request instead, checked and decided by
  `gateway.protocol.modern`, answered over an upstream session `gateway.session.held` holds;
* `sse`: a session's event stream written to the connection, when the answer is a stream.

`health` answers /healthz cheaply. Nothing below this package knows about HTTP requests.
"""
