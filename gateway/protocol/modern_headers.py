"""`Mcp-Param-*` headers (SEP-2243): tool arguments a 2026-07-28 client mirrors into HTTP
headers, checked against the body before a `tools/call` goes upstream.

A tool declares a header by putting `x-mcp-header: <Name>` on a property of its `inputSchema`;
a 2026-07-28 client then sends `Mcp-Param-<Name>` with that argument's value. A server that
reads the body MUST check every declared header against it (else 400 with -32020
HeaderMismatch): both present and equal once a base64 sentinel is decoded, or both absent
(`null` counts as absent). What each tool declares is learned from the `tools/list` answers
the gateway relays, per route (`ToolHeaders.learn`). A tool never listed through the gateway
since it started, or listed with an invalid declaration (which conforming clients drop, as
the spec requires), is not checked; nor are `Mcp-Param-*` headers no tool declares, which
the spec says to ignore.

The header codec lives here too: values outside visible ASCII travel as `=?base64?…?=`,
which `decode` undoes before any comparison (`Mcp-Name` as well as `Mcp-Param-*`).
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from gateway.protocol import jsonrpc

X_MCP_HEADER = "x-mcp-header"
PARAM_PREFIX = "Mcp-Param-"
#: Tools whose declarations a route remembers; a tool beyond them is not checked.
MAX_TOOLS = 1000

_TOKEN = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")  # an RFC 9110 field-name token
_PRIMITIVE = frozenset({"string", "integer", "boolean"})
_CANONICAL_DECIMAL = re.compile(r"-?[0-9]+(\.[0-9]+)?")
#: What a header value may hold (RFC 9110): visible ASCII, space and tab.
_HEADER_SAFE = re.compile(r"[\x20-\x7e\t]*")
# JSON Schema 2020-12 keywords whose values are schemas. Only `properties` keeps a property
# statically reachable; data keywords (default, const, enum, examples) are never entered.
_ONE = frozenset(
    {
        "items", "contains", "unevaluatedItems", "additionalProperties", "propertyNames",
        "unevaluatedProperties", "not", "if", "then", "else", "contentSchema",
    }
)  # fmt: skip
_MANY = frozenset({"allOf", "anyOf", "oneOf", "prefixItems"})
_NAMED = frozenset({"patternProperties", "dependentSchemas", "$defs", "definitions"})


@dataclass(frozen=True, slots=True)
class ParamHeader:
    """One declared header: the argument's property path and the name after `Mcp-Param-`."""

    path: tuple[str, ...]
    name: str
    integer: bool

    @property
    def header(self) -> str:
        return PARAM_PREFIX + self.name


def declared(input_schema: object) -> tuple[ParamHeader, ...] | None:
    """The headers an `inputSchema` declares, or None if any declaration breaks the spec's
    rules (a non-token or repeated name, on a non-primitive property, or off the chain of
    `properties` from the root)."""
    found: list[ParamHeader] = []
    names: set[str] = set()
    for path, schema in _positions(input_schema):
        if X_MCP_HEADER not in schema:
            continue
        name, kind = schema[X_MCP_HEADER], schema.get("type")
        if not path or not isinstance(name, str) or not _TOKEN.fullmatch(name):
            return None
        if not isinstance(kind, str) or kind not in _PRIMITIVE or name.lower() in names:
            return None
        names.add(name.lower())
        found.append(ParamHeader(path, name, kind == "integer"))
    return tuple(found)


def _positions(root: object) -> Iterator[tuple[tuple[str, ...] | None, dict[str, Any]]]:
    """Every schema in `root` with its `properties` path (None once off that chain)."""
    stack: list[tuple[tuple[str, ...] | None, object]] = [((), root)]
    while stack:  # a stack, not recursion: a schema may nest deeper than Python recurses
        path, node = stack.pop()
        if not isinstance(node, dict):
            continue
        yield path, node
        for keyword, value in node.items():
            if keyword == "properties" and isinstance(value, dict):
                stack.extend(
                    (None if path is None else (*path, name), sub) for name, sub in value.items()
                )
            elif keyword in _ONE:
                stack.append((None, value))
            elif keyword in _MANY and isinstance(value, list):
                stack.extend((None, sub) for sub in value)
            elif keyword in _NAMED and isinstance(value, dict):
                stack.extend((None, sub) for sub in value.values())


class ToolHeaders:
    """What one route's tools declare, as the latest `tools/list` answers showed it."""

    def __init__(self, limit: int = MAX_TOOLS) -> None:
        self._limit = limit
        self._tools: dict[str, tuple[ParamHeader, ...]] = {}

    def learn(self, answer: jsonrpc.Response) -> None:
        """Take each listed tool's declarations (one page at a time, as pages come)."""
        tools = answer.result.get("tools")
        if not isinstance(tools, list):
            return
        for tool in tools:
            if not isinstance(tool, dict) or not isinstance(name := tool.get("name"), str):
                continue
            params = declared(tool.get("inputSchema"))
            if not params:
                self._tools.pop(name, None)
            elif name in self._tools or len(self._tools) < self._limit:
                self._tools[name] = params

    def of(self, tool: str) -> tuple[ParamHeader, ...]:
        return self._tools.get(tool, ())

    def check(self, request: jsonrpc.Request, headers: Iterable[tuple[str, str]]) -> str | None:
        """Why a `tools/call`'s declared `Mcp-Param-*` headers and its arguments differ (a
        -32020 HeaderMismatch), if they do. `headers` are the raw lines, repeats included
        (a repeated `Mcp-Method` or `Mcp-Name` is refused before, by `http.admission`)."""
        name = jsonrpc.param(request, "name")
        if request.method != "tools/call" or not isinstance(name, str):
            return None
        folded: dict[str, str] = {}
        repeated: set[str] = set()
        for header, value in headers:
            key = header.lower()
            if key in folded:
                repeated.add(key)
            folded[key] = value
        arguments = jsonrpc.param(request, "arguments")
        arguments = arguments if isinstance(arguments, dict) else {}
        for param in self.of(name):
            key = param.header.lower()
            raw = folded.get(key)
            problem = _disagreement(param, _value_at(arguments, param.path), raw, key in repeated)
            if problem is not None:
                argument = ".".join(param.path)
                return f"the {param.header} header {problem} argument {argument!r}"
        return None


def _disagreement(param: ParamHeader, value: Any, raw: str | None, repeated: bool) -> str | None:
    """How a header and its argument disagree (completing "the header … argument x")."""
    if raw is None:
        if value is None or _render(value) is None:
            return None  # nothing to mirror, so nothing was sent
        return "is missing, but the body has"
    if repeated:
        return "appears more than once, for"
    if value is None:
        return "is present, but the body has no"
    decoded = decode(raw)
    if decoded is None:
        return "is not valid (a bad base64 sentinel or a character outside visible ASCII), for"
    if not _matches(param, value, decoded):
        return "does not match"
    return None


def _matches(param: ParamHeader, value: Any, decoded: str) -> bool:
    # Integers compare as numbers (the spec's SHOULD: 42 and 42.0 are equal), exactly: a
    # float never stands in between, so values beyond 2**53 still compare right.
    integral = isinstance(value, int) or (isinstance(value, float) and value.is_integer())
    if param.integer and integral and not isinstance(value, bool):
        if not _CANONICAL_DECIMAL.fullmatch(decoded):
            return False
        whole, _, fraction = decoded.partition(".")
        if fraction.strip("0") or len(whole) > 400:
            return False
        return int(whole) == int(value)
    return decoded == _render(value)


def _render(value: Any) -> str | None:
    """An argument as a client mirrors it, or None for values with no header form."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return value
    if isinstance(value, int | float):
        try:
            return str(value)
        except ValueError:  # an integer with more digits than Python prints
            return None
    return None


def _value_at(arguments: dict[str, Any], path: tuple[str, ...]) -> Any:
    node: Any = arguments
    for key in path:
        if not isinstance(node, dict):
            return None
        node = node.get(key)
    return node


def decode(value: str | None) -> str | None:
    """A header value with the `=?base64?…?=` sentinel decoded; None if it is malformed or
    holds a character no header value may."""
    if value is None or not _HEADER_SAFE.fullmatch(value):
        return None
    if not (value.startswith("=?base64?") and value.endswith("?=")):
        return value
    try:
        return base64.b64decode(value[9:-2], validate=True).decode()
    except (binascii.Error, UnicodeDecodeError):
        return None


def encode(value: str) -> str:
    """A value as a header carries it: as it is when visible ASCII, else in the sentinel."""
    if re.fullmatch(r"[!-~]+", value) and not value.startswith("=?base64?"):
        return value
    return f"=?base64?{base64.b64encode(value.encode()).decode()}?="
