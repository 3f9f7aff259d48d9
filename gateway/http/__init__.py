"""The client side: where a request enters the gateway and its answer leaves.

A request meets, in order:

* `listen` and `server`: the port, and aiohttp's server with a public-facing gateway's
  connection rules (head and body deadlines, connection caps, 431 for huge headers, after
  which `lingering` drains what the client still sends before it closes);
* `middleware`: metrics, the Host and Origin checks, and the one place exceptions become
  responses;
* `urls` and `routing`: the URL table: /livez, /readyz, /healthz and /metrics, then one
  catch-all that finds the route by path in the `RouteTable` the last reload left (aiohttp's
  router is frozen once serving), OAuth metadata documents included;
* `admission`: credentials, rate, headers, the body (`request_body`), the session the
  request names;
* `endpoint`: hands the parsed message to `gateway.protocol.dispatch`, then acts on the
  decision: open a session, relay through `gateway.session`, start a task in
  `gateway.tasks`, or answer a tasks/* request from the task API; `endpoint_session` serves
  a session's GET (its stream) and DELETE (its end);
* `endpoint_modern`: a session-less 2026-07-28 request instead, checked and decided by
  `gateway.protocol.modern`; `modern_tools` runs its calls (MRTR rounds, tasks of the
  extension) and `modern_stream` writes their progress and log messages;
* `sse`: a session's event stream written to the connection, when the answer is a stream.

`health` answers the probes cheaply; `drain` is what the first SIGTERM starts (new work
refused, running tasks let finish), and `shutdown` the app's stop: that drain, then the
interrupt of what still runs. `admin` (with `admin_query`) is the operators' API on an address
of its own, never the clients' port. Nothing below this package knows about HTTP requests.
"""
