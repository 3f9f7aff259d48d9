"""limits.stored_bytes_per_principal: what a caller's tasks keep in the store is capped; past
the quota new tasks are refused with a clear error, and finished work stays readable."""

from __future__ import annotations

import aiohttp

from .conftest import StartGateway
from .helpers import open_session, rpc, start_task, task_terminal


async def test_past_its_stored_bytes_quota_a_caller_gets_no_new_task(
    start_gateway: StartGateway,
) -> None:
    base = await start_gateway(limits={"stored_bytes_per_principal": 4096})
    url = f"{base}/demo/mcp"
    text = "x" * 1000  # kept twice in its result: as content and as structuredContent
    async with aiohttp.ClientSession() as http:
        session = await open_session(http, url)
        kept = []
        for _ in range(2):  # the first keeps about 2 kB, under the quota; the second goes past it
            task_id = await start_task(http, url, session, "echo", {"text": text})
            assert (await task_terminal(http, url, session, task_id))["status"] == "completed"
            kept.append(task_id)
        call = {"name": "echo", "arguments": {"text": "one more"}, "task": {}}
        refused = await rpc(http, url, session, "tools/call", call, request_id=5)
        # A plain call keeps nothing: it is not refused.
        plain = await rpc(
            http,
            url,
            session,
            "tools/call",
            {"name": "echo", "arguments": {"text": "ok"}},
            request_id=6,
        )
        still = await rpc(http, url, session, "tasks/result", {"taskId": kept[0]}, request_id=7)
        metrics = await (await http.get(f"{base}/metrics")).text()
    assert refused["error"]["code"] == -32000
    assert "limits.stored_bytes_per_principal: 4096" in refused["error"]["message"]
    assert plain["result"]["content"][0]["text"] == "ok"
    assert still["result"]["content"][0]["text"] == text
    assert 'mcp_gateway_limited_requests_total{limit="stored_bytes",route="demo"} 1.0' in metrics
