"""`UpstreamClient` at the transport seam: what makes an upstream busy (and so never stopped
for idleness), and the handshake replayed once after an idle stop."""

from __future__ import annotations

from gateway.config import UpstreamConfig
from gateway.protocol import jsonrpc
from gateway.upstream import UpstreamClient
from gateway.upstream.base import Transport

INITIALIZE = jsonrpc.Request(
    jsonrpc="2.0", id=1, method="initialize", params={"protocolVersion": "2025-06-18"}
)
INITIALIZED = jsonrpc.Notification(jsonrpc="2.0", method="notifications/initialized")


class FakeUpstream(Transport):
    """Answers initialize at once and records everything else the client sends."""

    def __init__(self, sink: UpstreamClient) -> None:
        super().__init__(sink)
        self.client = sink
        self.sent: list[jsonrpc.Message] = []
        self.starts = 0

    async def start(self) -> None:
        self.starts += 1

    async def send(self, message: jsonrpc.Message) -> None:
        self.sent.append(message)
        if isinstance(message, jsonrpc.Request) and message.method == "initialize":
            result = {"protocolVersion": "2025-06-18", "capabilities": {}}
            self.client.on_message(
                jsonrpc.Response(jsonrpc="2.0", id=message.id, result=result), None
            )

    async def close(self) -> None:
        pass


class Listener:
    busy = False
    listening = False

    def on_server_message(
        self, message: jsonrpc.Message, related: jsonrpc.RequestId | None
    ) -> None:
        pass

    def on_stream(self, related: jsonrpc.RequestId, interrupted: bool) -> None:
        pass


def client() -> tuple[UpstreamClient, list[FakeUpstream]]:
    made: list[FakeUpstream] = []

    def make(sink: UpstreamClient) -> FakeUpstream:
        made.append(FakeUpstream(sink))
        return made[-1]

    config = UpstreamConfig(transport="stdio", command=("true",))
    return UpstreamClient(make, config, Listener()), made


def ask(upstream: UpstreamClient, request_id: str) -> None:
    question = jsonrpc.Request(jsonrpc="2.0", id=request_id, method="roots/list")
    upstream.on_message(question, None)


async def test_an_unanswered_upstream_question_keeps_the_upstream_busy_until_answered() -> None:
    upstream, _ = client()
    await upstream.initialize(INITIALIZE)
    assert not upstream.busy
    ask(upstream, "q1")
    assert upstream.busy
    await upstream.notify(jsonrpc.Response(jsonrpc="2.0", id="q1", result={"roots": []}))
    assert not upstream.busy


async def test_an_upstream_question_it_withdraws_or_loses_with_its_process_frees_it() -> None:
    upstream, _ = client()
    await upstream.initialize(INITIALIZE)
    ask(upstream, "q1")
    cancelled = jsonrpc.Notification(
        jsonrpc="2.0", method="notifications/cancelled", params={"requestId": "q1"}
    )
    upstream.on_message(cancelled, None)
    assert not upstream.busy
    ask(upstream, "q2")
    upstream.on_lost("the stdio upstream process exited with code 1")
    assert not upstream.busy


async def test_stopped_before_the_client_said_initialized_the_replay_sends_it_once() -> None:
    upstream, (transport,) = client()
    await upstream.initialize(INITIALIZE)
    upstream.on_stopped("the idle stdio child gave its slot to another session")
    await upstream.initialized(INITIALIZED)
    assert transport.starts == 2
    methods = [
        m.method for m in transport.sent if isinstance(m, jsonrpc.Request | jsonrpc.Notification)
    ]
    assert methods == ["initialize", "initialize", "notifications/initialized"]
