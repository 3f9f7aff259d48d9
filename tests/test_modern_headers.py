"""Mcp-Param-* headers (protocol.modern_headers): which declarations count, and how a
tools/call's headers are held against its arguments."""

from __future__ import annotations

from typing import Any

import pytest

from gateway.protocol import jsonrpc
from gateway.protocol.modern_headers import ParamHeader, ToolHeaders, declared, decode


def schema(**properties: Any) -> dict[str, Any]:
    return {"type": "object", "properties": properties}


def header(kind: str, name: str, **extra: Any) -> dict[str, Any]:
    return {"type": kind, "x-mcp-header": name, **extra}


def listing(**schemas: Any) -> jsonrpc.Response:
    tools = [{"name": name, "inputSchema": input_schema} for name, input_schema in schemas.items()]
    return jsonrpc.Response(jsonrpc="2.0", id=1, result={"tools": tools})


def call(name: str, arguments: Any) -> jsonrpc.Request:
    return jsonrpc.Request(id=2, method="tools/call", params={"name": name, "arguments": arguments})


def test_declarations_on_properties_reachable_through_properties_are_taken() -> None:
    nested = schema(region=header("string", "Region"), opts=schema(n=header("integer", "N")))
    assert set(declared(nested) or ()) == {
        ParamHeader(("region",), "Region", False),
        ParamHeader(("opts", "n"), "N", True),
    }
    assert declared(schema(plain={"type": "string"})) == ()
    assert declared(None) == ()


@pytest.mark.parametrize(
    "input_schema",
    [
        schema(x=header("number", "X")),  # numbers are not allowed
        schema(x=header("object", "X")),
        schema(x={"type": ["string", "null"], "x-mcp-header": "X"}),
        schema(x=header("string", "")),
        schema(x=header("string", "Bad Name")),  # not an RFC 9110 token
        schema(x=header("string", "A\r\nB")),
        schema(x={"type": "string", "x-mcp-header": 7}),
        schema(a=header("string", "Same"), b=header("string", "same")),  # case-insensitively
        {"type": "object", "x-mcp-header": "Root"},
        {"type": "array", "items": header("string", "X")},
        {"anyOf": [schema(x=header("string", "X"))]},
        {"$defs": {"d": header("string", "X")}},
    ],
    ids=[
        "number",
        "object",
        "type-list",
        "empty",
        "space",
        "crlf",
        "not-a-string",
        "repeated",
        "root",
        "items",
        "anyOf",
        "defs",
    ],
)
def test_an_invalid_declaration_makes_the_whole_tool_unchecked(input_schema: Any) -> None:
    assert declared(input_schema) is None
    headers = ToolHeaders()
    headers.learn(listing(t=input_schema))
    assert headers.of("t") == ()


def test_data_keywords_are_not_mistaken_for_declarations() -> None:
    data = {"type": "object", "default": {"x-mcp-header": "X"}, "enum": [{"x-mcp-header": "Y"}]}
    assert declared(data) == ()
    assert declared(schema(**{"x-mcp-header": {"type": "string"}})) == ()  # a property's name


LOOKUP = schema(region=header("string", "Region"), limit=header("integer", "Limit"))
EU = ("Mcp-Param-Region", "eu")


def known() -> ToolHeaders:
    headers = ToolHeaders()
    headers.learn(listing(lookup=LOOKUP, other=schema(q={"type": "string"})))
    return headers


@pytest.mark.parametrize(
    ("arguments", "headers"),
    [
        ({"region": "eu"}, [("Mcp-Param-Region", "eu")]),
        ({"region": "eu"}, [("mcp-param-region", "eu")]),  # names are case-insensitive
        ({"region": "eu", "limit": 5}, [EU, ("Mcp-Param-Limit", "5")]),
        ({"region": "eu", "limit": 5}, [EU, ("Mcp-Param-Limit", "5.0")]),  # compared as numbers
        ({"region": "eu", "limit": 5.0}, [EU, ("Mcp-Param-Limit", "5")]),
        ({"region": "世界"}, [("Mcp-Param-Region", "=?base64?5LiW55WM?=")]),
        ({"region": None}, []),  # null: no header expected
        ({}, []),
        ({"region": {"a": 1}}, []),  # no header form: none sent
        ({"region": "eu"}, [EU, ("Mcp-Param-Unknown", "x")]),  # undeclared: ignored
    ],
)
def test_headers_that_mirror_the_arguments_pass(
    arguments: dict[str, Any], headers: list[tuple[str, str]]
) -> None:
    assert known().check(call("lookup", arguments), headers) is None


@pytest.mark.parametrize(
    ("arguments", "headers", "says"),
    [
        ({"region": "eu"}, [], "is missing"),
        ({}, [("Mcp-Param-Region", "eu")], "the body has no"),
        ({"region": "eu"}, [("Mcp-Param-Region", "us")], "does not match"),
        ({"region": "eu"}, [("Mcp-Param-Region", "EU")], "does not match"),  # values are exact
        ({"region": "eu"}, [EU, EU], "more than once"),
        ({"region": "eu"}, [("Mcp-Param-Region", "=?base64?!!?=")], "not valid"),
        ({"region": "é"}, [("Mcp-Param-Region", "é")], "not valid"),  # raw non-ASCII
        ({"region": "eu", "limit": 5}, [EU, ("Mcp-Param-Limit", "5.5")], "does not match"),
        ({"region": "eu", "limit": 5}, [EU, ("Mcp-Param-Limit", "5e0")], "does not match"),
        ({"region": "eu", "limit": 5}, [EU, ("Mcp-Param-Limit", "9" * 500)], "does not match"),
        ({"region": True}, [("Mcp-Param-Region", "True")], "does not match"),
        ({"region": {"a": 1}}, [("Mcp-Param-Region", "{'a': 1}")], "does not match"),
        ("not an object", [("Mcp-Param-Region", "eu")], "the body has no"),
    ],
)
def test_headers_that_disagree_with_the_arguments_are_named(
    arguments: Any, headers: list[tuple[str, str]], says: str
) -> None:
    problem = known().check(call("lookup", arguments), headers)
    assert problem is not None and says in problem


def test_a_tool_never_listed_or_relisted_without_declarations_is_not_checked() -> None:
    headers = known()
    assert headers.check(call("unknown", {"region": "eu"}), []) is None
    headers.learn(listing(lookup=schema(region={"type": "string"})))
    assert headers.check(call("lookup", {"region": "eu"}), []) is None


def test_a_route_remembers_a_bounded_number_of_tools() -> None:
    headers = ToolHeaders(limit=2)
    headers.learn(listing(a=LOOKUP, b=LOOKUP, c=LOOKUP))
    assert [bool(headers.of(name)) for name in "abc"] == [True, True, False]
    headers.learn(listing(a=LOOKUP))  # a tool already known is still relearned
    assert headers.of("a")


@pytest.mark.parametrize(
    ("value", "decoded"),
    [
        ("plain", "plain"),
        ("=?base64?SGVsbG8sIOS4lueVjA==?=", "Hello, 世界"),
        ("=?base64?not base64?=", None),
        ("=?base64?/w==?=", None),  # not UTF-8
        ("tab\tand space", "tab\tand space"),
        ("new\nline", None),
        (None, None),
    ],
)
def test_header_values_are_decoded_or_refused(value: str | None, decoded: str | None) -> None:
    assert decode(value) == decoded
