"""The 2026-07-28 call core (`calls.call.HeldCall`) at its seam: one upstream call made for a
session-less caller, on a session the gateway holds for it (`calls.held`), through `wait()`,
its questions (`Ask`, `answer`, `refuse`), its end (`stop`, `end`) and the task hooks.

The first tests run against the SDK's own server (tests/sdk_upstream.py) on a real held
session. The rest play the upstream at its transport (`fakes.ScriptedUpstream`) under a real
`HeldSession`, `Lease` and `UpstreamClient`: only there does the test choose when a question,
a withdrawal or the call's answer arrives, so that a window or a round is decided by what
the upstream did and never by how fast the machine is.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from gateway.calls.call import GATHER_SECONDS, Ask, Asked, Finished, HeldCall, Running
from gateway.calls.held import HeldSessions, Lease
from gateway.calls.held_session import HeldSession
from gateway.config import Settings
from gateway.observability.metrics import Metrics
from gateway.protocol import jsonrpc
from gateway.protocol.errors import INTERNAL_ERROR, METHOD_NOT_FOUND, UpstreamUnavailable
from gateway.route import Route
from gateway.upstream import Answer

from .fakes import ScriptedRoute, ScriptedUpstream
from .helpers import ANSWERS_ALL

#: Never started: `ScriptedRoute` gives each held session a scripted transport instead.
UNUSED = {"transport": "stdio", "command": ["true"]}
ADA = {"action": "accept", "content": {"name": "Ada"}}


def tool_call(name: str, **arguments: Any) -> jsonrpc.Request:
    """The call as the endpoint hands it on: a 2025-11-25 `tools/call` under the client's id."""
    params = {"name": name, "arguments": arguments}
    return jsonrpc.Request(jsonrpc="2.0", id="client-1", method="tools/call", params=params)


def question(upstream_id: jsonrpc.RequestId, method: str = "elicitation/create") -> jsonrpc.Request:
    params = {"message": f"question {upstream_id}?", "requestedSchema": {"type": "object"}}
    return jsonrpc.Request(jsonrpc="2.0", id=upstream_id, method=method, params=params)


def withdrawal(upstream_id: jsonrpc.RequestId) -> jsonrpc.Notification:
    """The upstream takes back a question it asked (as an SDK server does when it gives up)."""
    return jsonrpc.cancelled(upstream_id, "the tool stopped waiting")


def text_of(answer: Answer) -> str:
    assert isinstance(answer, jsonrpc.Response)
    (content,) = answer.result["content"]
    return str(content["text"])


class Hooks:
    """What a task does with a call's questions and progress (`TaskHooks`), kept for the test."""

    def __init__(self) -> None:
        self.asks: list[Ask] = []
        self.withdrawals: list[Ask] = []
        self.progresses: list[jsonrpc.JsonObject] = []

    def asked(self, ask: Ask) -> None:
        self.asks.append(ask)

    def withdrawn(self, ask: Ask) -> None:
        self.withdrawals.append(ask)

    def progress(self, params: jsonrpc.JsonObject) -> None:
        self.progresses.append(params)


# -- Over the SDK's server


@pytest.fixture
async def sdk_route(
    make_settings: Callable[..., Settings], sdk_upstream: str
) -> AsyncIterator[tuple[Route, HeldSessions]]:
    upstream = {"transport": "streamable_http", "url": sdk_upstream}
    settings = make_settings([{"name": "sdk", "upstream": upstream}])
    route = Route(settings, settings.routes[0], Metrics(["sdk"]))
    pool = HeldSessions(settings.sessions)
    yield route, pool
    await pool.close()
    await route.close()


async def sdk_call(sdk_route: tuple[Route, HeldSessions], name: str, **arguments: Any) -> HeldCall:
    route, pool = sdk_route
    lease = await pool.lease(route, "alice", {"elicitation": {}}, {})
    call = HeldCall(lease, tool_call(name, **arguments))
    call.start()
    return call


async def test_a_call_that_ends_inside_the_window_is_finished_with_the_tools_result(
    sdk_route: tuple[Route, HeldSessions],
) -> None:
    call = await sdk_call(sdk_route, "echo", text="hi")
    try:
        async with asyncio.timeout(5):
            state = await call.wait(5)
        assert isinstance(state, Finished)
        # Under the upstream's id: the endpoint gives the client's back (it knows which).
        assert state.answer.id == call.outgoing.id != "client-1"
        assert text_of(state.answer) == "hi"
        assert call.pending == {}
    finally:
        await call.end()


async def test_a_question_the_tool_asks_is_a_round_and_its_answer_reaches_the_tool(
    sdk_route: tuple[Route, HeldSessions],
) -> None:
    call = await sdk_call(sdk_route, "ask")
    try:
        async with asyncio.timeout(5):
            state = await call.wait(5)
            assert isinstance(state, Asked)
            (ask,) = state.asks
            assert ask.key == "elicitation-1" and ask.method == "elicitation/create"
            assert ask.params["message"] == "What is your name?"
            assert ask.wire() == {"method": "elicitation/create", "params": ask.params}
            assert call.pending == {ask.key: ask}
            assert await call.answer(ask.key, ADA)
            assert text_of(await call.result()) == "Hello, Ada!"
    finally:
        await call.end()


async def test_a_declined_question_reaches_the_tool_as_declined(
    sdk_route: tuple[Route, HeldSessions],
) -> None:
    call = await sdk_call(sdk_route, "ask")
    try:
        async with asyncio.timeout(5):
            state = await call.wait(5)
            assert isinstance(state, Asked)
            assert await call.answer(state.asks[0].key, {"action": "decline"})
            assert text_of(await call.result()) == "decline"
    finally:
        await call.end()


async def test_a_refused_question_reaches_the_tool_as_the_error_given(
    sdk_route: tuple[Route, HeldSessions],
) -> None:
    """`refuse` answers with a reply of the gateway's (nobody answered, or the client answered
    with an error): the SDK's elicit raises it, and the tool fails with it, a result."""
    call = await sdk_call(sdk_route, "ask")
    try:
        async with asyncio.timeout(5):
            state = await call.wait(5)
            assert isinstance(state, Asked)
            refusal = jsonrpc.error_response(None, INTERNAL_ERROR, "nobody answered")
            assert await call.refuse(state.asks[0].key, refusal)
            answer = await call.result()
        assert isinstance(answer, jsonrpc.Response) and answer.result["isError"] is True
        assert call.pending == {}
    finally:
        await call.end()


# -- The upstream played at its transport


class Pool:
    """Held sessions of one route whose every upstream is scripted; `upstream_of` finds the
    transport a lease's session has."""

    def __init__(self, route: Route, scripted: ScriptedRoute, pool: HeldSessions) -> None:
        self.route = route
        self.scripted = scripted
        self.pool = pool
        self._upstreams: dict[HeldSession, ScriptedUpstream] = {}

    async def lease(
        self, principal: str | None = "alice", capabilities: jsonrpc.JsonObject = ANSWERS_ALL
    ) -> Lease:
        made = len(self.scripted.made)
        lease = await self.pool.lease(self.route, principal, capabilities, {})
        if len(self.scripted.made) > made:  # a new session: its transport was made with it
            self._upstreams[lease.held] = self.scripted.made[-1]
        return lease

    def upstream_of(self, lease: Lease) -> ScriptedUpstream:
        return self._upstreams[lease.held]

    async def start(
        self, capabilities: jsonrpc.JsonObject = ANSWERS_ALL
    ) -> tuple[HeldCall, ScriptedUpstream, jsonrpc.Request]:
        """A call started, and the request its upstream got."""
        lease = await self.lease(capabilities=capabilities)
        call = HeldCall(lease, tool_call("work"))
        call.start()
        upstream = self.upstream_of(lease)
        async with asyncio.timeout(5):
            sent = await upstream.request("tools/call")
        return call, upstream, sent


@pytest.fixture
async def pool(make_settings: Callable[..., Settings]) -> AsyncIterator[Pool]:
    settings = make_settings([{"name": "r", "upstream": UNUSED}])
    route = Route(settings, settings.routes[0], Metrics(["r"]))
    scripted = route.upstream = ScriptedRoute(settings.routes[0])
    held = HeldSessions(settings.sessions)
    yield Pool(route, scripted, held)
    await held.close()
    await route.close()


DONE = {"content": [{"type": "text", "text": "done"}]}


async def test_the_call_goes_upstream_under_an_id_and_progress_token_of_the_gateways(
    pool: Pool,
) -> None:
    call, upstream, sent = await pool.start()
    assert sent.id == call.outgoing.id != "client-1"
    assert sent.params is not None and sent.params["name"] == "work"
    assert sent.params["_meta"] == {"progressToken": call.token}
    upstream.answer(sent, DONE)
    async with asyncio.timeout(5):
        assert isinstance(await call.wait(5), Finished)
    await call.end()


async def test_questions_asked_a_moment_apart_are_one_round(pool: Pool) -> None:
    """An upstream asks two questions together; they reach the gateway a moment apart, and the
    round waits `GATHER_SECONDS` for the second rather than making two rounds of them."""
    call, upstream, sent = await pool.start()
    loop = asyncio.get_running_loop()
    waiting = asyncio.ensure_future(call.wait(5))
    # Callbacks run in the order they were scheduled: the wait has begun when q1 comes.
    loop.call_soon(upstream.say, question("q1"), sent.id)
    # Due before the round's gathering ends, however slowly this loop runs: timers fire in
    # the order of their deadlines, and the gathering starts after this one is set.
    later = loop.call_later(
        GATHER_SECONDS / 5, upstream.say, question("q2", "sampling/createMessage"), sent.id
    )
    try:
        async with asyncio.timeout(5):
            state = await waiting
        assert isinstance(state, Asked)
        assert [(a.key, a.upstream_id, a.method) for a in state.asks] == [
            ("elicitation-1", "q1", "elicitation/create"),
            ("sampling-2", "q2", "sampling/createMessage"),
        ]
    finally:
        later.cancel()
        await call.end("the test ended")


async def test_a_question_asked_after_a_round_is_the_next_rounds(pool: Pool) -> None:
    call, upstream, sent = await pool.start()
    upstream.say(question("q1"), sent.id)
    async with asyncio.timeout(5):
        first = await call.wait(5)
        assert isinstance(first, Asked) and [a.key for a in first.asks] == ["elicitation-1"]
        assert await call.answer("elicitation-1", ADA)
        upstream.say(question("q2"), sent.id)
        second = await call.wait(5)
        assert isinstance(second, Asked) and [a.key for a in second.asks] == ["elicitation-2"]
        assert await call.answer("elicitation-2", ADA)
        upstream.answer(sent, DONE)
        assert isinstance(await call.wait(5), Finished)
    await call.end()


async def test_a_call_still_running_after_the_window_is_running_and_answers_later(
    pool: Pool,
) -> None:
    call, upstream, sent = await pool.start()
    async with asyncio.timeout(5):
        assert isinstance(await call.wait(0.05), Running)  # this upstream answers only when told
        upstream.answer(sent, DONE)
        assert text_of(await call.result()) == "done"
    await call.end()


async def test_with_no_window_a_call_is_running_at_once_and_keeps_what_it_was_asked(
    pool: Pool,
) -> None:
    """Window 0: the call becomes a task at once; a question asked meanwhile is not a round
    but stays pending, for the task's hooks to take."""
    call, upstream, sent = await pool.start()
    upstream.say(question("q1"), sent.id)
    async with asyncio.timeout(5):
        assert isinstance(await call.wait(0), Running)
    assert list(call.pending) == ["elicitation-1"]
    await call.end("the test ended")


async def test_an_answer_goes_upstream_once_under_the_upstreams_id(pool: Pool) -> None:
    call, upstream, sent = await pool.start()
    upstream.say(question("up-7"), sent.id)
    async with asyncio.timeout(5):
        state = await call.wait(5)
    assert isinstance(state, Asked)
    key = state.asks[0].key
    assert await call.answer(key, ADA)
    assert not await call.answer(key, {"action": "decline"})  # given twice: the first counts
    assert not await call.answer("elicitation-99", ADA)  # no such question
    assert not await call.refuse(key, jsonrpc.error_response(None, INTERNAL_ERROR, "late"))
    assert upstream.answers() == [jsonrpc.Response(jsonrpc="2.0", id="up-7", result=ADA)]
    assert call.pending == {}
    upstream.answer(sent, DONE)
    async with asyncio.timeout(5):
        await call.result()
    await call.end()


async def test_a_refusal_goes_upstream_under_the_upstreams_id_and_closes_the_question(
    pool: Pool,
) -> None:
    call, upstream, sent = await pool.start()
    upstream.say(question("up-7"), sent.id)
    async with asyncio.timeout(5):
        state = await call.wait(5)
    assert isinstance(state, Asked)
    key = state.asks[0].key
    refusal = jsonrpc.error_response("any", METHOD_NOT_FOUND, "the client cannot answer this")
    assert await call.refuse(key, refusal)
    assert not await call.refuse(key, refusal)
    assert not await call.answer(key, ADA)
    (sent_back,) = upstream.answers()
    assert isinstance(sent_back, jsonrpc.ErrorResponse)
    assert sent_back.id == "up-7" and sent_back.error.code == METHOD_NOT_FOUND
    await call.end("the test ended")


async def test_a_question_the_upstream_withdraws_leaves_the_call(pool: Pool) -> None:
    call, upstream, sent = await pool.start()
    upstream.say(question("q1"), sent.id)
    upstream.say(question("q2"), sent.id)
    async with asyncio.timeout(5):
        state = await call.wait(5)
    assert isinstance(state, Asked) and len(state.asks) == 2
    upstream.say(withdrawal("q1"), sent.id)
    assert list(call.pending) == ["elicitation-2"]
    assert not await call.answer("elicitation-1", ADA)  # withdrawn: nothing goes upstream
    assert upstream.answers() == []
    async with asyncio.timeout(5):
        again = await call.wait(5)  # the next round has what is still open
    assert isinstance(again, Asked) and [a.key for a in again.asks] == ["elicitation-2"]
    await call.end("the test ended")


async def test_a_question_asked_and_withdrawn_inside_the_window_leaves_the_window_open(
    pool: Pool,
) -> None:
    """`Running` means the window passed with the call still running; a question the upstream
    took back before the round was made is no reason to stop waiting for its answer."""
    call, upstream, sent = await pool.start()
    loop = asyncio.get_running_loop()
    waiting = asyncio.ensure_future(call.wait(5))
    # Callbacks run in the order they were scheduled: the wait has begun when q1 comes.
    loop.call_soon(upstream.say, question("q1"), sent.id)
    loop.call_soon(upstream.say, withdrawal("q1"), sent.id)
    # The call's answer is due well inside the window (5 s), and after the question's moment.
    later = loop.call_later(0.05, upstream.answer, sent, DONE)
    try:
        async with asyncio.timeout(5):
            state = await waiting
        assert isinstance(state, Finished)
    finally:
        later.cancel()
        await call.end("the test ended")


async def test_stop_tells_the_upstream_the_call_is_over(pool: Pool) -> None:
    call, upstream, sent = await pool.start()
    upstream.say(question("q1"), sent.id)
    await call.stop("the task was cancelled")
    async with asyncio.timeout(5):
        (notice,) = await upstream.received("notifications/cancelled")
    assert notice.params == {"requestId": sent.id, "reason": "the task was cancelled"}
    # The upstream withdraws the questions of the call it stops, and the call lets them go.
    upstream.say(withdrawal("q1"), sent.id)
    assert call.pending == {}
    await call.end("the test ended")


async def test_ending_an_abandoned_call_cancels_it_upstream_and_closes_its_session(
    pool: Pool,
) -> None:
    """A call abandoned with a question open: its session is closed, not handed to the
    caller's next call, whose upstream would still be waiting for that answer."""
    call, upstream, sent = await pool.start()
    upstream.say(question("q1"), sent.id)
    async with asyncio.timeout(5):
        assert isinstance(await call.wait(5), Asked)
        await call.end("the client did not retry")
    async with asyncio.timeout(5):
        (notice,) = await upstream.received("notifications/cancelled")
    assert notice.params == {"requestId": sent.id, "reason": "the client did not retry"}
    assert upstream.closes == 1
    with pytest.raises(asyncio.CancelledError):
        await call.result()
    following = await pool.lease()
    assert following.held is not call.lease.held
    await following.release()


async def test_a_finished_call_hands_its_session_to_the_callers_next_call(pool: Pool) -> None:
    call, upstream, sent = await pool.start()
    upstream.answer(sent, DONE)
    async with asyncio.timeout(5):
        assert isinstance(await call.wait(5), Finished)
        await call.end()
    assert "notifications/cancelled" not in upstream.methods() and upstream.closes == 0
    following = await pool.lease()
    assert following.held is call.lease.held
    await following.release()


async def test_a_call_that_finished_with_a_question_open_does_not_hand_on_its_session(
    pool: Pool,
) -> None:
    call, upstream, sent = await pool.start()
    upstream.say(question("q1"), sent.id)
    upstream.answer(sent, DONE)  # the tool gave up waiting, without withdrawing its question
    async with asyncio.timeout(5):
        assert text_of(await call.result()) == "done"
        await call.end()
    assert upstream.closes == 1
    following = await pool.lease()
    assert following.held is not call.lease.held
    await following.release()


async def test_keys_are_unique_for_the_calls_lifetime_even_when_the_upstream_reuses_an_id(
    pool: Pool,
) -> None:
    """Tasks extension: "each `inputRequests` key MUST be unique for the task's lifetime".
    A call's keys are the task's it may become, and `key_prefix` keeps a re-run's apart."""
    call, upstream, sent = await pool.start()
    call.key_prefix = "attempt2-"
    keys: list[str] = []
    # A JSON-RPC id may be used again once its request is answered: each question is new.
    for method in ("elicitation/create", "sampling/createMessage", "roots/list", "roots/list"):
        upstream.say(question(1, method), sent.id)
        async with asyncio.timeout(5):
            state = await call.wait(5)
        assert isinstance(state, Asked)
        (ask,) = state.asks
        assert ask.upstream_id == 1
        keys.append(ask.key)
        assert await call.answer(ask.key, {"roots": []})
    assert keys == [
        "attempt2-elicitation-1",
        "attempt2-sampling-2",
        "attempt2-roots-3",
        "attempt2-roots-4",
    ]
    assert [a.id for a in upstream.answers()] == [1, 1, 1, 1]
    await call.end("the test ended")


async def test_questions_and_progress_after_the_window_go_to_the_tasks_hooks(pool: Pool) -> None:
    call, upstream, sent = await pool.start()
    heard: list[jsonrpc.JsonObject] = []
    call.on_progress = heard.append
    progress = {"progressToken": call.token, "progress": 1}
    upstream.say(
        jsonrpc.Notification(jsonrpc="2.0", method="notifications/progress", params=progress)
    )
    assert heard == [progress]  # no task yet: the request's own stream
    async with asyncio.timeout(5):
        assert isinstance(await call.wait(0.05), Running)
    hooks = call.hooks = Hooks()
    upstream.say(question("q1"), sent.id)
    upstream.say(
        jsonrpc.Notification(jsonrpc="2.0", method="notifications/progress", params=progress)
    )
    upstream.say(withdrawal("q1"), sent.id)
    assert [(a.key, a.upstream_id) for a in hooks.asks] == [("elicitation-1", "q1")]
    assert hooks.withdrawals == hooks.asks
    assert hooks.progresses == [progress] and heard == [progress]
    upstream.answer(sent, DONE)
    async with asyncio.timeout(5):
        await call.result()
    await call.end()


async def test_a_question_of_a_kind_the_caller_did_not_declare_is_refused_upstream(
    pool: Pool,
) -> None:
    """2026-07-28 MRTR: "Only inputRequest types the client declared are allowed"; the
    held session answers the upstream -32601 itself, and the call never sees the question."""
    call, upstream, sent = await pool.start(capabilities={"elicitation": {}})
    upstream.say(question("q1", "sampling/createMessage"), sent.id)
    async with asyncio.timeout(5):
        await upstream.until(lambda: bool(upstream.answers()))
    (refusal,) = upstream.answers()
    assert isinstance(refusal, jsonrpc.ErrorResponse)
    assert refusal.id == "q1" and refusal.error.code == METHOD_NOT_FOUND
    assert call.pending == {}
    await call.end("the test ended")


async def test_an_upstream_that_refuses_its_handshake_fails_the_wait(pool: Pool) -> None:
    lease = await pool.lease()
    pool.upstream_of(lease).refusal = "not today"
    call = HeldCall(lease, tool_call("work"))
    call.start()
    async with asyncio.timeout(5):
        with pytest.raises(UpstreamUnavailable):
            await call.wait(5)
    await call.end()
