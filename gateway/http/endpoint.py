"""The client-facing Streamable HTTP endpoint of one route (transports spec, 2025-11-25).

POST carries one JSON-RPC message: requests are answered as JSON when the answer comes
quickly and alone, otherwise as a resumable SSE stream; notifications and responses get 202.
A session's GET (its stream) and DELETE (its end) are `endpoint_session`'s. A message is
decided once (`protocol.dispatch.decide`), under its session's negotiated version, or none.
A session-less 2026-07-28 request goes to `endpoint_modern` instead.
Each is given the `Route` the URL table holds at that path when the request arrives.
"""

from __future__ import annotations

import logging

from aiohttp import web

from gateway.calls.held_session import question_capabilities
from gateway.config import HttpConfig
from gateway.http import admission, endpoint_modern, sse
from gateway.http.keys import RUNNER, SESSIONS, SETTINGS, TASK_API
from gateway.http.middleware import GENERATION as GENERATION_KEY
from gateway.http.middleware import METHOD as METHOD_KEY
from gateway.http.middleware import REQUEST_ID as REQUEST_ID_KEY
from gateway.http.middleware import ROUTE as ROUTE_KEY
from gateway.http.request_body import read_body
from gateway.observability.logs import printable
from gateway.protocol import curation, dispatch, jsonrpc, modern, rewrite
from gateway.protocol.decisions import Local, Reject, Rewrite
from gateway.protocol.errors import (
    INTERNAL_ERROR,
    InvalidRequest,
    NotAcceptable,
    TaskError,
    UnsupportedMediaType,
    UnsupportedVersion,
    UpstreamError,
    UpstreamTimeout,
)
from gateway.protocol.versions import LEGACY_GENERATION, MODERN_PROTOCOL_VERSION, served_versions
from gateway.route import Route
from gateway.session.session import Rewriter, Session
from gateway.session.streams import EventStream
from gateway.tasks.recovery import kept_call
from gateway.upstream import Answer

log = logging.getLogger(__name__)


def _method_label(message: jsonrpc.Message) -> str:
    if isinstance(message, jsonrpc.Request):
        return message.method
    return "notification" if isinstance(message, jsonrpc.Notification) else "response"


def _error(request_id: jsonrpc.RequestId | None, code: int, message: str) -> web.Response:
    """A JSON-RPC error under the request's id, in an ordinary 200 response."""
    return _json_response(jsonrpc.error_response(request_id, code, message))


def _json_response(
    message: jsonrpc.Message | str, status: int = 200, headers: dict[str, str] | None = None
) -> web.Response:
    body = message if isinstance(message, str) else jsonrpc.dump(message)
    return web.Response(text=body, status=status, content_type="application/json", headers=headers)


async def post(route: Route, request: web.Request) -> web.StreamResponse:
    request[ROUTE_KEY] = route.name
    http = request.app[SETTINGS].http
    caller = await admission.admit(request, route)
    ctype = request.headers.get("Content-Type", "").split(";")[0].strip().lower()
    if ctype != "application/json":
        raise UnsupportedMediaType(
            f"Content-Type must be application/json, not {ctype or 'absent'!r}"
        )
    if not admission.accepts(request, "application/json", "text/event-stream"):
        raise NotAcceptable(
            "Not Acceptable: the Accept header must list both application/json "
            "and text/event-stream"
        )
    body = await read_body(request, route.limits.max_body_bytes, http.body_timeout_seconds)
    message = jsonrpc.parse(body)
    request[METHOD_KEY] = _method_label(message)
    if route.tracing is not None:
        route.tracing.begin_request(request, route.name, message)
    request[GENERATION_KEY] = admission.generation(request, message)
    if route.resource is not None and route.resource.tool_scopes:
        # a tool's own scopes (403)
        admission.check_scopes(route, caller, message, request[GENERATION_KEY])
    if log.isEnabledFor(logging.DEBUG):
        log.debug(
            "route %s: %s from %s", route.name, printable(_method_label(message)), request.remote
        )
    request_id = None
    if isinstance(message, jsonrpc.Request):
        request_id = request[REQUEST_ID_KEY] = message.id
    policy = route.policy
    session: Session | None = None
    if request.headers.get(admission.SESSION_HEADER):
        session = await admission.session_for(request, route, caller)
    elif MODERN_PROTOCOL_VERSION in route.generations and modern.wants_modern(
        message, request.headers.get(admission.VERSION_HEADER)
    ):
        if modern.new_call(message):  # it may become a task; a retry answers questions
            admission.refuse_when_draining(request, "tool calls")
        return await endpoint_modern.post(request, route, caller, message)
    # Without a session no version was negotiated: only initialize goes further.
    version = session.protocol_version if session is not None else None
    decision = dispatch.decide(message, policy, version, route.lists_tasks)
    if session is None:
        if isinstance(decision, dispatch.Initialize):
            return await _initialize(request, route, decision.request, caller)
        admission.check_modern_version(request, message, served_versions(route.generations))
        if isinstance(decision, Reject):
            return _error(request_id, decision.code, decision.message)
        session = await admission.session_for(request, route, caller)  # raises: no session id
    if isinstance(decision, dispatch.Initialize):
        raise InvalidRequest(
            "initialize must be sent without MCP-Session-Id: it opens a new session"
        )
    upstream_name: str | None = None
    if isinstance(message, jsonrpc.Request) and message.method == "tools/call":
        curated = route.upstream_call(message, caller.principal, LEGACY_GENERATION)
        if isinstance(curated, Reject):
            return _error(request_id, curated.code, curated.message)
        # Decided under the client's name (policies name tools as clients see them); sent,
        # and kept with a task, under the upstream's.
        if curated is not message:  # renamed (most routes rename nothing: no copy then)
            upstream_name = str(jsonrpc.param(curated, "name"))
    if isinstance(decision, Reject):
        return _error(request_id, decision.code, decision.message)
    if isinstance(decision, dispatch.Deliver):
        try:
            taken = await session.deliver(decision.message)
            if not taken and not isinstance(decision.message, jsonrpc.Notification):
                await request.app[TASK_API].settle_anywhere(session, decision.message)
        except UpstreamError as exc:
            log.warning(
                "session %s: could not relay %s: %s",
                session.tag,
                type(decision.message).__name__,
                exc.message,
            )
            if not isinstance(decision.message, jsonrpc.Notification):
                return _not_relayed(exc)
        return web.Response(status=202)
    if isinstance(decision, dispatch.RunAsTask):
        admission.refuse_when_draining(request, "tasks")
        try:
            name = jsonrpc.param(decision.request, "name")
            call = curation.named(decision.request, upstream_name)
            questions = question_capabilities(session.client_capabilities)
            repeat = kept_call(call, questions) if route.repeats(str(name)) else None
            task = await request.app[RUNNER].submit(
                session.task_host,
                route.name,
                call,
                policy,
                route.limits,
                rerun_with=repeat,
            )
        except TaskError as exc:
            return _error(decision.request.id, exc.code, exc.message)
        return _json_response(rewrite.create_task_result(decision.request.id, task.wire(), policy))
    if isinstance(decision, Local):
        answer = await request.app[TASK_API].answer(session, decision.request, policy)
        if isinstance(answer, EventStream):
            return await _answer(request, http, answer)
        return _json_response(answer)
    rewriter = _rewriter(decision.rewrite, route, decision.request.method)
    forwarded = curation.named(decision.request, upstream_name)
    return await _answer(request, http, session.forward(forwarded, rewriter))


def _not_relayed(exc: UpstreamError) -> web.Response:
    """The client's answer to a server request did not reach the upstream; it may retry.

    An answer is a JSON-RPC response, which no JSON-RPC message replies to: the HTTP status
    is the only place to say so. 502 (504 when the upstream took too long) puts the fault
    upstream, where it is, and not on the gateway (500) or its capacity (503); the body's
    error has a null id, as it answers no request of the client's.
    """
    status = 504 if isinstance(exc, UpstreamTimeout) else 502
    message = (
        f"the answer did not reach the upstream: {exc.message}; the request it answers "
        "is still open, so the answer may be sent again"
    )
    return _json_response(jsonrpc.error_response(None, INTERNAL_ERROR, message), status)


def _rewriter(which: Rewrite | None, route: Route, method: str) -> Rewriter | None:
    if method != "tools/list":
        return None

    def tools_list(answer: Answer) -> Answer:
        if not isinstance(answer, jsonrpc.Response):
            return answer
        listed = route.listed(answer)  # curated whatever the version: hidden is hidden
        return rewrite.tools_list(listed, route.policy) if which is Rewrite.TOOLS_LIST else listed

    return tools_list


async def _initialize(
    request: web.Request, route: Route, init: jsonrpc.Request, caller: admission.Caller
) -> web.Response:
    if LEGACY_GENERATION not in route.generations:
        raise UnsupportedVersion(
            "this route serves only the session-less 2026-07-28 generation: send "
            "requests with params._meta instead of initialize",
            {"supported": served_versions(route.generations)},
        )
    admission.refuse_when_draining(request, "sessions")
    sessions = request.app[SESSIONS]
    session = await sessions.open(route, caller.principal, caller.limit_key)
    admission.remember_forwarded(request, route, session)
    try:
        answer = await session.upstream.initialize(init)
    except UpstreamError as exc:
        route.metrics.upstream_reached(route.name, False)
        await sessions.end(session)
        message = f"upstream unavailable: {exc.message}"
        return _error(init.id, INTERNAL_ERROR, message)
    except BaseException:
        await sessions.end(session)  # e.g. the route's child cap: no half-open session stays
        raise
    route.metrics.upstream_reached(route.name, True)
    if isinstance(answer, jsonrpc.ErrorResponse):
        await sessions.end(session)
        return _json_response(jsonrpc.with_id(answer, init.id))
    session.protocol_version = rewrite.negotiate_version(init)
    offer = dispatch.tasks_offered(route.policy, session.protocol_version)
    result = rewrite.initialize_result(
        jsonrpc.with_id(answer, init.id), session.protocol_version, offer, route.lists_tasks
    )
    await sessions.records.opened(session, init)
    log.info(
        "route %s: session %s opened (client %s, upstream %s)",
        route.name,
        session.tag,
        session.protocol_version,
        session.upstream.protocol_version,
    )
    return _json_response(result, headers={admission.SESSION_HEADER: session.id})


async def _answer(
    request: web.Request, http: HttpConfig, stream: EventStream
) -> web.StreamResponse:
    """JSON if the answer arrives alone within the window, else the stream as SSE."""
    if http.json_window_seconds > 0:
        await stream.first_change(http.json_window_seconds)
    # The answer is pushed and the stream closed in one step, so a closed stream holding a
    # single event holds exactly the answer.
    if stream.closed and stream.pushed == 1 and not stream.sse:
        first = stream.first_event()
        assert first is not None
        stream.sent = 1
        return _json_response(first)
    return await sse.serve(request, stream, after=0, prime=True, config=http)
