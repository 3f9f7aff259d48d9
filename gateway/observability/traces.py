"""OpenTelemetry traces (the `tracing` section, the optional extra `otel`).

Three kinds of span, on a TracerProvider of the gateway's own (never the global one):

    server    one per client request to a route, from its arrival to its answer (or the end
              of its stream); it continues the client's W3C trace context: the `traceparent`
              header, else `params._meta.traceparent` (where MCP clients put it)
    client    one per call to an upstream, a child of what caused it (the client's request,
              or the task); its context goes along in the request's `_meta` (every
              transport) and in the `traceparent` header (HTTP transports)
    task      one per task, from its creation to its terminal write; the task's upstream call
              is its child

Attributes come from closed sets only, as the metric labels do (metrics.py): the route, the
MCP method (known names, else `other`), the tool (names the upstream listed, else `other`),
and outcomes; never arguments or results, and a task id only with `include_task_ids`.
Nothing here runs unless tracing is configured: this module imports OpenTelemetry, and the
gateway imports it only then (`app.py`).
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Awaitable, Callable, Mapping
from contextvars import Token
from typing import Any

from aiohttp import web
from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.sdk.trace.sampling import ParentBased, TraceIdRatioBased
from opentelemetry.trace import Span, SpanKind, Status, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from gateway import __version__
from gateway.config import TracingConfig
from gateway.observability.metrics import Metrics
from gateway.observability.outcomes import call_outcome, request_outcome
from gateway.protocol import jsonrpc
from gateway.protocol.jsonrpc import Answer

TRACEPARENT = "traceparent"
TRACESTATE = "tracestate"
#: Longer values are not trace context (a v00 traceparent has 55 characters; W3C caps
#: tracestate at 512): they are ignored unparsed.
_MAX_FIELD = 512

# Attribute names: OpenTelemetry's semantic conventions for MCP where they have one.
ROUTE = "mcp.route"
METHOD = "mcp.method.name"
TOOL = "gen_ai.tool.name"
#: The member of a route of several an upstream call went to.
UPSTREAM = "mcp.upstream"
OUTCOME = "mcp.outcome"
HTTP_STATUS = "http.response.status_code"
TASK_STATUS = "mcp.task.status"
TASK_ID = "mcp.task.id"

#: One W3C tracestate list-member (https://www.w3.org/TR/trace-context/#tracestate-header).
_MEMBER = re.compile(
    r"(?:[a-z][_0-9a-z\-*/]{0,255}|[a-z0-9][_0-9a-z\-*/]{0,240}@[a-z][_0-9a-z\-*/]{0,13})"
    r"=[\x20-\x2b\x2d-\x3c\x3e-\x7e]{0,255}[\x21-\x2b\x2d-\x3c\x3e-\x7e]"
)

#: When a request arrived (ns since the epoch), its span, and the context token to detach.
STARTED = web.RequestKey("trace_started", int)
SPAN = web.RequestKey("trace_span", Span)
TOKEN: web.RequestKey[Token[Context]] = web.RequestKey("trace_token")


class Tracing:
    """The gateway's tracer: spans of the three kinds, exported over OTLP/HTTP (or to
    `processor`, which tests give an in-memory exporter)."""

    def __init__(
        self, config: TracingConfig, metrics: Metrics, processor: SpanProcessor | None = None
    ) -> None:
        self.include_task_ids = config.include_task_ids
        self._metrics = metrics
        self._provider = TracerProvider(
            resource=Resource.create({"service.name": config.service_name}),
            sampler=ParentBased(TraceIdRatioBased(config.sample_ratio)),
            # `close()` flushes when the app stops; an atexit hook would keep every test
            # app's provider alive until the interpreter ends.
            shutdown_on_exit=False,
        )
        if processor is None:
            processor = BatchSpanProcessor(OTLPSpanExporter(endpoint=config.traces_url))
        self._provider.add_span_processor(processor)
        self._tracer = self._provider.get_tracer("mcp-task-gateway", __version__)
        self._propagator = TraceContextTextMapPropagator()
        #: Task spans by task id, open until the task's terminal write.
        self._tasks: dict[str, Span] = {}

    # -- server spans

    def parent(self, headers: Mapping[str, Any], meta: Mapping[str, Any]) -> Context:
        """The client's trace context: its `traceparent` header, else `_meta.traceparent`;
        an empty context (a new trace) when neither is valid W3C trace context."""
        for carrier in (headers, meta):
            value = carrier.get(TRACEPARENT)
            if not isinstance(value, str) or len(value) > _MAX_FIELD:
                continue
            fields = {TRACEPARENT: value}
            state = carrier.get(TRACESTATE)
            if isinstance(state, str) and _valid_state(state):
                fields[TRACESTATE] = state
            found = self._propagator.extract(fields)
            if trace.get_current_span(found).get_span_context().is_valid:
                return found
        return Context()

    def begin_request(self, request: web.Request, route: str, message: jsonrpc.Message) -> None:
        """A route's request was parsed: its server span starts (dated from its arrival),
        continuing the client's trace, and is current while it is handled."""
        method = _method(message)
        attributes: dict[str, str] = {ROUTE: route, METHOD: self._metrics.method(method)}
        if method == "tools/call" and isinstance(message, jsonrpc.Request):
            attributes[TOOL] = self._metrics.tool(route, jsonrpc.param(message, "name"))
        self._start_request(request, route, attributes, _meta(message))

    def _start_request(
        self,
        request: web.Request,
        route: str,
        attributes: dict[str, str],
        meta: Mapping[str, Any],
    ) -> None:
        span = self._tracer.start_span(
            f"{attributes[METHOD]} {route}",
            context=self.parent(request.headers, meta),
            kind=SpanKind.SERVER,
            attributes=attributes,
            start_time=request.get(STARTED),
        )
        request[SPAN] = span
        request[TOKEN] = otel_context.attach(trace.set_span_in_context(span))

    def end_request(self, request: web.Request, route: str, method: str, status: int) -> None:
        """The request was answered with HTTP `status` (0: the client went away first). A
        request refused before its body was read gets its span now."""
        span = request.get(SPAN)
        if span is None:
            attributes = {ROUTE: route, METHOD: self._metrics.method(method)}
            self._start_request(request, route, attributes, {})
            span = request[SPAN]
        otel_context.detach(request[TOKEN])
        if status:
            span.set_attribute(HTTP_STATUS, status)
        span.set_attribute(OUTCOME, request_outcome(status))
        if status >= 500:
            span.set_status(Status(StatusCode.ERROR))
        span.end()

    # -- client spans

    def upstream(self, route: str, member: str | None = None, prefix: str = "") -> UpstreamSpans:
        """The spans of a route's upstream calls; of its `member`'s, on a route of several,
        whose tool names read to clients with `prefix` (MEMBER__)."""
        return UpstreamSpans(self, route, member, prefix)

    def _start_upstream(
        self, spans: UpstreamSpans, request: jsonrpc.Request
    ) -> tuple[Span, jsonrpc.Request]:
        route = spans.route
        attributes = {ROUTE: route, METHOD: self._metrics.method(request.method)}
        if spans.member is not None:
            attributes[UPSTREAM] = spans.member
        if request.method == "tools/call":
            name = jsonrpc.param(request, "name")
            shown = f"{spans.prefix}{name}" if spans.prefix and isinstance(name, str) else name
            attributes[TOOL] = self._metrics.tool(route, shown)
        span = self._tracer.start_span(
            f"upstream {attributes[METHOD]} {route}", kind=SpanKind.CLIENT, attributes=attributes
        )
        carrier: dict[str, str] = {}
        self._propagator.inject(carrier, context=trace.set_span_in_context(span))
        # The client's own trace fields give way to ours: the upstream continues this span.
        meta = {k: v for k, v in request.meta.items() if k not in (TRACEPARENT, TRACESTATE)}
        return span, jsonrpc.with_param(request, "_meta", {**meta, **carrier})

    # -- task spans

    def task_begun(self, task_id: str, route: str, tool: str) -> None:
        """A task was created (or is run again after a restart): its span starts, a child
        of the request that made it."""
        attributes = {ROUTE: route, TOOL: self._metrics.tool(route, tool)}
        if self.include_task_ids:
            attributes[TASK_ID] = task_id
        self._tasks[task_id] = self._tracer.start_span(
            f"task tools/call {attributes[TOOL]}", kind=SpanKind.INTERNAL, attributes=attributes
        )

    def task_running(self, task_id: str) -> None:
        """Called first thing in the task's own asyncio task: its span is current there, so
        the upstream call is its child (that task's context ends with it: no detach)."""
        span = self._tasks.get(task_id)
        if span is not None:
            otel_context.attach(trace.set_span_in_context(span))

    def task_ended(self, task_id: str, status: str) -> None:
        """The task's terminal write (`status`), or its run stopped here without one
        (`stopped`: cancelled, expired, taken over, or left for the next process)."""
        span = self._tasks.pop(task_id, None)
        if span is None:
            return
        span.set_attribute(TASK_STATUS, status)
        if status == "failed":
            span.set_status(Status(StatusCode.ERROR))
        span.end()

    async def close(self) -> None:
        """Flush what is left (the exporter posts from a thread of its own) and stop."""
        for task_id in list(self._tasks):
            self.task_ended(task_id, "stopped")
        await asyncio.to_thread(self._provider.shutdown)


class UpstreamSpans:
    """What one route's upstream clients trace: a span per call, its context sent along."""

    def __init__(self, tracing: Tracing, route: str, member: str | None, prefix: str) -> None:
        self._tracing = tracing
        self.route, self.member, self.prefix = route, member, prefix

    async def call(
        self, send: Callable[[jsonrpc.Request], Awaitable[Answer]], request: jsonrpc.Request
    ) -> Answer:
        """`send(request)` under a client span, the request carrying its context in `_meta`.

        Raises:
            whatever `send` raises.
        """
        span, request = self._tracing._start_upstream(self, request)
        try:
            answer = await send(request)
        except asyncio.CancelledError:
            _end_upstream(span, "cancelled")
            raise
        except BaseException as exc:
            _end_upstream(span, call_outcome(None, exc))
            raise
        _end_upstream(span, call_outcome(answer))
        return answer


def _end_upstream(span: Span, outcome: str) -> None:
    span.set_attribute(OUTCOME, outcome)
    if outcome not in ("ok", "tool_error", "cancelled"):
        span.set_status(Status(StatusCode.ERROR))
    span.end()


def _method(message: jsonrpc.Message) -> str:
    if isinstance(message, jsonrpc.Request):
        return message.method
    return "notification" if isinstance(message, jsonrpc.Notification) else "response"


def _valid_state(value: str) -> bool:
    """W3C tracestate, checked here: the SDK logs what it refuses (client text, each time)."""
    if len(value) > _MAX_FIELD:
        return False
    members = [m.strip(" \t") for m in value.split(",")]
    return all(_MEMBER.fullmatch(m) for m in members if m)


def _meta(message: jsonrpc.Message) -> Mapping[str, Any]:
    if isinstance(message, jsonrpc.Request | jsonrpc.Notification):
        found = (message.params or {}).get("_meta")
        if isinstance(found, dict):
            return found
    return {}
