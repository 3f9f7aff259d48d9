"""Upstream output the gateway cannot read, and what can still be learned from it.

A message nested too deep to parse, not UTF-8, not JSON-RPC, or longer than `MAX_LINE_BYTES`
usually still names, near its start, the request it answers. Finding that id lets that one
call fail at once with a clear error instead of waiting out its timeout, while the transport
reads on. The search is iterative and looks only at the message's head, so no input can
exhaust the stack or hold the event loop for long.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from gateway.protocol import jsonrpc
from gateway.protocol.errors import InvalidRequest, ParseError

#: The longest line an upstream may send (a stdio line, a line of an SSE stream). One line
#: carries one message, so this is also the largest answer that can cross the gateway.
MAX_LINE_BYTES = 64 * 1024 * 1024

# Real peers put `id` within the first hundred bytes; the rest of a huge line is not searched.
_HEAD_BYTES = 64 * 1024
_EXCERPT_BYTES = 160

_TOKEN = re.compile(
    rb'\s*(?:("[^"\\]*(?:\\.[^"\\]*)*")|([\[\]{}:,])|([^\s\[\]{}:,"]+))',
    re.DOTALL,
)
_ANSWER_KEYS = frozenset({b'"result"', b'"error"'})


@dataclass(frozen=True, slots=True)
class Unreadable:
    """An upstream message the gateway could not read."""

    reason: str
    #: It had the shape of an answer: a top-level `result` or `error` and no `method`.
    is_answer: bool
    #: The id of the request it answers, when the message still showed one.
    answers: jsonrpc.RequestId | None
    size: int
    #: The first bytes, escaped, for the log: never the whole message, never a raw control char.
    excerpt: str
    #: Unreadable for its size alone (over routes[].max_result_bytes).
    too_large: bool = False

    def __str__(self) -> str:
        return f"{self.reason} ({self.size} bytes: {self.excerpt})"


def read(raw: bytes | str, broken: str | None = None) -> jsonrpc.Message | Unreadable:
    """One message from the upstream, or what could be learned from it.

    `broken` says why the transport already knows the message cannot be trusted.
    """
    if broken is None:
        try:
            return jsonrpc.parse(raw)
        except (ParseError, InvalidRequest) as exc:
            broken = exc.message
    return unreadable(raw.encode() if isinstance(raw, str) else raw, broken)


def unreadable(
    head: bytes, reason: str, size: int | None = None, too_large: bool = False
) -> Unreadable:
    """What `head`, all or the start (of `size` bytes) of a message, still tells."""
    answers, is_answer = _shape(head[:_HEAD_BYTES])
    excerpt = repr(head[:_EXCERPT_BYTES]) + ("..." if len(head) > _EXCERPT_BYTES else "")
    size = len(head) if size is None else size
    return Unreadable(reason, is_answer, answers, size, excerpt, too_large)


def _shape(head: bytes) -> tuple[jsonrpc.RequestId | None, bool]:
    """The answered id, and whether the top-level object looks like an answer at all."""
    depth = 0
    expect_key = False
    key: bytes | None = None
    keys: set[bytes] = set()
    found: jsonrpc.RequestId | None = None
    pos = 0
    while (token := _TOKEN.match(head, pos)) is not None:
        pos = token.end()
        string, punct, bare = token.groups()
        if punct is not None:
            if punct in (b"{", b"["):
                if depth == 0 and punct == b"[":
                    break  # a batch, not one answer
                depth += 1
                expect_key = depth == 1
            elif punct in (b"}", b"]"):
                depth -= 1
                if depth <= 0:
                    break
            elif punct == b"," and depth == 1:
                expect_key = True
            continue
        if depth != 1:
            if depth == 0:
                break  # a bare value, not an object
            continue
        if expect_key:
            key, expect_key = string, False
            if key is not None:
                keys.add(key)
        elif key == b'"id"' and found is None:
            found = _request_id(string if string is not None else bare)
        if found is not None and (keys & _ANSWER_KEYS or b'"method"' in keys):
            break
    is_answer = b'"method"' not in keys and bool(keys & _ANSWER_KEYS)
    return (found if is_answer else None), is_answer


def _request_id(token: bytes) -> jsonrpc.RequestId | None:
    try:
        value = json.loads(token)
    except ValueError:
        return None
    return value if isinstance(value, int | str) and not isinstance(value, bool) else None
