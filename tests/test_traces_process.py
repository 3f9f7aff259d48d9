"""Traces from the real command: `python -m gateway --config F` exporting over OTLP/HTTP to a
collector of the test's own, which decodes what arrives as the protobuf an OTel collector
reads; the spans still queued at SIGTERM are flushed before the process exits."""

from __future__ import annotations

import asyncio
import signal
import time
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

from .conftest import free_port
from .helpers import headers, open_session, start_process, write_config

TRACE_A = "4bf92f3577b34da6a3ce929d0e0e4736"
TRACE_B = "0af7651916cd43dd8448eb211c80319c"


class Collector:
    """POST /v1/traces: every span received, as (arrival time, trace id, name, service)."""

    def __init__(self) -> None:
        self.spans: list[tuple[float, str, str, str]] = []
        self.arrived = asyncio.Event()

    async def receive(self, request: web.Request) -> web.Response:
        assert request.content_type == "application/x-protobuf"
        export = ExportTraceServiceRequest()
        export.ParseFromString(await request.read())
        now = time.monotonic()
        for resource in export.resource_spans:
            service = next(
                a.value.string_value
                for a in resource.resource.attributes
                if a.key == "service.name"
            )
            for scope in resource.scope_spans:
                for span in scope.spans:
                    self.spans.append((now, span.trace_id.hex(), span.name, service))
        self.arrived.set()
        body = ExportTraceServiceResponse().SerializeToString()
        return web.Response(body=body, content_type="application/x-protobuf")

    async def trace(self, trace_id: str, name: str) -> float:
        """When the span `name` of trace `trace_id` arrived (waiting for it)."""
        async with asyncio.timeout(20):
            while True:
                for arrived, trace, span, _ in self.spans:
                    if (trace, span) == (trace_id, name):
                        return arrived
                self.arrived.clear()
                await self.arrived.wait()


@pytest.fixture
async def collector() -> AsyncIterator[tuple[Collector, str]]:
    received = Collector()
    app = web.Application()
    app.router.add_post("/v1/traces", received.receive)
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    yield received, str(server.make_url("")).rstrip("/")
    await server.close()


async def tool_call(http: aiohttp.ClientSession, url: str, session_id: str, trace: str) -> None:
    message = {
        "jsonrpc": "2.0",
        "id": 3,
        "method": "tools/call",
        "params": {"name": "echo", "arguments": {"text": "hi"}},
    }
    hdrs = headers(session_id, traceparent=f"00-{trace}-00f067aa0ba902b7-01")
    async with http.post(url, json=message, headers=hdrs) as resp:
        assert resp.status == 200
        assert (await resp.json())["result"]["content"][0]["text"] == "hi"


async def test_the_command_exports_spans_over_otlp_and_flushes_the_rest_at_sigterm(
    tmp_path: Path, collector: tuple[Collector, str]
) -> None:
    received, endpoint = collector
    port = free_port()
    tracing = f"tracing: {{otlp_endpoint: {endpoint}, service_name: gw-under-test}}"
    config = write_config(tmp_path, port, tracing)
    log = tmp_path / "gateway.log"
    proc = await asyncio.to_thread(start_process, config, port, log)
    try:
        url = f"http://127.0.0.1:{port}/demo/mcp"
        async with aiohttp.ClientSession() as http:
            session_id = await open_session(http, url)
            await tool_call(http, url, session_id, TRACE_A)
            # Exported in the background, within the batch's delay (5 s by default).
            await received.trace(TRACE_A, "upstream tools/call demo")
            await tool_call(http, url, session_id, TRACE_B)
        stopped = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        assert await asyncio.to_thread(proc.wait, 20) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    # Queued when the signal came, sent before the process ended.
    assert await received.trace(TRACE_B, "tools/call demo") >= stopped
    await received.trace(TRACE_B, "upstream tools/call demo")
    assert {service for *_, service in received.spans} == {"gw-under-test"}
    assert "Traceback" not in log.read_text()
