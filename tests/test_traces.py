"""OpenTelemetry traces over real HTTP: the gateway on a port, its spans in the SDK's in-memory
exporter, and real upstreams that record the trace context they are sent (HTTP headers and
`_meta`, over Streamable HTTP and stdio)."""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml
from aiohttp.test_utils import TestServer
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from gateway.app import TRACING_MISSING, create_app
from gateway.config import ConfigError, ListenConfig, Settings, parse_settings
from gateway.http import listen
from gateway.http.keys import TRACING

from .conftest import DEMO
from .fakes import RECEIVED, SEEN, legacy_sse_app
from .helpers import (
    headers,
    modern_rpc,
    open_session,
    rpc,
    start_task,
    task_terminal,
)

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
SPAN_ID = "00f067aa0ba902b7"
TRACEPARENT = f"00-{TRACE_ID}-{SPAN_ID}-01"
TRACING_ON = {"otlp_endpoint": "http://127.0.0.1:4318"}
#: A tool argument no span may carry.
SECRET = "s3cret-argument-value"


class Spans(InMemorySpanExporter):
    """The SDK's in-memory exporter, telling waiters when a span ended (spans end on the
    event loop's thread: the processor exports at once)."""

    def __init__(self) -> None:
        super().__init__()
        self.ended = asyncio.Event()

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        result = super().export(spans)
        self.ended.set()
        return result


Traced = tuple[str, Spans]
StartTraced = Callable[..., Awaitable[Traced]]


@pytest.fixture
async def start_traced(make_settings: Callable[..., Settings]) -> AsyncIterator[StartTraced]:
    """Starts a gateway with tracing on, on a real port; returns its base URL and the
    in-memory exporter its spans go to."""
    runners = []

    async def start(routes: list[dict[str, Any]], **tracing: Any) -> Traced:
        exporter = Spans()
        settings = make_settings(routes, tracing={**TRACING_ON, **tracing})
        app = create_app(settings, span_processor=SimpleSpanProcessor(exporter))
        address = ListenConfig(host="127.0.0.1", port=0)
        runner = await listen.start(app, address, settings.http)
        runners.append(runner)
        host, port = runner.addresses[0][:2]
        return f"http://{host}:{port}", exporter

    yield start
    for runner in runners:
        await runner.cleanup()


def http_route(recorder: TestServer) -> list[dict[str, Any]]:
    upstream = {"transport": "streamable_http", "url": str(recorder.make_url("/mcp"))}
    # `echo` is a tool the route knows (its task policy names it): a label of its own.
    return [{"name": "rec", "upstream": upstream, "tasks": {"tools": {"echo": "optional"}}}]


def call(name: str, request_id: int = 5, **meta: Any) -> dict[str, Any]:
    params: dict[str, Any] = {"name": name, "arguments": {"text": SECRET}}
    if meta:
        params["_meta"] = meta
    return {"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": params}


async def post(
    http: aiohttp.ClientSession, url: str, session_id: str, message: dict[str, Any], **extra: str
) -> dict[str, Any]:
    async with http.post(url, json=message, headers=headers(session_id, **extra)) as resp:
        assert resp.status == 200
        return dict(await resp.json())


def named(spans: Sequence[ReadableSpan], name: str) -> ReadableSpan:
    found = [span for span in spans if span.name == name]
    assert len(found) == 1, [span.name for span in spans]
    return found[0]


async def span_named(exporter: Spans, name: str) -> ReadableSpan:
    """The span called `name`, once it has ended (a task's, after its terminal write)."""
    async with asyncio.timeout(5):
        while not any(span.name == name for span in exporter.get_finished_spans()):
            exporter.ended.clear()
            await exporter.ended.wait()
    return named(exporter.get_finished_spans(), name)


def ids(span: ReadableSpan) -> tuple[str, str]:
    context = span.get_span_context()
    assert context is not None
    return format(context.trace_id, "032x"), format(context.span_id, "016x")


def parent_id(span: ReadableSpan) -> str | None:
    return None if span.parent is None else format(span.parent.span_id, "016x")


def attribute_values(spans: Sequence[ReadableSpan]) -> list[str]:
    return [str(v) for span in spans for v in (span.attributes or {}).values()]


async def test_a_client_traceparent_header_is_continued_and_sent_on_in_header_and_meta(
    start_traced: StartTraced, recorder: TestServer
) -> None:
    base, exporter = await start_traced(http_route(recorder))
    url = f"{base}/rec/mcp"
    async with aiohttp.ClientSession() as http:
        session_id = await open_session(http, url)
        await post(http, url, session_id, call("echo"), traceparent=TRACEPARENT)

    spans = exporter.get_finished_spans()
    server = named(spans, "tools/call rec")
    upstream = named(spans, "upstream tools/call rec")
    assert server.kind is SpanKind.SERVER and upstream.kind is SpanKind.CLIENT
    assert ids(server)[0] == TRACE_ID and parent_id(server) == SPAN_ID
    assert ids(upstream)[0] == TRACE_ID and parent_id(upstream) == ids(server)[1]
    assert dict(server.attributes or {}) == {
        "mcp.route": "rec",
        "mcp.method.name": "tools/call",
        "gen_ai.tool.name": "echo",
        "http.response.status_code": 200,
        "mcp.outcome": "ok",
    }
    assert dict(upstream.attributes or {}) == {
        "mcp.route": "rec",
        "mcp.method.name": "tools/call",
        "gen_ai.tool.name": "echo",
        "mcp.outcome": "ok",
    }
    # The upstream continues the gateway's client span: in the header and in _meta alike.
    sent = f"00-{TRACE_ID}-{ids(upstream)[1]}-01"
    tool_call = next(m for m in recorder.app[RECEIVED] if m.get("method") == "tools/call")
    assert tool_call["params"]["_meta"]["traceparent"] == sent
    assert tool_call["params"]["arguments"] == {"text": SECRET}
    assert recorder.app[SEEN][-1]["traceparent"] == sent
    assert SECRET not in json.dumps(attribute_values(spans))


async def test_a_meta_traceparent_and_tracestate_are_continued_when_no_header_says_otherwise(
    start_traced: StartTraced, recorder: TestServer
) -> None:
    base, exporter = await start_traced(http_route(recorder))
    url = f"{base}/rec/mcp"
    async with aiohttp.ClientSession() as http:
        session_id = await open_session(http, url)
        message = call("echo", traceparent=TRACEPARENT, tracestate="vendor=abc")
        await post(http, url, session_id, message)

    spans = exporter.get_finished_spans()
    server = named(spans, "tools/call rec")
    upstream = named(spans, "upstream tools/call rec")
    assert ids(server)[0] == TRACE_ID and parent_id(server) == SPAN_ID
    tool_call = next(m for m in recorder.app[RECEIVED] if m.get("method") == "tools/call")
    meta = tool_call["params"]["_meta"]
    assert meta["traceparent"] == f"00-{TRACE_ID}-{ids(upstream)[1]}-01"
    assert meta["tracestate"] == "vendor=abc"
    assert recorder.app[SEEN][-1]["tracestate"] == "vendor=abc"


async def test_every_request_of_a_session_gets_a_span_and_the_handshake_a_client_span(
    start_traced: StartTraced, recorder: TestServer
) -> None:
    base, exporter = await start_traced(http_route(recorder))
    url = f"{base}/rec/mcp"
    async with aiohttp.ClientSession() as http:
        session_id = await open_session(http, url)
        async with http.delete(url, headers=headers(session_id)) as resp:
            assert resp.status == 200
        async with http.post(url, json=call("echo"), headers=headers("no-such")) as resp:
            assert resp.status == 404

    names = sorted(span.name for span in exporter.get_finished_spans())
    assert names == [
        "DELETE rec",
        "initialize rec",
        "notification rec",
        "tools/call rec",
        "upstream initialize rec",
    ]
    refused = named(exporter.get_finished_spans(), "tools/call rec")
    assert refused.attributes is not None and refused.attributes["mcp.outcome"] == "rejected"


async def test_a_stdio_upstream_gets_the_trace_context_in_meta(
    start_traced: StartTraced, tmp_path: Path
) -> None:
    seen = tmp_path / "stdin.jsonl"
    # The demo, with every line it reads copied to a file first.
    command = ["sh", "-c", f"tee -a {seen} | {sys.executable} -m gateway.demo"]
    base, exporter = await start_traced(
        [{"name": "io", "upstream": {"transport": "stdio", "command": command}}]
    )
    url = f"{base}/io/mcp"
    async with aiohttp.ClientSession() as http:
        session_id = await open_session(http, url)
        answer = await post(http, url, session_id, call("echo"), traceparent=TRACEPARENT)
    assert answer["result"]["content"][0]["text"] == SECRET

    upstream = named(exporter.get_finished_spans(), "upstream tools/call io")
    assert ids(upstream)[0] == TRACE_ID
    # tee writes the line on to the demo first, then to the file.
    async with asyncio.timeout(5):
        while '"tools/call"' not in seen.read_text():  # noqa: ASYNC110 - another process writes it
            await asyncio.sleep(0.02)
    lines = [json.loads(line) for line in seen.read_text().splitlines()]
    tool_call = next(m for m in lines if m.get("method") == "tools/call")
    assert tool_call["params"]["_meta"]["traceparent"] == f"00-{TRACE_ID}-{ids(upstream)[1]}-01"


async def test_an_http_sse_upstream_gets_the_trace_context_in_the_header(
    start_traced: StartTraced,
) -> None:
    server = TestServer(legacy_sse_app(), host="127.0.0.1")
    await server.start_server()
    try:
        upstream = {"transport": "sse", "url": str(server.make_url("/sse"))}
        base, exporter = await start_traced([{"name": "old", "upstream": upstream}])
        url = f"{base}/old/mcp"
        async with aiohttp.ClientSession() as http:
            session_id = await open_session(http, url)
            await post(http, url, session_id, call("echo"), traceparent=TRACEPARENT)
    finally:
        await server.close()

    upstream_span = named(exporter.get_finished_spans(), "upstream tools/call old")
    sent = f"00-{TRACE_ID}-{ids(upstream_span)[1]}-01"
    assert sent in [seen.get("traceparent") for seen in server.app[SEEN]]


async def test_a_task_span_runs_from_creation_to_the_terminal_write_without_its_id(
    start_traced: StartTraced,
) -> None:
    base, exporter = await start_traced([{"name": "demo", "upstream": DEMO}])
    url = f"{base}/demo/mcp"
    async with aiohttp.ClientSession() as http:
        session_id = await open_session(http, url)
        await rpc(http, url, session_id, "tools/list", {})  # the tool names become known
        hdrs = headers(session_id, traceparent=TRACEPARENT)
        params = {"name": "slow", "arguments": {"seconds": 0.3}, "task": {}}
        message = {"jsonrpc": "2.0", "id": 5, "method": "tools/call", "params": params}
        async with http.post(url, json=message, headers=hdrs) as resp:
            task_id = (await resp.json())["result"]["task"]["taskId"]
        task = await task_terminal(http, url, session_id, task_id)
    assert task["status"] == "completed"

    span = await span_named(exporter, "task tools/call slow")
    spans = exporter.get_finished_spans()
    creating = next(s for s in spans if s.name == "tools/call demo" and ids(s)[0] == TRACE_ID)
    upstream = named(spans, "upstream tools/call demo")
    assert dict(span.attributes or {}) == {
        "mcp.route": "demo",
        "gen_ai.tool.name": "slow",
        "mcp.task.status": "completed",
    }
    # A child of the request that made it, the parent of its upstream call, and open from
    # creation (within that request) until after the call's answer was written.
    assert ids(span)[0] == TRACE_ID and parent_id(span) == ids(creating)[1]
    assert parent_id(upstream) == ids(span)[1]
    assert creating.start_time is not None and span.start_time is not None
    assert creating.end_time is not None and span.end_time is not None
    assert upstream.start_time is not None and upstream.end_time is not None
    assert creating.start_time <= span.start_time <= creating.end_time
    assert span.start_time <= upstream.start_time and upstream.end_time <= span.end_time
    assert span.end_time - span.start_time >= 300_000_000
    assert task_id not in json.dumps(attribute_values(spans))


async def test_task_ids_are_on_task_spans_only_when_the_operator_opts_in(
    start_traced: StartTraced,
) -> None:
    base, exporter = await start_traced([{"name": "demo", "upstream": DEMO}], include_task_ids=True)
    url = f"{base}/demo/mcp"
    async with aiohttp.ClientSession() as http:
        session_id = await open_session(http, url)
        task_id = await start_task(http, url, session_id, "echo", {"text": SECRET})
        await task_terminal(http, url, session_id, task_id)

    span = await span_named(exporter, "task tools/call other")
    assert span.attributes is not None and span.attributes["mcp.task.id"] == task_id
    holders = [s.name for s in exporter.get_finished_spans() if task_id in str(s.attributes)]
    assert holders == ["task tools/call other"]
    assert SECRET not in json.dumps(attribute_values(exporter.get_finished_spans()))


async def test_names_a_client_makes_up_are_other_in_spans(
    start_traced: StartTraced, recorder: TestServer
) -> None:
    base, exporter = await start_traced(http_route(recorder))
    url = f"{base}/rec/mcp"
    async with aiohttp.ClientSession() as http:
        session_id = await open_session(http, url)
        await post(http, url, session_id, call(f"tool-{SECRET}"))
        weird = {"jsonrpc": "2.0", "id": 6, "method": f"x/{SECRET}", "params": {}}
        await post(http, url, session_id, weird)

    spans = exporter.get_finished_spans()
    assert SECRET not in json.dumps([s.name for s in spans] + attribute_values(spans))
    server = named(spans, "tools/call rec")
    assert server.attributes is not None and server.attributes["gen_ai.tool.name"] == "other"
    upstream = named(spans, "upstream other rec")
    assert upstream.attributes is not None and upstream.attributes["mcp.method.name"] == "other"


HOSTILE = [
    "garbage",
    f"ff-{TRACE_ID}-{SPAN_ID}-01",  # version ff is invalid
    f"00-{'0' * 32}-{SPAN_ID}-01",  # all-zero trace id
    f"00-{TRACE_ID}-{'0' * 16}-01",  # all-zero parent id
    f"00-{TRACE_ID.upper()}-{SPAN_ID}-01",  # upper case hex
    f"00-{TRACE_ID}-{SPAN_ID}-01" + "-x" * 3000,  # huge
    "00-" + "a" * 6000,
]


@pytest.mark.parametrize("value", HOSTILE, ids=lambda v: v[:12])
async def test_hostile_traceparents_are_ignored_for_a_new_trace(
    start_traced: StartTraced, recorder: TestServer, value: str
) -> None:
    base, exporter = await start_traced(http_route(recorder))
    url = f"{base}/rec/mcp"
    async with aiohttp.ClientSession() as http:
        session_id = await open_session(http, url)
        await post(http, url, session_id, call("echo", 1), traceparent=value, tracestate=value)
        await post(http, url, session_id, call("echo", 2, traceparent=value, tracestate=value))
        odd: list[Any] = [{"a": 1}, 7, None, ["x"]]
        for number, kind in enumerate(odd, 3):
            await post(http, url, session_id, call("echo", number, traceparent=kind))

    calls = [s for s in exporter.get_finished_spans() if s.name == "tools/call rec"]
    assert len(calls) == 6
    assert all(s.parent is None and ids(s)[0] not in (TRACE_ID, "0" * 32) for s in calls)
    for message in recorder.app[RECEIVED]:
        meta = message.get("params", {}).get("_meta", {})
        if message.get("method") == "tools/call":
            assert meta["traceparent"].startswith("00-") and len(meta["traceparent"]) == 55
            assert "tracestate" not in meta


@pytest.mark.parametrize("state", ["bad state\n evil", "a=1,b=\x7f", "A=1", "k=" + "v" * 600])
async def test_a_hostile_tracestate_is_dropped_unlogged_and_the_trace_still_continued(
    start_traced: StartTraced,
    recorder: TestServer,
    state: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    base, exporter = await start_traced(http_route(recorder))
    url = f"{base}/rec/mcp"
    async with aiohttp.ClientSession() as http:
        session_id = await open_session(http, url)
        await post(http, url, session_id, call("echo", traceparent=TRACEPARENT, tracestate=state))

    server = named(exporter.get_finished_spans(), "tools/call rec")
    assert ids(server)[0] == TRACE_ID and parent_id(server) == SPAN_ID
    tool_call = next(m for m in recorder.app[RECEIVED] if m.get("method") == "tools/call")
    assert "tracestate" not in tool_call["params"]["_meta"]
    assert not [r for r in caplog.records if r.name.startswith("opentelemetry")]


async def test_a_2026_07_28_request_continues_the_trace_over_a_held_session(
    start_traced: StartTraced, recorder: TestServer
) -> None:
    base, exporter = await start_traced(http_route(recorder))
    async with aiohttp.ClientSession() as http:
        status, _ = await modern_rpc(
            http, f"{base}/rec/mcp", "tools/list", extra={"traceparent": TRACEPARENT}
        )
    assert status == 200

    spans = exporter.get_finished_spans()
    server = named(spans, "tools/list rec")
    listed = named(spans, "upstream tools/list rec")
    assert ids(server)[0] == TRACE_ID and parent_id(server) == SPAN_ID
    assert parent_id(listed) == ids(server)[1]
    sent = [m for m in recorder.app[RECEIVED] if m.get("method") == "tools/list"]
    assert sent[0]["params"]["_meta"]["traceparent"] == f"00-{TRACE_ID}-{ids(listed)[1]}-01"
    assert not any(s.name == "initialize rec" for s in spans)


async def test_a_native_2026_07_28_upstream_gets_the_trace_context_in_header_and_meta(
    start_traced: StartTraced, recorder: TestServer
) -> None:
    upstream = {
        "transport": "streamable_http",
        "url": str(recorder.make_url("/mcp")),
        "modern": "native",
    }
    base, exporter = await start_traced([{"name": "nat", "upstream": upstream}])
    async with aiohttp.ClientSession() as http:
        status, _ = await modern_rpc(
            http, f"{base}/nat/mcp", "tools/list", extra={"traceparent": TRACEPARENT}
        )
    assert status == 200

    listed = named(exporter.get_finished_spans(), "upstream tools/list nat")
    assert ids(listed)[0] == TRACE_ID
    sent = f"00-{TRACE_ID}-{ids(listed)[1]}-01"
    assert recorder.app[RECEIVED][-1]["params"]["_meta"]["traceparent"] == sent
    assert recorder.app[SEEN][-1]["traceparent"] == sent


async def test_without_tracing_nothing_is_added_and_the_client_meta_passes_untouched(
    make_settings: Callable[..., Settings], recorder: TestServer
) -> None:
    settings = make_settings(http_route(recorder))
    app = create_app(settings)
    assert app[TRACING] is None
    runner = await listen.start(app, ListenConfig(host="127.0.0.1", port=0), settings.http)
    try:
        host, port = runner.addresses[0][:2]
        url = f"http://{host}:{port}/rec/mcp"
        async with aiohttp.ClientSession() as http:
            session_id = await open_session(http, url)
            message = call("echo", traceparent=TRACEPARENT)
            await post(http, url, session_id, message, traceparent=TRACEPARENT)
    finally:
        await runner.cleanup()
    tool_call = next(m for m in recorder.app[RECEIVED] if m.get("method") == "tools/call")
    assert tool_call["params"]["_meta"] == {"traceparent": TRACEPARENT}
    assert all("traceparent" not in seen for seen in recorder.app[SEEN])


def test_a_tracing_section_without_the_otel_extra_stops_start_up_naming_the_extra(
    make_settings: Callable[..., Settings], monkeypatch: pytest.MonkeyPatch
) -> None:
    # As when the packages are not installed: importing them fails.
    monkeypatch.setitem(sys.modules, "opentelemetry", None)
    for module in ("gateway.observability.traces", "gateway.http.traced"):
        monkeypatch.delitem(sys.modules, module, raising=False)
    with pytest.raises(ValueError) as raised:
        create_app(make_settings(tracing=TRACING_ON))
    assert str(raised.value) == TRACING_MISSING
    assert "pip install 'mcp-task-gateway[otel]'" in str(raised.value)
    # Without the section, the gateway needs none of it.
    assert create_app(make_settings())[TRACING] is None


@pytest.mark.parametrize(
    ("tracing", "error"),
    [
        ({}, "tracing.otlp_endpoint: required"),
        ({"otlp_endpoint": "collector:4318"}, "tracing.otlp_endpoint: must be an http://"),
        ({"otlp_endpoint": "ftp://h:4318"}, "tracing.otlp_endpoint: must be an http://"),
        ({"otlp_endpoint": "http://h:99999"}, "tracing.otlp_endpoint: must be an http://"),
        ({"otlp_endpoint": "http://u:pw@h:4318"}, "tracing.otlp_endpoint: must not hold"),
        ({"otlp_endpoint": "http://h:4318/v1/traces"}, "tracing.otlp_endpoint: is the collector"),
        ({"otlp_endpoint": "http://h:4318?x=1"}, "tracing.otlp_endpoint: takes no query"),
        ({**TRACING_ON, "service_name": ""}, "tracing.service_name: String should have at least"),
        ({**TRACING_ON, "sample_ratio": 2}, "tracing.sample_ratio: Input should be less than"),
        ({**TRACING_ON, "include_task_ids": "maybe"}, "tracing.include_task_ids: Input should"),
        ({**TRACING_ON, "endpoint": "x"}, "tracing.endpoint: unknown key"),
    ],
)
def test_bad_tracing_settings_are_refused_naming_the_key(
    tracing: dict[str, Any], error: str
) -> None:
    data = {"tracing": tracing, "routes": [{"name": "d", "upstream": DEMO}]}
    with pytest.raises(ConfigError) as raised:
        parse_settings(data, "gateway.yaml")
    assert f"gateway.yaml: {error}" in str(raised.value)
    assert "pw" not in str(raised.value)


def test_the_shipped_config_documents_tracing_with_its_defaults() -> None:
    """config/gateway.yaml has the section off, its keys in comments; written out, valid."""
    shipped = (Path(__file__).resolve().parent.parent / "config" / "gateway.yaml").read_text()
    lines = shipped.split("\ntracing: null", 1)[1].splitlines()[1:]
    documented = []
    for line in lines:
        if not line.lstrip().startswith("#"):
            break
        documented.append(line.lstrip().removeprefix("#").strip())
    section = yaml.safe_load("\n".join(documented))
    data: dict[str, Any] = {"tracing": section, "routes": [{"name": "d", "upstream": DEMO}]}
    tracing = parse_settings(data, "gateway.yaml").tracing
    assert tracing is not None
    assert set(section) == set(type(tracing).model_fields)
    assert tracing.service_name == "mcp-task-gateway" and tracing.include_task_ids is False
    assert tracing.sample_ratio == 1.0 and tracing.traces_url.endswith(":4318/v1/traces")


async def test_a_members_upstream_span_names_the_member_and_the_tool_as_clients_call_it(
    start_traced: StartTraced, recorder: TestServer
) -> None:
    upstream = {"transport": "streamable_http", "url": str(recorder.make_url("/mcp"))}
    members = [{"name": "a", **upstream}, {"name": "b", **upstream}]
    route = {"name": "rec", "upstreams": members, "tasks": {"tools": {"a__echo": "optional"}}}
    base, exporter = await start_traced([route])
    url = f"{base}/rec/mcp"
    async with aiohttp.ClientSession() as http:
        session_id = await open_session(http, url)
        await post(http, url, session_id, call("a__echo"))
    upstream_span = named(exporter.get_finished_spans(), "upstream tools/call rec")
    assert upstream_span.attributes is not None
    assert upstream_span.attributes["mcp.upstream"] == "a"
    assert upstream_span.attributes["gen_ai.tool.name"] == "a__echo"
    sent = [m for m in recorder.app[RECEIVED] if m.get("method") == "tools/call"]
    assert [m["params"]["name"] for m in sent] == ["echo"]  # the member's own name
