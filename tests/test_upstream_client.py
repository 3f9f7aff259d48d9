"""`UpstreamClient` at the transport seam: what makes an upstream busy (and so never stopped
for idleness), and how a lost upstream is re-established by replaying the client's handshake
before the next message, once, whatever asks for it first."""

from __future__ import annotations

import asyncio

import pytest

from gateway.config import UpstreamConfig
from gateway.protocol import jsonrpc
from gateway.protocol.errors import (
    INTERNAL_ERROR,
    UpstreamProtocolError,
    UpstreamTimeout,
    UpstreamUnavailable,
)
from gateway.upstream import UpstreamClient

from .fakes import ScriptedUpstream

INITIALIZE = jsonrpc.Request(
    jsonrpc="2.0", id=1, method="initialize", params={"protocolVersion": "2025-06-18"}
)
INITIALIZED = jsonrpc.Notification(jsonrpc="2.0", method="notifications/initialized")


class Listener:
    busy = False
    listening = False

    def __init__(self) -> None:
        self.heard: list[jsonrpc.Message] = []

    def on_server_message(
        self, message: jsonrpc.Message, related: jsonrpc.RequestId | None
    ) -> None:
        self.heard.append(message)

    def on_stream(self, related: jsonrpc.RequestId, interrupted: bool) -> None:
        pass


def client(
    request_timeout: float | None = 300, listener: Listener | None = None
) -> tuple[UpstreamClient, ScriptedUpstream]:
    made: list[ScriptedUpstream] = []

    def make(sink: UpstreamClient) -> ScriptedUpstream:
        made.append(ScriptedUpstream(sink))
        return made[-1]

    config = UpstreamConfig(
        transport="stdio", command=("true",), request_timeout_seconds=request_timeout
    )
    upstream = UpstreamClient(make, config, listener or Listener())
    return upstream, made[0]


async def connected(request_timeout: float | None = 300) -> tuple[UpstreamClient, ScriptedUpstream]:
    """A client past its handshake (initialize answered, initialized sent)."""
    upstream, transport = client(request_timeout)
    await upstream.initialize(INITIALIZE)
    await upstream.initialized(INITIALIZED)
    return upstream, transport


def tool_call(request_id: jsonrpc.RequestId) -> jsonrpc.Request:
    return jsonrpc.Request(
        jsonrpc="2.0", id=request_id, method="tools/call", params={"name": "echo"}
    )


def ask(upstream: UpstreamClient, request_id: str) -> None:
    question = jsonrpc.Request(jsonrpc="2.0", id=request_id, method="roots/list")
    upstream.on_message(question, None)


async def answered(
    upstream: UpstreamClient, transport: ScriptedUpstream, request: jsonrpc.Request
) -> jsonrpc.Response | jsonrpc.ErrorResponse:
    """`upstream.call(request)` with the scripted upstream answering it once it arrives."""
    async with asyncio.timeout(5):
        call = asyncio.ensure_future(upstream.call(request))
        sent = await transport.request(request.method)
        transport.answer(sent, {"content": []})
        return await call


# -- busy


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


# -- ids


async def test_two_clients_of_one_upstream_session_never_send_the_same_request_id() -> None:
    """Replicas that carry on one upstream session each have a client of their own (so does
    a process that adopts a stored session after a restart): a stateful upstream routes its
    answers by id within the session, so an id two of them could send crosses answers."""
    clients = [client()[0] for _ in range(50)]
    sent = [one.next_id() for one in clients for _ in range(100)]
    assert len(set(sent)) == len(sent)
    assert all(isinstance(request_id, str) for request_id in sent)  # ids may be strings
    first, second = clients[0].next_id(), clients[0].next_id()
    assert first != second and first.rsplit("-", 1)[0] == second.rsplit("-", 1)[0]


# -- answers


async def test_an_answer_reaches_its_call_and_one_for_no_call_of_ours_is_dropped() -> None:
    listener = Listener()
    upstream, transport = client(listener=listener)
    await upstream.initialize(INITIALIZE)
    transport.say(jsonrpc.Response(jsonrpc="2.0", id=999, result={}))  # we never asked 999
    answer = await answered(upstream, transport, tool_call(upstream.next_id()))
    assert isinstance(answer, jsonrpc.Response) and answer.result == {"content": []}
    assert listener.heard == []  # an answer is never taken for a message of the upstream's


async def test_a_bounded_call_without_an_answer_fails_with_upstream_timeout() -> None:
    upstream, _ = await connected(request_timeout=0.05)
    async with asyncio.timeout(5):
        with pytest.raises(UpstreamTimeout) as raised:
            await upstream.call(tool_call(upstream.next_id()))
    assert raised.value.code == INTERNAL_ERROR
    assert "upstream.request_timeout_seconds" in raised.value.message


async def test_an_answer_that_cannot_be_read_fails_its_call_at_once() -> None:
    upstream, transport = await connected()
    request = tool_call(upstream.next_id())
    async with asyncio.timeout(5):
        call = asyncio.ensure_future(upstream.call(request))
        await transport.request("tools/call")
        # Cut off mid-result: not JSON, yet it still names the request it answers.
        transport.garble(b'{"jsonrpc": "2.0", "id": ' + str(request.id).encode() + b', "result"')
        with pytest.raises(UpstreamProtocolError) as raised:
            await call
    assert raised.value.code == INTERNAL_ERROR
    assert raised.value.message.startswith("the upstream sent an answer the gateway cannot read")


# -- the connection lost, and re-established


async def test_a_call_in_flight_when_the_upstream_is_lost_fails_with_upstream_unavailable() -> None:
    upstream, transport = await connected()
    async with asyncio.timeout(5):
        call = asyncio.ensure_future(upstream.call(tool_call(upstream.next_id())))
        await transport.request("tools/call")
        upstream.on_lost("the stdio upstream process exited with code 3")
        with pytest.raises(UpstreamUnavailable) as raised:
            await call
    assert raised.value.message == "the stdio upstream process exited with code 3"


async def test_after_the_upstream_is_lost_the_next_call_replays_the_handshake_first() -> None:
    upstream, transport = await connected()
    upstream.on_lost("the stdio upstream process exited with code 1")
    request = tool_call(upstream.next_id())
    answer = await answered(upstream, transport, request)
    assert isinstance(answer, jsonrpc.Response)
    assert transport.starts == 2 and transport.closes == 1  # the old connection released
    assert transport.methods() == [
        "initialize",
        "notifications/initialized",
        "initialize",
        "notifications/initialized",
        "tools/call",
    ]
    first, again = await transport.received("initialize", 2)
    # The client's own handshake, under a fresh id of ours each time.
    assert isinstance(first, jsonrpc.Request) and isinstance(again, jsonrpc.Request)
    assert first.params == again.params == INITIALIZE.params and first.id != again.id


async def test_a_notification_after_a_loss_also_replays_the_handshake_first() -> None:
    upstream, transport = await connected()
    upstream.on_lost("gone")
    note = jsonrpc.Notification(jsonrpc="2.0", method="notifications/roots/list_changed")
    async with asyncio.timeout(5):
        await upstream.notify(note)
    assert transport.methods()[2:] == [
        "initialize",
        "notifications/initialized",
        "notifications/roots/list_changed",
    ]


async def test_calls_side_by_side_after_a_loss_replay_the_handshake_once() -> None:
    upstream, transport = await connected()
    upstream.on_lost("gone")
    requests = [tool_call(upstream.next_id()) for _ in range(3)]
    async with asyncio.timeout(5):
        calls = [asyncio.ensure_future(upstream.call(r)) for r in requests]
        for sent in await transport.received("tools/call", 3):
            assert isinstance(sent, jsonrpc.Request)
            transport.answer(sent, {"content": []})
        await asyncio.gather(*calls)
    assert transport.methods().count("initialize") == 2  # the first, and one replay
    assert transport.starts == 2


async def test_an_upstream_that_forgot_the_session_gets_the_handshake_then_the_same_request() -> (
    None
):
    upstream, transport = await connected()
    transport.forget_session = True  # an HTTP upstream answered 404 for our session id
    request = tool_call(upstream.next_id())
    answer = await answered(upstream, transport, request)
    assert isinstance(answer, jsonrpc.Response)
    assert transport.methods()[2:] == ["initialize", "notifications/initialized", "tools/call"]
    (sent,) = await transport.received("tools/call")
    assert isinstance(sent, jsonrpc.Request) and sent.id == request.id  # never seen, so resent


async def test_a_session_ended_elsewhere_meanwhile_fails_the_call_rather_than_replay_it() -> None:
    # With replicas: the session's upstream session was ended on another one, whose news has
    # not come here yet. A replay would give it a new upstream session that nobody ends.
    upstream, transport = await connected()
    asked: list[bool] = []

    async def ended() -> bool:
        asked.append(False)
        return False

    upstream.may_reestablish = ended
    transport.forget_session = True
    async with asyncio.timeout(5):
        with pytest.raises(UpstreamUnavailable) as raised:
            await upstream.call(tool_call(upstream.next_id()))
    assert raised.value.message == "the session ended"
    assert asked == [False]
    assert transport.methods()[2:] == []  # no handshake replayed, nor the call sent again


async def test_an_upstream_that_refuses_the_replayed_handshake_fails_the_call() -> None:
    upstream, transport = await connected()
    upstream.on_lost("gone")
    transport.refusal = "not today"
    async with asyncio.timeout(5):
        with pytest.raises(UpstreamUnavailable) as raised:
            await upstream.call(tool_call(upstream.next_id()))
    assert raised.value.message == "the upstream refused to re-initialize: not today"
    assert "tools/call" not in transport.methods()


async def test_stopped_before_the_client_said_initialized_the_replay_sends_it_once() -> None:
    upstream, transport = client()
    await upstream.initialize(INITIALIZE)
    upstream.on_stopped("the idle stdio child gave its slot to another session")
    await upstream.initialized(INITIALIZED)
    assert transport.starts == 2
    assert transport.methods() == ["initialize", "initialize", "notifications/initialized"]


async def test_a_session_restored_after_a_restart_replays_its_recorded_handshake_on_first_use() -> (
    None
):
    upstream, transport = client()
    upstream.restore(INITIALIZE, INITIALIZED)
    assert transport.starts == 0  # nothing happens until the session is used
    await answered(upstream, transport, tool_call(upstream.next_id()))
    assert transport.methods() == ["initialize", "notifications/initialized", "tools/call"]


async def test_a_closed_client_fails_calls_in_flight_and_never_reconnects() -> None:
    upstream, transport = await connected()
    async with asyncio.timeout(5):
        call = asyncio.ensure_future(upstream.call(tool_call(upstream.next_id())))
        await transport.request("tools/call")
        await upstream.close()
        with pytest.raises(UpstreamUnavailable) as in_flight:
            await call
        with pytest.raises(UpstreamUnavailable) as later:
            await upstream.call(tool_call(upstream.next_id()))
    assert in_flight.value.message == later.value.message == "the session ended"
    assert transport.starts == 1
