"""tools/call on the 2026-07-28 path: one upstream call, MRTR rounds, and maybe a task.

A new call starts upstream on a session leased for the caller (`calls.held`); a retry
carrying `requestState` finds its parked call again (`calls.parked`) and first hands the
upstream the answers in `inputResponses`. Then the call runs for the window its plan gives
it (`protocol.call_plan`, made once per call from the route's policy, whether the call may
become a task, and whether the store is shared), and what it did within that window (it
ended, asked the client something, or runs on) picks the response: the call's own answer,
an `InputRequiredResult` (the call parked for the retry), or a `CreateTaskResult` (the task
durable before it is sent, its call running on: `calls.task_host`). If the client goes
away first, the call is stopped upstream (closing the response cancels the request, in
this generation).
"""

from __future__ import annotations

import asyncio
import contextlib

from aiohttp import web

from gateway.calls.call import Asked, Finished, HeldCall, Running, UpstreamCall
from gateway.calls.direct import NativeCall
from gateway.calls.held_session import question_capabilities
from gateway.calls.parked import BadRequestState, ParkedCalls
from gateway.calls.task_api import create_task_result
from gateway.http import admission
from gateway.http.keys import HELD_SESSIONS, MODERN_TASK_API, PARKED_CALLS, RUNNER, SETTINGS
from gateway.http.modern_stream import CallStream
from gateway.protocol import call_plan, jsonrpc, modern, modern_results
from gateway.protocol.call_plan import Heard, Then
from gateway.protocol.errors import (
    INTERNAL_ERROR,
    LimitExceeded,
    TaskError,
    UpstreamError,
    UpstreamNotModern,
)
from gateway.protocol.modern import NAME_HEADER
from gateway.protocol.modern_headers import encode
from gateway.protocol.versions import MODERN_PROTOCOL_VERSION
from gateway.route import Route
from gateway.tasks.models import owner_of
from gateway.tasks.recovery import kept_call
from gateway.upstream import Answer, native

#: How often a waiting request looks whether its client is still connected.
_GONE_POLL_SECONDS = 0.25
CLIENT_GONE = "the client closed the request"


class _ClientGone(Exception):
    pass


async def call(
    request: web.Request,
    route: Route,
    caller: admission.Caller,
    checked: modern.ModernRequest,
    decision: modern.Call,
    native_wire: bool,
) -> Answer | web.StreamResponse:
    """The request's answer, or the SSE response it was written to (when the upstream's
    progress under the request's own token went out first). `native_wire`: the upstream is
    spoken to in 2026-07-28 (`upstream.generation`)."""
    progress = CallStream(request, checked.request)
    with _may_park(request.app[PARKED_CALLS], route, caller, checked, decision, native_wire):
        answer = await _answer(request, route, caller, checked, decision, progress, native_wire)
    return await progress.finish(answer)


def holder_of(route: Route, caller: admission.Caller) -> str:
    """Whom a parked call or a held session counts against: the caller on this route, as
    sessions are counted (one route's limit is not spent by a namesake on another route)."""
    return f"{route.name}:{caller.limit_key}"


def _may_park(
    parked: ParkedCalls,
    route: Route,
    caller: admission.Caller,
    checked: modern.ModernRequest,
    decision: modern.Call,
    native_wire: bool,
) -> contextlib.AbstractContextManager[None]:
    """Each parked call keeps an upstream session (a stdio child, perhaps) until its retry or
    expiry: a caller may have as many as it may have sessions on the session path, parked
    and running together. Only a call whose questions the gateway bridges may park.

    Raises:
        LimitExceeded: the caller has its share already.
    """
    if native_wire or not (decision.retry or question_capabilities(checked.capabilities)):
        return contextlib.nullcontext()
    cap = None if decision.retry else route.limits.sessions_per_principal
    try:
        return parked.running(holder_of(route, caller), cap)
    except LimitExceeded:
        route.metrics.limited.labels(route.name, "sessions").inc()
        raise


async def _answer(
    request: web.Request,
    route: Route,
    caller: admission.Caller,
    checked: modern.ModernRequest,
    decision: modern.Call,
    progress: CallStream,
    native_wire: bool,
) -> Answer:
    app = request.app
    message = checked.request
    owner = modern_owner(route, caller)
    upstream_call: UpstreamCall
    if native_wire:
        # The upstream does its own MRTR: a retry is a new call carrying its state.
        headers = await native_headers(request, route, caller)
        upstream = route.upstream.single()  # (a route of members is bridged)
        url = upstream.config.url
        assert url is not None
        # Under the upstream's name (`routes[].tools.rename`), in the body and its header.
        name = jsonrpc.param(decision.request, "name")
        outgoing = modern.native_request(message)
        if message.method == "tools/call" and name != jsonrpc.param(message, "name"):
            outgoing = jsonrpc.with_param(outgoing, "name", name)
            headers[NAME_HEADER.lower()] = encode(str(name))
        upstream_call = NativeCall(upstream, url, outgoing, headers)
        upstream_call.spans = upstream.spans
        upstream_call.start()
    elif decision.retry:
        try:
            upstream_call = app[PARKED_CALLS].resume(decision.state, owner, message)
        except BadRequestState as exc:
            return jsonrpc.error_response(message.id, exc.code, exc.message)
    else:
        lease = await app[HELD_SESSIONS].lease(
            route,
            caller.principal,
            question_capabilities(checked.capabilities),
            forwarded_headers(request, route),
            holder=holder_of(route, caller),
        )
        upstream_call = HeldCall(lease, decision.request)
        upstream_call.start()
    upstream_call.on_progress = progress.progress if progress.token is not None else None
    upstream_call.on_log = progress.logged if progress.log_level is not None else None
    handed_over = False
    #: Why the call is stopped if it is not handed over (None: it ended by itself).
    abandon: str | None = CLIENT_GONE
    try:
        responses = decision.responses if isinstance(decision.responses, dict) else {}
        for key, response in responses.items() if not native_wire else ():
            await upstream_call.answer(key, response)  # keys not asked for are ignored
        policy = route.policy
        plan = call_plan.plan(decision.task, policy, app[SETTINGS].store.shared)
        try:
            async with asyncio.timeout(plan.limit):
                state = await _wait(request, upstream_call, plan.window, progress)
        except TimeoutError:
            abandon = "the upstream took too long"
            return jsonrpc.error_response(
                message.id,
                INTERNAL_ERROR,
                f"the upstream did not finish the tool call within {plan.limit or 0:g} s "
                "(tasks.time_limit_seconds)",
            )
        then = plan.after(_heard(state))
        if then is Then.PARK:
            assert isinstance(state, Asked)
            parked = app[PARKED_CALLS]
            holder = holder_of(route, caller)
            token = parked.park(upstream_call, owner, holder, message, plan.park_seconds)
            handed_over = True
            asks = {ask.key: ask.wire() for ask in state.asks}
            return modern_results.input_required(message.id, asks, token)
        if then is Then.ANSWER:
            assert isinstance(state, Finished)
            # (An optional tool's upstream MRTR round is answered as it came: a round before a
            # task; a required tool's is the task's, `NativeCall.result` takes it.)
            abandon = None
            answer = jsonrpc.with_id(state.answer, message.id)
            if isinstance(answer, jsonrpc.Response):
                return modern_results.complete(answer, message.method)
            return answer
        api = app[MODERN_TASK_API]
        host = api.host_for(upstream_call, owner, caller.principal, policy)
        try:
            name = str(jsonrpc.param(message, "name"))
            capabilities = question_capabilities(checked.capabilities)
            repeat = kept_call(decision.request, capabilities) if route.repeats(name) else None
            task = await app[RUNNER].submit(
                host,
                route.name,
                decision.request,
                policy,
                route.limits,
                generation=MODERN_PROTOCOL_VERSION,
                rerun_with=repeat,
            )
        except TaskError as exc:
            abandon = "the task could not be made"
            return jsonrpc.error_response(message.id, exc.code, exc.message)
        handed_over = True
        return create_task_result(message.id, task)
    except UpstreamError as exc:
        abandon = "the upstream failed"
        if isinstance(exc, UpstreamNotModern):
            route.upstream.wire.refused()  # the client's next request goes bridged
        return upstream_failed(message.id, exc)
    except _ClientGone:
        return jsonrpc.error_response(message.id, INTERNAL_ERROR, CLIENT_GONE)
    finally:
        upstream_call.on_progress = upstream_call.on_log = None
        if not handed_over:
            # Shielded: a handler cancelled by its client's going away must still stop
            # the call upstream and give its session back.
            await asyncio.shield(upstream_call.end(abandon))


async def native_headers(
    request: web.Request, route: Route, caller: admission.Caller
) -> dict[str, str]:
    """What a request on the 2026-07-28 wire carries upstream: the route's headers and
    identity, and the client's 2026-07-28 request headers."""
    client = {name.lower(): value for name, value in request.headers.items()}
    upstream = route.upstream.single()
    base = await upstream.request_headers(forwarded_headers(request, route), caller.principal)
    return {**base, **native.request_headers(client)}


def modern_owner(route: Route, caller: admission.Caller) -> str:
    """Whom a 2026-07-28 caller's tasks belong to: its principal (the same owner as on the
    session path), or every anonymous caller of the route alike (their task ids, 192 random
    bits, are the only guard: see docs/security.md)."""
    return owner_of(route.name, caller.principal) or f"anonymous:{route.name}"


def forwarded_headers(request: web.Request, route: Route) -> dict[str, str]:
    return {
        name: value
        for name in route.upstream.copied_headers
        if (value := request.headers.get(name)) is not None
    }


def upstream_failed(request_id: jsonrpc.RequestId, exc: UpstreamError) -> jsonrpc.ErrorResponse:
    return jsonrpc.error_response(
        request_id, INTERNAL_ERROR, f"upstream unavailable: {exc.message}"
    )


def _heard(state: Finished | Asked | Running) -> Heard:
    if isinstance(state, Finished):
        return Heard.ENDED
    return Heard.ASKED if isinstance(state, Asked) else Heard.RUNNING


async def _wait(
    request: web.Request, upstream_call: UpstreamCall, window: float | None, progress: CallStream
) -> Finished | Asked | Running:
    waiting = asyncio.ensure_future(upstream_call.wait(window))
    watching = asyncio.ensure_future(_client_gone(request))
    relaying = asyncio.ensure_future(progress.relay())
    try:
        await asyncio.wait({waiting, watching, relaying}, return_when=asyncio.FIRST_COMPLETED)
        if waiting.done():
            return waiting.result()
        raise _ClientGone  # the client left, or its stream could not be written
    finally:
        for future in (waiting, watching, relaying):
            future.cancel()
            with contextlib.suppress(asyncio.CancelledError, ConnectionError):
                await future


async def _client_gone(request: web.Request) -> None:
    """Returns once the client's connection is closed."""
    while True:
        transport = request.transport
        if transport is None or transport.is_closing():
            return
        await asyncio.sleep(_GONE_POLL_SECONDS)
