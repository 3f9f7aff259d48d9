"""The 2026-07-28 base protocol beyond tools, over real HTTP to a real SDK upstream:
resources, prompts and completions relayed with their 2026-07-28 result fields, a legacy
-32002 renumbered, Mcp-Param-* headers held against tools/call arguments, and what each
hostile variant is answered with (a JSON-RPC error, never a 500)."""

from __future__ import annotations

import asyncio
import json
import subprocess
from typing import Any

import aiohttp
import pytest
from multidict import CIMultiDict

from gateway.protocol.errors import (
    HEADER_MISMATCH,
    INVALID_PARAMS,
    INVALID_REQUEST,
    METHOD_NOT_FOUND,
)

from .conftest import ROOT, StartGateway
from .helpers import MCP2_PYTHON, headers, needs_mcp2, open_session, rpc

MODERN = "2026-07-28"


def message(method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
    meta = {
        "io.modelcontextprotocol/protocolVersion": MODERN,
        "io.modelcontextprotocol/clientCapabilities": {},
        "io.modelcontextprotocol/clientInfo": {"name": "raw", "version": "1"},
    }
    return {
        "jsonrpc": "2.0",
        "id": 5,
        "method": method,
        "params": {**(params or {}), "_meta": meta},
    }


def wire(method: str, name: str | None = None, **extra: str) -> CIMultiDict[str]:
    out = CIMultiDict(headers(**{"MCP-Protocol-Version": MODERN, "Mcp-Method": method}))
    if name is not None:
        out["Mcp-Name"] = name
    out.update(extra)
    return out


async def post(url: str, body: Any, hdrs: CIMultiDict[str]) -> tuple[int, dict[str, Any]]:
    async with aiohttp.ClientSession() as http:
        async with http.post(url, json=body, headers=hdrs) as resp:
            assert resp.content_type == "application/json"
            return resp.status, dict(await resp.json())


@pytest.fixture
async def gateway(start_gateway: StartGateway, sdk_upstream: str) -> str:
    upstream = {"transport": "streamable_http", "url": sdk_upstream}
    return f"{await start_gateway([{'name': 'sdk', 'upstream': upstream}])}/sdk/mcp"


CACHE_FIELDS = {"ttlMs": 0, "cacheScope": "private"}


@pytest.mark.parametrize(
    ("method", "params", "name", "expected", "cacheable"),
    [
        ("resources/list", {}, None, {"resources": [{"uri": "demo://greeting"}]}, True),
        (
            "resources/templates/list",
            {},
            None,
            {"resourceTemplates": [{"uriTemplate": "demo://items/{item}"}]},
            True,
        ),
        (
            "resources/read",
            {"uri": "demo://items/x"},
            "demo://items/x",
            {"contents": [{"uri": "demo://items/x", "text": "item x"}]},
            True,
        ),
        ("prompts/list", {}, None, {"prompts": [{"name": "review"}]}, True),
        (
            "prompts/get",
            {"name": "review", "arguments": {"code": "x"}},
            "review",
            {
                "messages": [
                    {"role": "user", "content": {"type": "text", "text": "Review this code: x"}}
                ]
            },
            False,
        ),
        (
            "completion/complete",
            {
                "ref": {"type": "ref/resource", "uri": "demo://items/{item}"},
                "argument": {"name": "item", "value": "ap"},
            },
            None,
            {"completion": {"values": ["apple", "apricot"]}},
            False,
        ),
    ],
    ids=["resources", "templates", "read", "prompts", "prompt", "completion"],
)
async def test_each_base_method_is_relayed_with_its_2026_07_28_result_fields(
    gateway: str,
    method: str,
    params: dict[str, Any],
    name: str | None,
    expected: dict[str, Any],
    cacheable: bool,
) -> None:
    status, body = await post(gateway, message(method, params), wire(method, name))
    assert status == 200, body
    result = body["result"]
    assert body["id"] == 5
    assert result["resultType"] == "complete"
    if cacheable:  # SEP-2549: the lists and resources/read carry ttlMs and cacheScope
        assert {key: result[key] for key in CACHE_FIELDS} == CACHE_FIELDS
    else:
        assert not CACHE_FIELDS.keys() & result.keys()
    for key, items in expected.items():
        got = result[key]
        if isinstance(items, list):
            for want, have in zip(items, got, strict=True):
                assert have.items() >= want.items(), (want, have)
        else:
            assert got.items() >= items.items()


async def test_a_legacy_resource_not_found_is_renumbered_invalid_params(gateway: str) -> None:
    uri = "demo://missing"
    status, body = await post(
        gateway, message("resources/read", {"uri": uri}), wire("resources/read", uri)
    )
    assert status == 400
    assert body["error"]["code"] == INVALID_PARAMS  # the upstream said -32002
    assert body["error"]["data"] == {"uri": uri}


async def test_discover_promises_no_notifications_the_gateway_does_not_deliver(
    gateway: str,
) -> None:
    status, body = await post(gateway, message("server/discover"), wire("server/discover"))
    assert status == 200
    capabilities = body["result"]["capabilities"]
    assert "listChanged" not in capabilities["tools"]
    assert "listChanged" not in capabilities["prompts"]
    assert not {"listChanged", "subscribe"} & capabilities["resources"].keys()
    assert "completions" in capabilities


@pytest.mark.parametrize(
    "method",
    ["subscriptions/listen", "resources/subscribe", "logging/setLevel", "ping"],
)
async def test_methods_not_served_on_the_modern_path_are_404_method_not_found(
    gateway: str, method: str
) -> None:
    params = {"notifications": {"toolsListChanged": True}}
    status, body = await post(gateway, message(method, params), wire(method))
    assert status == 404
    assert body["error"]["code"] == METHOD_NOT_FOUND


LONG_URI = "demo://missing/" + "x" * 4000


@pytest.mark.parametrize(
    ("method", "params", "hdrs", "status", "code"),
    [
        # the names the gateway acts on: absent, of the wrong type, not what Mcp-Name says
        ("resources/read", {}, {}, 400, INVALID_PARAMS),
        ("resources/read", {"uri": 5}, {"Mcp-Name": "5"}, 400, HEADER_MISMATCH),
        ("resources/read", {"uri": ["demo://greeting"]}, {}, 400, HEADER_MISMATCH),
        (
            "resources/read",
            {"uri": "demo://greeting"},
            {"Mcp-Name": "demo://other"},
            400,
            HEADER_MISMATCH,
        ),
        ("prompts/get", {"arguments": {}}, {}, 400, INVALID_PARAMS),
        ("prompts/get", {"name": None}, {}, 400, INVALID_PARAMS),
        ("prompts/get", {"name": {"x": 1}}, {"Mcp-Name": "x"}, 400, HEADER_MISMATCH),
        ("prompts/get", {"name": "review"}, {"Mcp-Name": "=?base64?%%%?="}, 400, HEADER_MISMATCH),
        # what only the upstream checks: its own -32602, relayed
        (
            "prompts/get",
            {"name": "review", "arguments": "x"},
            {"Mcp-Name": "review"},
            400,
            INVALID_PARAMS,
        ),
        ("resources/list", {"cursor": 5}, {}, 400, INVALID_PARAMS),
        ("completion/complete", {"ref": "nope", "argument": 1}, {}, 400, INVALID_PARAMS),
        # a name far longer than any resource's, in the body and (as it must be) the header
        ("resources/read", {"uri": LONG_URI}, {"Mcp-Name": LONG_URI}, 400, INVALID_PARAMS),
    ],
    ids=[
        "read-no-uri",
        "read-uri-number",
        "read-uri-list",
        "read-other-name",
        "prompt-no-name",
        "prompt-null-name",
        "prompt-object-name",
        "prompt-bad-b64",
        "prompt-arguments-string",
        "list-cursor-number",
        "completion-garbage",
        "read-long-uri",
    ],
)
async def test_hostile_params_and_headers_get_a_json_rpc_error(
    gateway: str,
    method: str,
    params: dict[str, Any],
    hdrs: dict[str, str],
    status: int,
    code: int,
) -> None:
    got, body = await post(gateway, message(method, params), wire(method, **hdrs))
    assert (got, body["error"]["code"]) == (status, code), body
    assert body["id"] == 5


async def test_a_resource_uri_outside_ascii_travels_as_a_base64_mcp_name(gateway: str) -> None:
    uri = "demo://items/Zürich"
    sentinel = "=?base64?ZGVtbzovL2l0ZW1zL1rDvHJpY2g=?="
    status, body = await post(
        gateway, message("resources/read", {"uri": uri}), wire("resources/read", sentinel)
    )
    assert status == 200
    # The SDK's template matching percent-encodes the URI it was given: it was given this one.
    assert body["result"]["contents"][0]["text"] == "item Z%C3%BCrich"


async def test_a_repeated_mcp_name_header_is_refused_naming_it(gateway: str) -> None:
    hdrs = wire("prompts/get", "review")
    hdrs.add("Mcp-Name", "review")
    params = {"name": "review", "arguments": {"code": "x"}}
    status, body = await post(gateway, message("prompts/get", params), hdrs)
    assert (status, body["error"]["code"]) == (400, INVALID_REQUEST)
    assert body["error"]["data"] == {"header": "Mcp-Name"}


# -- Mcp-Param-* headers: `lookup` declares Region (string) and Limit (integer)


async def listed(url: str) -> None:
    status, _ = await post(url, message("tools/list"), wire("tools/list"))
    assert status == 200


def lookup(**arguments: Any) -> dict[str, Any]:
    return message("tools/call", {"name": "lookup", "arguments": {"query": "q", **arguments}})


async def test_a_call_whose_param_headers_mirror_its_arguments_is_answered(gateway: str) -> None:
    await listed(gateway)
    hdrs = wire("tools/call", "lookup", **{"Mcp-Param-Region": "eu", "Mcp-Param-Limit": "3.0"})
    status, body = await post(gateway, lookup(region="eu", limit=3), hdrs)
    assert status == 200, body
    assert body["result"]["content"][0]["text"] == "q in eu (at most 3)"
    sentinel = "=?base64?WsO8cmljaA==?="  # "Zürich"
    hdrs = wire("tools/call", "lookup", **{"mcp-param-region": sentinel})
    status, body = await post(gateway, lookup(region="Zürich"), hdrs)
    assert status == 200, body
    assert body["result"]["content"][0]["text"] == "q in Zürich (at most 10)"


@pytest.mark.parametrize(
    ("arguments", "params"),
    [
        ({"region": "eu"}, {}),
        ({"region": "eu"}, {"Mcp-Param-Region": "us"}),
        ({"region": "eu"}, {"Mcp-Param-Region": "=?base64?ZXU?="}),  # not valid base64
        ({"region": "eu", "limit": 3}, {"Mcp-Param-Region": "eu"}),
        ({"region": "eu", "limit": 3}, {"Mcp-Param-Region": "eu", "Mcp-Param-Limit": "3.5"}),
        ({"region": "eu"}, {"Mcp-Param-Region": "eu", "Mcp-Param-Limit": "10"}),  # default
        ({"region": 7}, {"Mcp-Param-Region": "seven"}),
        ({"region": "x" * 3000}, {"Mcp-Param-Region": "x" * 2999}),
    ],
    ids=[
        "missing",
        "other",
        "bad-b64",
        "limit-missing",
        "limit-other",
        "absent-argument",
        "wrong-type",
        "long",
    ],
)
async def test_param_headers_that_disagree_with_the_arguments_are_a_header_mismatch(
    gateway: str, arguments: dict[str, Any], params: dict[str, str]
) -> None:
    await listed(gateway)
    status, body = await post(gateway, lookup(**arguments), wire("tools/call", "lookup", **params))
    assert (status, body["error"]["code"]) == (400, HEADER_MISMATCH), body
    assert "Mcp-Param-" in body["error"]["message"]


async def test_a_session_clients_tools_list_teaches_the_route_too(gateway: str) -> None:
    async with aiohttp.ClientSession() as http:
        session_id = await open_session(http, gateway)
        await rpc(http, gateway, session_id, "tools/list", {})
    status, body = await post(gateway, lookup(region="eu"), wire("tools/call", "lookup"))
    assert (status, body["error"]["code"]) == (400, HEADER_MISMATCH)


@needs_mcp2
async def test_the_mcp_2_3_client_reads_resources_prompts_and_mirrors_param_headers(
    gateway: str,
) -> None:
    script = [str(MCP2_PYTHON), str(ROOT / "tests" / "modern" / "base_client.py"), gateway]
    done = await asyncio.to_thread(subprocess.run, script, capture_output=True, timeout=60)
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    outcome = json.loads(done.stdout)
    assert outcome["protocol_version"] == MODERN
    assert outcome["resources"] == ["demo://greeting"]
    assert outcome["templates"] == ["demo://items/{item}"]
    assert outcome["read"][0]["text"] == "item pear"
    assert outcome["prompts"] == ["review"]
    assert outcome["prompt"][0]["content"]["text"] == "Review this code: x = 1"
    assert outcome["completion"] == ["apple", "apricot"]
    assert outcome["lookup"][0]["text"] == "q in Zürich (at most 3)"
    assert outcome["missing"] == INVALID_PARAMS
