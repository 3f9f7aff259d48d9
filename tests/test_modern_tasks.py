"""The tasks extension (SEP-2663) and MRTR on the 2026-07-28 path, over real HTTP, in front of
the bundled demo server (stdio) and the SDK's legacy server (Streamable HTTP).

The spec's words are quoted where a test pins them: `../shared/spec/tasks-extension-2026-07-28.md`
summarises the extension and names its sources, `basic/patterns/mrtr.mdx` is MRTR's.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from gateway.protocol.errors import (
    HEADER_MISMATCH,
    INVALID_PARAMS,
    METHOD_NOT_FOUND,
    MISSING_REQUIRED_CLIENT_CAPABILITY,
)

from .conftest import DEMO, StartGateway, free_port
from .fakes import FAULT_HOOKS
from .helpers import (
    INIT,
    TASKS_EXTENSION,
    WITH_ELICITATION,
    WITH_TASKS,
    headers,
    modern_inputs,
    modern_rpc,
    modern_terminal,
    start_process,
    write_config,
)

BOTH = {**WITH_TASKS, **WITH_ELICITATION}
ALICE_KEY, BOB_KEY = "alice-key-0123456789", "bob-key-9876543210"
KEYS = {
    "mode": "api_keys",
    "api_keys": [
        {"principal": name, "sha256": hashlib.sha256(key.encode()).hexdigest()}
        for name, key in (("alice", ALICE_KEY), ("bob", BOB_KEY))
    ],
}
POLICY = {"tools": {"echo": "forbidden", "fail": "required", "error": "required"}}


@pytest.fixture
async def demo(start_gateway: StartGateway) -> str:
    base = await start_gateway([{"name": "demo", "upstream": DEMO, "tasks": POLICY}])
    return f"{base}/demo/mcp"


def call(name: str, **arguments: Any) -> dict[str, Any]:
    return {"name": name, "arguments": arguments}


async def test_discover_advertises_the_extension_only_where_tasks_are_on(
    start_gateway: StartGateway,
) -> None:
    base = await start_gateway(
        [
            {"name": "on", "upstream": DEMO},
            {"name": "off", "upstream": DEMO, "tasks": {"enabled": False}},
        ]
    )
    async with aiohttp.ClientSession() as http:
        _, on = await modern_rpc(http, f"{base}/on/mcp", "server/discover")
        _, off = await modern_rpc(http, f"{base}/off/mcp", "server/discover")
    # "the server advertises the same key under capabilities.extensions in server/discover"
    assert on["result"]["capabilities"]["extensions"] == {TASKS_EXTENSION: {}}
    assert "tasks" not in on["result"]["capabilities"]
    assert TASKS_EXTENSION not in off["result"]["capabilities"].get("extensions", {})


async def test_a_long_call_becomes_a_task_whose_result_tasks_get_inlines(demo: str) -> None:
    async with aiohttp.ClientSession() as http:
        status, created = await modern_rpc(
            http, demo, "tools/call", call("slow", seconds=1, steps=2), WITH_TASKS
        )
        assert status == 200
        task = created["result"]
        # CreateTaskResult is flat: "no nested task wrapper and no result/error/inputRequests/
        # requestState"
        assert task["resultType"] == "task"
        assert task["status"] == "working"
        assert not {"task", "result", "error", "inputRequests", "requestState"} & task.keys()
        assert isinstance(task["ttlMs"], int) and isinstance(task["pollIntervalMs"], int)
        assert not {"ttl", "pollInterval"} & task.keys()
        # "The server MUST NOT send CreateTaskResult until tasks/get on that id would resolve"
        _, got = await modern_rpc(http, demo, "tasks/get", {"taskId": task["taskId"]}, WITH_TASKS)
        assert got["result"]["resultType"] == "complete"
        assert got["result"]["status"] in ("working", "completed")
        done = await modern_terminal(http, demo, task["taskId"])
    assert done["status"] == "completed"
    assert done["result"]["content"][0]["text"] == "slept 1 s"
    # No related-task meta on the inlined result: the taskId is at the root.
    assert "io.modelcontextprotocol/related-task" not in done["result"].get("_meta", {})


async def test_a_quick_answer_comes_back_directly_and_forbidden_tools_never_make_tasks(
    demo: str,
) -> None:
    async with aiohttp.ClientSession() as http:
        _, quick = await modern_rpc(http, demo, "tools/call", call("slow", seconds=0), WITH_TASKS)
        _, plain = await modern_rpc(http, demo, "tools/call", call("echo", text="hi"), WITH_TASKS)
        # The legacy `task` field is ignored: "legacy params.task MUST be ignored".
        legacy = {**call("echo", text="hi"), "task": {"ttl": 1000}}
        _, ignored = await modern_rpc(http, demo, "tools/call", legacy, WITH_TASKS)
    assert quick["result"]["resultType"] == "complete"
    assert quick["result"]["content"][0]["text"] == "slept 0 s"
    for body in (plain, ignored):
        assert body["result"]["resultType"] == "complete"
        assert "taskId" not in body["result"]


async def test_without_the_extension_calls_run_plainly_and_required_tools_get_32021(
    demo: str,
) -> None:
    async with aiohttp.ClientSession() as http:
        _, slow = await modern_rpc(http, demo, "tools/call", call("slow", seconds=0.4, steps=1))
        status, refused = await modern_rpc(http, demo, "tools/call", call("fail"))
    # "The server MUST NOT return CreateTaskResult to a request that lacks the capability"
    assert slow["result"]["resultType"] == "complete"
    assert status == 400
    assert refused["error"]["code"] == MISSING_REQUIRED_CLIENT_CAPABILITY
    assert refused["error"]["data"]["requiredCapabilities"]["extensions"] == {TASKS_EXTENSION: {}}


async def test_a_tool_error_completes_here_and_fails_for_a_2025_reader(
    start_gateway: StartGateway,
) -> None:
    base = await start_gateway([{"name": "keys", "upstream": DEMO, "auth": KEYS, "tasks": POLICY}])
    url, alice = f"{base}/keys/mcp", {"Authorization": f"Bearer {ALICE_KEY}"}
    async with aiohttp.ClientSession() as http:
        _, created = await modern_rpc(
            http, url, "tools/call", call("fail"), WITH_TASKS, extra=alice
        )
        # A `required` tool answered within the window is still a task, already finished.
        assert created["result"]["resultType"] == "task"
        task_id = created["result"]["taskId"]
        async with asyncio.timeout(10):
            while True:
                _, got = await modern_rpc(
                    http, url, "tasks/get", {"taskId": task_id}, WITH_TASKS, extra=alice
                )
                done = got["result"]
                if done["status"] != "working":
                    break
        # "completed → result (the original result, including isError:true tool results)"
        assert done["status"] == "completed"
        assert done["result"]["isError"] is True
        # The same principal reads it in a 2025-11-25 session: there, isError fails a task.
        async with http.post(url, json=INIT, headers=headers(**alice)) as resp:
            session = resp.headers["Mcp-Session-Id"]
        get = {"jsonrpc": "2.0", "id": 2, "method": "tasks/get", "params": {"taskId": task_id}}
        async with http.post(url, json=get, headers=headers(session, **alice)) as resp:
            legacy = await resp.json()
        assert legacy["result"]["status"] == "failed"
        # Bob, another principal, cannot see it from either generation.
        bob = {"Authorization": f"Bearer {BOB_KEY}"}
        _, foreign = await modern_rpc(
            http, url, "tasks/get", {"taskId": task_id}, WITH_TASKS, extra=bob
        )
        _, unknown = await modern_rpc(
            http, url, "tasks/get", {"taskId": "no-such-task"}, WITH_TASKS, extra=bob
        )
    assert foreign["error"] == unknown["error"]
    assert foreign["error"]["code"] == INVALID_PARAMS


async def test_a_json_rpc_error_fails_the_task_with_the_error_inlined(demo: str) -> None:
    async with aiohttp.ClientSession() as http:
        _, created = await modern_rpc(http, demo, "tools/call", call("error"), WITH_TASKS)
        done = await modern_terminal(http, demo, created["result"]["taskId"])
    # "failed → error (JSON-RPC errors only)"
    assert done["status"] == "failed"
    assert isinstance(done["error"]["code"], int) and done["error"]["message"]
    assert "result" not in done


async def test_cancel_is_an_ack_that_settles_cancelled_and_a_terminal_cancel_is_acked_too(
    demo: str,
) -> None:
    async with aiohttp.ClientSession() as http:
        _, created = await modern_rpc(
            http, demo, "tools/call", call("slow", seconds=30, steps=30), WITH_TASKS
        )
        task_id = created["result"]["taskId"]
        _, ack = await modern_rpc(http, demo, "tasks/cancel", {"taskId": task_id}, WITH_TASKS)
        assert ack["result"] == {"resultType": "complete"}
        done = await modern_terminal(http, demo, task_id)
        assert done["status"] == "cancelled"
        assert not {"result", "error"} & done.keys()
        # "Cancelling a terminal task is acked, not an error"
        _, again = await modern_rpc(http, demo, "tasks/cancel", {"taskId": task_id}, WITH_TASKS)
        assert again["result"] == {"resultType": "complete"}


async def test_task_methods_refuse_what_the_extension_refuses(demo: str) -> None:
    async with aiohttp.ClientSession() as http:
        _, created = await modern_rpc(
            http, demo, "tools/call", call("slow", seconds=2, steps=1), WITH_TASKS
        )
        task_id = created["result"]["taskId"]
        results = {
            "undeclared": await modern_rpc(http, demo, "tasks/get", {"taskId": task_id}),
            "unknown": await modern_rpc(http, demo, "tasks/get", {"taskId": "nope"}, WITH_TASKS),
            "not a string": await modern_rpc(http, demo, "tasks/get", {"taskId": 12}, WITH_TASKS),
            "tasks/result": await modern_rpc(
                http, demo, "tasks/result", {"taskId": task_id}, WITH_TASKS
            ),
            "tasks/list": await modern_rpc(http, demo, "tasks/list", {}, WITH_TASKS),
            "name mismatch": await modern_rpc(
                http, demo, "tasks/get", {"taskId": task_id}, WITH_TASKS, extra={"Mcp-Name": "x"}
            ),
            "bad responses": await modern_rpc(
                http,
                demo,
                "tasks/update",
                {"taskId": task_id, "inputResponses": [1]},
                WITH_TASKS,
            ),
        }
    codes = {case: (status, body["error"]["code"]) for case, (status, body) in results.items()}
    assert codes == {
        "undeclared": (400, MISSING_REQUIRED_CLIENT_CAPABILITY),
        "unknown": (400, INVALID_PARAMS),
        "not a string": (400, HEADER_MISMATCH),  # no Mcp-Name can equal a number
        "tasks/result": (404, METHOD_NOT_FOUND),
        "tasks/list": (404, METHOD_NOT_FOUND),
        "name mismatch": (400, HEADER_MISMATCH),
        "bad responses": (400, INVALID_PARAMS),
    }


async def test_an_upstream_question_is_an_mrtr_round_and_the_retry_continues_the_call(
    demo: str,
) -> None:
    ask = call("ask", question="Your name?")
    async with aiohttp.ClientSession() as http:
        _, first = await modern_rpc(http, demo, "tools/call", ask, WITH_ELICITATION, request_id=1)
        round_ = first["result"]
        assert round_["resultType"] == "input_required"
        ((key, asked),) = round_["inputRequests"].items()
        assert asked["method"] == "elicitation/create"
        assert asked["params"]["message"] == "Your name?"
        answer = {"action": "accept", "content": {"name": "Ada"}}
        retry = {**ask, "inputResponses": {key: answer}, "requestState": round_["requestState"]}
        # "The JSON-RPC id MUST be different between the initial request and the retry"
        _, done = await modern_rpc(http, demo, "tools/call", retry, WITH_ELICITATION, request_id=2)
        assert done["result"]["resultType"] == "complete"
        assert done["result"]["content"][0]["text"] == "Hello, Ada!"
        # A state is good for one retry.
        status, replay = await modern_rpc(http, demo, "tools/call", retry, WITH_ELICITATION)
    assert (status, replay["error"]["code"]) == (400, INVALID_PARAMS)
    assert "no longer held" in replay["error"]["message"]


async def test_a_request_state_is_refused_when_altered_or_presented_for_another_request(
    demo: str,
) -> None:
    ask = call("ask", question="Your name?")
    async with aiohttp.ClientSession() as http:
        _, first = await modern_rpc(http, demo, "tools/call", ask, WITH_ELICITATION)
        state = first["result"]["requestState"]
        payload, mac = state.split(".")
        altered = f"{payload[:-2]}{'A' if payload[-2] != 'A' else 'B'}{payload[-1]}.{mac}"
        other = call("ask", question="Someone else's question?")
        cases = {
            "altered": {**ask, "requestState": altered},
            "another request": {**other, "requestState": state},
            "garbage": {**ask, "requestState": "not-a-state"},
            "not a string": {**ask, "requestState": {"h": 1}},
            "bad responses": {**ask, "requestState": state, "inputResponses": {"k": "yes"}},
        }
        answers = {
            case: await modern_rpc(http, demo, "tools/call", params, WITH_ELICITATION)
            for case, params in cases.items()
        }
        # "servers MUST treat requestState as an attacker-controlled input ... MUST reject
        # state that fails verification"; the untouched state still works afterwards.
        key = next(iter(first["result"]["inputRequests"]))
        good = {
            **ask,
            "requestState": state,
            "inputResponses": {key: {"action": "accept", "content": {"name": "Bo"}}},
        }
        _, done = await modern_rpc(http, demo, "tools/call", good, WITH_ELICITATION)
    for case, (status, body) in answers.items():
        assert (case, status, body["error"]["code"]) == (case, 400, INVALID_PARAMS)
    assert "does not verify" in answers["altered"][1]["error"]["message"]
    assert "does not verify" in answers["another request"][1]["error"]["message"]
    assert done["result"]["content"][0]["text"] == "Hello, Bo!"


async def test_a_request_state_is_bound_to_its_principal(start_gateway: StartGateway) -> None:
    base = await start_gateway([{"name": "keys", "upstream": DEMO, "auth": KEYS}])
    url = f"{base}/keys/mcp"
    alice = {"Authorization": f"Bearer {ALICE_KEY}"}
    bob = {"Authorization": f"Bearer {BOB_KEY}"}
    ask = call("ask")
    async with aiohttp.ClientSession() as http:
        _, first = await modern_rpc(http, url, "tools/call", ask, WITH_ELICITATION, extra=alice)
        stolen = {**ask, "requestState": first["result"]["requestState"]}
        status, refused = await modern_rpc(
            http, url, "tools/call", stolen, WITH_ELICITATION, extra=bob
        )
    assert (status, refused["error"]["code"]) == (400, INVALID_PARAMS)
    assert "another caller" in refused["error"]["message"]


async def test_a_parked_call_expires_and_its_state_with_it(start_gateway: StartGateway) -> None:
    route = {"name": "demo", "upstream": DEMO, "tasks": {"input_timeout_seconds": 0.3}}
    url = f"{await start_gateway([route])}/demo/mcp"
    async with aiohttp.ClientSession() as http:
        _, first = await modern_rpc(http, url, "tools/call", call("ask"), WITH_ELICITATION)
        await asyncio.sleep(0.6)
        late = {**call("ask"), "requestState": first["result"]["requestState"]}
        status, refused = await modern_rpc(http, url, "tools/call", late, WITH_ELICITATION)
    assert (status, refused["error"]["code"]) == (400, INVALID_PARAMS)
    assert "expired" in refused["error"]["message"]


async def test_questions_of_kinds_the_client_did_not_declare_never_reach_it(demo: str) -> None:
    async with aiohttp.ClientSession() as http:
        _, answered = await modern_rpc(http, demo, "tools/call", call("ask"))
    # "Servers MUST NOT send an inputRequests that the client has not declared support for":
    # the upstream's request was refused with -32601, which the demo's tool passes on.
    assert "result" not in answered
    assert answered["error"]["message"] == (
        "elicitation/create is not supported: the client declared no such capability"
    )


async def test_a_round_before_the_task_then_the_task_carries_the_answer(demo: str) -> None:
    ask = call("ask", question="Who?")
    async with aiohttp.ClientSession() as http:
        _, first = await modern_rpc(http, demo, "tools/call", ask, BOTH)
        round_ = first["result"]
        assert round_["resultType"] == "input_required"
        assert "taskId" not in round_
        key = next(iter(round_["inputRequests"]))
        retry = {
            **ask,
            "inputResponses": {key: {"action": "accept", "content": {"name": "Cy"}}},
            "requestState": round_["requestState"],
        }
        _, second = await modern_rpc(http, demo, "tools/call", retry, BOTH)
    # The demo's ask answers at once after the answer: a direct result (the shortcut).
    assert second["result"]["resultType"] == "complete"
    assert second["result"]["content"][0]["text"] == "Hello, Cy!"


async def test_task_questions_are_input_requests_answered_by_tasks_update(
    start_gateway: StartGateway, sdk_upstream: str
) -> None:
    route = {"name": "sdk", "upstream": {"transport": "streamable_http", "url": sdk_upstream}}
    url = f"{await start_gateway([route])}/sdk/mcp"
    async with aiohttp.ClientSession() as http:
        _, created = await modern_rpc(http, url, "tools/call", call("ask_both"), BOTH)
        task_id = created["result"]["taskId"]
        waiting = await modern_inputs(http, url, task_id, 2)
        asked = waiting["inputRequests"]
        assert {entry["method"] for entry in asked.values()} == {"elicitation/create"}
        by_message = {entry["params"]["message"]: key for key, entry in asked.items()}
        first, last = by_message["First name?"], by_message["Last name?"]
        # "partial answers keep the task input_required with the unanswered keys only"
        update = {
            "taskId": task_id,
            "inputResponses": {
                first: {"action": "accept", "content": {"name": "Grace"}},
                "never-asked": {"action": "accept", "content": {"name": "X"}},
            },
        }
        _, ack = await modern_rpc(http, url, "tasks/update", update, BOTH)
        assert ack["result"] == {"resultType": "complete"}
        _, partial = await modern_rpc(http, url, "tasks/get", {"taskId": task_id}, BOTH)
        assert partial["result"]["status"] == "input_required"
        assert list(partial["result"]["inputRequests"]) == [last]
        rest = {last: {"action": "accept", "content": {"name": "Hopper"}}}
        await modern_rpc(
            http, url, "tasks/update", {"taskId": task_id, "inputResponses": rest}, BOTH
        )
        done = await modern_terminal(http, url, task_id)
    assert done["status"] == "completed"
    assert done["result"]["content"][0]["text"] == "Grace Hopper"


async def test_an_unanswered_task_question_gets_the_default_answer(
    start_gateway: StartGateway, sdk_upstream: str
) -> None:
    route = {
        "name": "sdk",
        "upstream": {"transport": "streamable_http", "url": sdk_upstream},
        "tasks": {"input_timeout_seconds": 0.5},
    }
    url = f"{await start_gateway([route])}/sdk/mcp"
    async with aiohttp.ClientSession() as http:
        _, created = await modern_rpc(http, url, "tools/call", call("ask_both"), BOTH)
        done = await modern_terminal(http, url, created["result"]["taskId"])
    # Elicitation's way to say nobody answered: the user dismissed the dialog.
    assert done["status"] == "completed"
    assert done["result"]["content"][0]["text"] == "cancel cancel"


async def test_closing_the_response_cancels_the_call_upstream(
    start_gateway: StartGateway, faulty_upstream: Any
) -> None:
    upstream = {"transport": "streamable_http", "url": str(faulty_upstream.make_url("/mcp"))}
    url = f"{await start_gateway([{'name': 'f', 'upstream': upstream}])}/f/mcp"
    async with aiohttp.ClientSession() as http:
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(0.5):
                await modern_rpc(http, url, "tools/call", call("hang"))
    received = faulty_upstream.app[FAULT_HOOKS].received
    for _ in range(100):
        if any(m.get("method") == "notifications/cancelled" for m in received):
            break
        await asyncio.sleep(0.05)
    cancelled = [m for m in received if m.get("method") == "notifications/cancelled"]
    assert cancelled, "the upstream was never told the call was cancelled"


async def test_tasks_and_results_survive_a_crash_and_stale_request_states_are_refused(
    tmp_path: Path,
) -> None:
    port = free_port()
    config = write_config(tmp_path, port)
    url = f"http://127.0.0.1:{port}/demo/mcp"
    proc = start_process(config, port)
    try:
        async with aiohttp.ClientSession() as http:
            _, done = await modern_rpc(
                http, url, "tools/call", call("slow", seconds=0.5, steps=1), WITH_TASKS
            )
            finished = await modern_terminal(http, url, done["result"]["taskId"])
            _, running = await modern_rpc(
                http, url, "tools/call", call("slow", seconds=60, steps=1), WITH_TASKS
            )
            _, round_ = await modern_rpc(http, url, "tools/call", call("ask"), WITH_ELICITATION)
    finally:
        proc.kill()  # SIGKILL: nothing is written on the way out
        proc.wait(10)
    proc = start_process(config, port)
    try:
        async with aiohttp.ClientSession() as http:
            again = await modern_terminal(http, url, finished["taskId"])
            lost = await modern_terminal(http, url, running["result"]["taskId"])
            stale = {**call("ask"), "requestState": round_["result"]["requestState"]}
            status, refused = await modern_rpc(http, url, "tools/call", stale, WITH_ELICITATION)
    finally:
        proc.terminate()
        proc.wait(15)
    assert again == finished
    assert lost["status"] == "failed"
    assert lost["error"]["message"] == "interrupted: gateway restarted"
    assert (status, refused["error"]["code"]) == (400, INVALID_PARAMS)
    assert "no longer held" in refused["error"]["message"]


async def test_calls_waiting_for_answers_are_capped_per_caller(
    start_gateway: StartGateway,
) -> None:
    url = f"{await start_gateway(limits={'sessions_per_principal': 2})}/demo/mcp"
    async with aiohttp.ClientSession() as http:
        rounds = [
            await modern_rpc(http, url, "tools/call", call("ask"), WITH_ELICITATION)
            for _ in range(3)
        ]
        answered = rounds[0][1]["result"]
        key = next(iter(answered["inputRequests"]))
        retry = {
            **call("ask"),
            "requestState": answered["requestState"],
            "inputResponses": {key: {"action": "accept", "content": {"name": "Di"}}},
        }
        await modern_rpc(http, url, "tools/call", retry, WITH_ELICITATION)
        status, fourth = await modern_rpc(http, url, "tools/call", call("ask"), WITH_ELICITATION)
    assert [status for status, _ in rounds] == [200, 200, 429]
    assert "limits.sessions_per_principal" in rounds[2][1]["error"]["message"]
    # An answered round frees its place.
    assert (status, fourth["result"]["resultType"]) == (200, "input_required")


async def test_a_required_tool_whose_upstream_asks_at_once_is_a_task_from_its_first_moment(
    start_gateway: StartGateway,
) -> None:
    """The natural "confirm, then act" tool asks before anything else. Its call is a task from
    the start: the question is the task's first input request (tasks/get lists it,
    tasks/update answers it), never an MRTR round that leaves no task behind."""
    policy = {"tools": {"ask": "required"}}
    base = await start_gateway([{"name": "demo", "upstream": DEMO, "tasks": policy}])
    url = f"{base}/demo/mcp"
    both = {**WITH_TASKS, **WITH_ELICITATION}
    async with aiohttp.ClientSession() as http:
        status, created = await modern_rpc(http, url, "tools/call", call("ask"), both)
        assert status == 200 and created["result"]["resultType"] == "task", created
        task_id = created["result"]["taskId"]
        waiting = await modern_inputs(http, url, task_id, 1)
        (key,) = waiting["inputRequests"]
        assert waiting["inputRequests"][key]["method"] == "elicitation/create"
        answer = {key: {"action": "accept", "content": {"name": "Ada"}}}
        params = {"taskId": task_id, "inputResponses": answer}
        await modern_rpc(http, url, "tasks/update", params, both)
        done = await modern_terminal(http, url, task_id)
    assert done["status"] == "completed"
    assert done["result"]["content"][0]["text"] == "Hello, Ada!"


async def test_a_burst_of_calls_that_ask_cannot_take_the_routes_children_from_others(
    start_gateway: StartGateway,
) -> None:
    """Twenty concurrent calls that ask, from one caller allowed four sessions: the cap
    counts them from their start, not once parked (all twenty passed a count of the parked,
    took the route's ten children, and left another caller's plain calls 503 until the
    parks expired). Four are parked, the rest refused at once, and others are served."""
    keys = {"alice": "alice-key-0123456789", "bob": "bob-key-0123456789ab"}
    auth = {
        "api_keys": [
            {"principal": who, "sha256": hashlib.sha256(key.encode()).hexdigest()}
            for who, key in keys.items()
        ]
    }
    routes = [{"name": "demo", "upstream": {**DEMO, "max_children": 10}}]
    base = await start_gateway(routes, auth=auth, limits={"sessions_per_principal": 4})
    url = f"{base}/demo/mcp"

    def as_(who: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {keys[who]}"}

    async with aiohttp.ClientSession() as http:
        burst = await asyncio.gather(
            *(
                modern_rpc(http, url, "tools/call", call("ask"), WITH_ELICITATION, n, as_("alice"))
                for n in range(20)
            )
        )
        others = await asyncio.gather(
            *(
                modern_rpc(http, url, "tools/call", call("echo", text="b"), {}, n, as_("bob"))
                for n in range(5)
            )
        )
    statuses = sorted(status for status, _ in burst)
    assert statuses == [200] * 4 + [429] * 16
    parked = [body for status, body in burst if status == 200]
    assert all(body["result"]["resultType"] == "input_required" for body in parked)
    assert [status for status, _ in others] == [200] * 5
    assert all(body["result"]["content"][0]["text"] == "b" for _, body in others)


async def test_parked_calls_count_per_route_so_a_namesake_elsewhere_spends_none_here(
    start_gateway: StartGateway,
) -> None:
    """security.md: "active tasks, sessions and rate buckets are counted per route": parked
    calls were counted by principal name alone, so another route's "alice" (another key,
    another caller) spent this route's share."""
    key = "alice-key-0123456789"
    auth = {
        "api_keys": [{"principal": "alice", "sha256": hashlib.sha256(key.encode()).hexdigest()}]
    }
    routes = [{"name": name, "upstream": DEMO} for name in ("a", "b")]
    base = await start_gateway(routes, auth=auth, limits={"sessions_per_principal": 2})
    as_alice = {"Authorization": f"Bearer {key}"}
    async with aiohttp.ClientSession() as http:
        statuses = {}
        for name in ("b", "a"):
            url = f"{base}/{name}/mcp"
            answers = [
                await modern_rpc(
                    http, url, "tools/call", call("ask"), WITH_ELICITATION, n, as_alice
                )
                for n in range(3)
            ]
            statuses[name] = [status for status, _ in answers]
    assert statuses == {"b": [200, 200, 429], "a": [200, 200, 429]}


async def test_one_callers_tasks_that_may_ask_hold_its_share_of_children_not_the_route(
    start_gateway: StartGateway,
) -> None:
    """Each such task holds a session (a stdio child) of its own until it ends: one caller's
    took every child of the route, and everyone's calls got 503. security.md: "one caller can
    keep at most half of a route's children busy"; beyond its share, 429 for it alone."""
    keys = {"alice": "alice-key-0123456789", "bob": "bob-key-0123456789ab"}
    auth = {
        "api_keys": [
            {"principal": who, "sha256": hashlib.sha256(key.encode()).hexdigest()}
            for who, key in keys.items()
        ]
    }
    policy = {"sync_window_ms": 0, "tools": {"ask": "required"}}
    routes = [{"name": "c", "upstream": {**DEMO, "max_children": 4}, "tasks": policy}]
    base = await start_gateway(routes, auth=auth, limits={"sessions_per_principal": 2})
    url = f"{base}/c/mcp"
    both = {**WITH_TASKS, **WITH_ELICITATION}
    as_bob = {"Authorization": f"Bearer {keys['bob']}"}
    async with aiohttp.ClientSession() as http:
        asked = [
            await modern_rpc(http, url, "tools/call", call("ask"), both, n, as_bob)
            for n in range(3)
        ]
        assert [status for status, _ in asked] == [200, 200, 429]
        echo = call("echo", text="a")
        as_alice = {"Authorization": f"Bearer {keys['alice']}"}
        status, answer = await modern_rpc(http, url, "tools/call", echo, {}, 9, as_alice)
        assert status == 200 and answer["result"]["content"][0]["text"] == "a"
        first = asked[0][1]["result"]["taskId"]
        await modern_rpc(http, url, "tasks/cancel", {"taskId": first}, WITH_TASKS, 10, as_bob)
        async with asyncio.timeout(10):
            while True:  # the cancelled task's session is handed back as its run ends
                status, _ = await modern_rpc(http, url, "tools/call", call("ask"), both, 11, as_bob)
                if status == 200:
                    break
                await asyncio.sleep(0.05)


async def test_progress_streams_on_the_requests_own_response_under_its_own_token(
    demo: str,
) -> None:
    params = {**call("slow", seconds=0.6, steps=3), "_meta": {"progressToken": "mine-1"}}
    body = {"jsonrpc": "2.0", "id": 5, "method": "tools/call", "params": params}
    envelope = {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {},
    }
    params["_meta"].update(envelope)
    hdrs = headers(
        **{"MCP-Protocol-Version": "2026-07-28", "Mcp-Method": "tools/call", "Mcp-Name": "slow"}
    )
    async with aiohttp.ClientSession() as http:
        async with http.post(demo, json=body, headers=hdrs) as resp:
            assert resp.headers["Content-Type"].startswith("text/event-stream")
            events = [
                json.loads(line[6:]) async for line in resp.content if line.startswith(b"data: ")
            ]
    *notes, answer = events
    assert [n["params"]["progressToken"] for n in notes] == ["mine-1"] * 3
    assert [n["params"]["progress"] for n in notes] == [1, 2, 3]
    assert answer["id"] == 5
    assert answer["result"]["resultType"] == "complete"
    assert answer["result"]["content"][0]["text"] == "slept 0.6 s"


async def test_a_graceful_shutdown_fails_running_tasks_readably(tmp_path: Path) -> None:
    port = free_port()
    config = write_config(tmp_path, port)
    url = f"http://127.0.0.1:{port}/demo/mcp"
    proc = start_process(config, port)
    try:
        async with aiohttp.ClientSession() as http:
            _, running = await modern_rpc(
                http, url, "tools/call", call("slow", seconds=60, steps=1), WITH_TASKS
            )
    finally:
        proc.terminate()  # SIGTERM: running tasks fail while clients can still hear it
        assert proc.wait(15) == 0
    proc = start_process(config, port)
    try:
        async with aiohttp.ClientSession() as http:
            lost = await modern_terminal(http, url, running["result"]["taskId"])
    finally:
        proc.terminate()
        proc.wait(15)
    assert lost["status"] == "failed"
    assert lost["error"]["message"] == "interrupted: gateway shut down"


@pytest.mark.parametrize(("level", "relayed"), [("debug", True), ("error", False), (None, False)])
async def test_log_messages_reach_the_request_at_or_above_its_log_level(
    demo: str, level: str | None, relayed: bool
) -> None:
    meta: dict[str, Any] = {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {},
    }
    if level is not None:
        meta["io.modelcontextprotocol/logLevel"] = level
    params = {**call("log", message="hello there"), "_meta": meta}
    body = {"jsonrpc": "2.0", "id": 6, "method": "tools/call", "params": params}
    hdrs = headers(
        **{"MCP-Protocol-Version": "2026-07-28", "Mcp-Method": "tools/call", "Mcp-Name": "log"}
    )
    async with aiohttp.ClientSession() as http:
        async with http.post(demo, json=body, headers=hdrs) as resp:
            if resp.content_type == "application/json":
                messages = [await resp.json()]
            else:
                messages = [
                    json.loads(line[6:])
                    async for line in resp.content
                    if line.startswith(b"data: ")
                ]
    *notes, answer = messages
    # "no notifications/message without it" (logLevel), and only at or above the level asked
    if relayed:
        assert [n["method"] for n in notes] == ["notifications/message"]
        assert notes[0]["params"]["data"] == "hello there"
    else:
        assert notes == []
    assert answer["result"]["content"][0]["text"] == "logged"


async def test_stray_input_responses_are_ignored_and_a_retry_without_answers_asks_again(
    demo: str,
) -> None:
    stray = {**call("ask"), "inputResponses": {"unasked": {"action": "accept"}}}
    async with aiohttp.ClientSession() as http:
        _, first = await modern_rpc(http, demo, "tools/call", stray, WITH_ELICITATION)
        round_ = first["result"]
        assert round_["resultType"] == "input_required"
        # "If the client fails to send all the information requested ... the server SHOULD
        # respond with a new InputRequiredResult requesting the missing information again"
        empty = {**call("ask"), "requestState": round_["requestState"]}
        _, again = await modern_rpc(http, demo, "tools/call", empty, WITH_ELICITATION)
    assert again["result"]["resultType"] == "input_required"
    assert list(again["result"]["inputRequests"]) == list(round_["inputRequests"])
    assert again["result"]["requestState"] != round_["requestState"]
