"""JSON-RPC envelopes (`gateway.protocol.jsonrpc`): what parsing refuses and with which code,
how a message is classified, and the copies the gateway makes when it remaps ids, progress
tokens and params between the client's id space and the upstream's."""

from __future__ import annotations

import json

import pytest

from gateway.protocol import jsonrpc
from gateway.protocol.errors import (
    INTERNAL_ERROR,
    INVALID_REQUEST,
    PARSE_ERROR,
    InvalidRequest,
    ParseError,
)
from gateway.protocol.jsonrpc import (
    MAX_DEPTH,
    ErrorResponse,
    Notification,
    Request,
    Response,
)


def nested(levels: int) -> bytes:
    """A ping whose params hold `levels` levels of arrays and objects in all."""
    inner = "[" * (levels - 2) + "]" * (levels - 2)
    head = '{"jsonrpc": "2.0", "id": 1, "method": "ping", "params": {"x": '
    return (head + inner + "}}").encode()


# -- classification


@pytest.mark.parametrize(
    ("body", "kind"),
    [
        ({"jsonrpc": "2.0", "id": 1, "method": "ping"}, Request),
        ({"jsonrpc": "2.0", "id": "a", "method": "tools/call", "params": {}}, Request),
        ({"jsonrpc": "2.0", "method": "notifications/initialized"}, Notification),
        ({"jsonrpc": "2.0", "id": 1, "result": {}}, Response),
        ({"jsonrpc": "2.0", "id": 1, "error": {"code": -1, "message": "no"}}, ErrorResponse),
        ({"jsonrpc": "2.0", "id": None, "error": {"code": -1, "message": "no"}}, ErrorResponse),
    ],
)
def test_each_kind_of_message_parses_to_its_own_type(body: object, kind: type) -> None:
    assert type(jsonrpc.parse(json.dumps(body))) is kind


@pytest.mark.parametrize(
    "body",
    [
        [],  # not an object
        "ping",
        {"id": 1, "method": "ping"},  # no "jsonrpc"
        {"jsonrpc": "1.0", "id": 1, "method": "ping"},
        {"jsonrpc": "2.0", "id": 1},  # neither request, notification nor response
        {"jsonrpc": "2.0", "id": 1, "result": {}, "error": {"code": 1, "message": "x"}},
        {"jsonrpc": "2.0", "id": True, "method": "ping"},  # an id is a string or an integer
        {"jsonrpc": "2.0", "id": 1.5, "method": "ping"},
        {"jsonrpc": "2.0", "id": None, "method": "ping"},
        {"jsonrpc": "2.0", "id": 1, "method": 7},
        {"jsonrpc": "2.0", "id": 1, "method": "ping", "params": [1, 2]},  # by name only
        {"jsonrpc": "2.0", "id": 1, "result": "not an object"},
        {"jsonrpc": "2.0", "id": 1, "error": {"message": "no code"}},
    ],
)
def test_json_that_is_not_one_json_rpc_message_is_an_invalid_request(body: object) -> None:
    with pytest.raises(InvalidRequest) as raised:
        jsonrpc.parse(json.dumps(body))
    assert raised.value.code == INVALID_REQUEST


def test_a_batch_is_refused_as_an_invalid_request_that_says_why() -> None:
    with pytest.raises(InvalidRequest) as raised:
        jsonrpc.parse(b'[{"jsonrpc": "2.0", "id": 1, "method": "ping"}]')
    assert raised.value.code == INVALID_REQUEST and "batching" in raised.value.message


def test_members_the_gateway_does_not_know_cross_it_untouched() -> None:
    body = '{"jsonrpc":"2.0","id":1,"method":"x","params":{"a":[1,{"b":null}]},"extension":{"k":1}}'
    message = jsonrpc.parse(body)
    assert json.loads(jsonrpc.dump(message)) == json.loads(body)


def test_parsing_bytes_and_text_gives_the_same_message() -> None:
    text = '{"jsonrpc": "2.0", "id": 1, "method": "echo", "params": {"text": "ü ✓"}}'
    assert jsonrpc.parse(text) == jsonrpc.parse(text.encode())


# -- what parsing refuses


@pytest.mark.parametrize(
    "body",
    [
        b'{"jsonrpc": "2.0", "id": 1,',  # cut off
        b"",
        b'{"jsonrpc": "2.0", "id": 1, "method": "ping", "params": {"x": NaN}}',
        b'{"jsonrpc": "2.0", "id": 1, "method": "ping", "params": {"x": -Infinity}}',
        b'{"jsonrpc": "2.0", "id": 1, "method": "ping", "params": {"x": 1e400}}',
        b'{"jsonrpc": "2.0", "id": 1, "method": "ping", "params": {"x": "\\ud800"}}',
        b'{"jsonrpc": "2.0", "id": 1, "method": "ping", "params": {"x": "\xff"}}',
    ],
    ids=["cut", "empty", "NaN", "Infinity", "beyond-a-double", "lone-surrogate", "not-utf8"],
)
def test_what_the_gateway_could_not_store_or_relay_is_a_parse_error(body: bytes) -> None:
    with pytest.raises(ParseError) as raised:
        jsonrpc.parse(body)
    assert raised.value.code == PARSE_ERROR


def test_a_surrogate_pair_escape_is_one_character_and_parses() -> None:
    message = jsonrpc.parse(b'{"jsonrpc": "2.0", "method": "n", "params": {"x": "\\ud83d\\ude00"}}')
    assert isinstance(message, Notification) and jsonrpc.param(message, "x") == "😀"


def test_nesting_up_to_the_limit_parses_and_one_level_more_is_a_parse_error() -> None:
    assert isinstance(jsonrpc.parse(nested(MAX_DEPTH)), Request)
    with pytest.raises(ParseError) as raised:
        jsonrpc.parse(nested(MAX_DEPTH + 1))
    assert raised.value.code == PARSE_ERROR and str(MAX_DEPTH) in raised.value.message


def test_nesting_deep_enough_to_exhaust_the_parser_is_a_parse_error() -> None:
    with pytest.raises(ParseError) as raised:
        jsonrpc.parse(b"[" * 100_000 + b"]" * 100_000)
    assert raised.value.code == PARSE_ERROR


def test_brackets_inside_strings_do_not_count_as_nesting() -> None:
    params = {"s": "[{" * MAX_DEPTH}
    message = jsonrpc.parse(json.dumps({"jsonrpc": "2.0", "method": "n", "params": params}))
    assert isinstance(message, Notification)


# -- copies across id spaces


def test_with_id_copies_a_message_under_another_id_and_leaves_the_original() -> None:
    request = Request(jsonrpc="2.0", id="client-7", method="tools/call", params={"name": "x"})
    upstream = jsonrpc.with_id(request, 3)
    assert (upstream.id, upstream.method, upstream.params) == (3, "tools/call", {"name": "x"})
    assert request.id == "client-7"
    answer = jsonrpc.with_id(Response(jsonrpc="2.0", id=3, result={"ok": True}), "client-7")
    assert answer == Response(jsonrpc="2.0", id="client-7", result={"ok": True})
    error = jsonrpc.with_id(jsonrpc.error_response(3, INTERNAL_ERROR, "gone"), "client-7")
    assert error.id == "client-7" and error.error.code == INTERNAL_ERROR


@pytest.mark.parametrize(
    "body",
    [
        b'{"jsonrpc":"2.0","id":7,"result":{"a":1},"io.example/x":[2]}',
        b'{"jsonrpc":"2.0","id":"s","method":"tools/call","params":{"name":"n"}}',
        b'{"jsonrpc":"2.0","id":null,"error":{"code":-1,"message":"m","data":3}}',
        b'{"jsonrpc":"2.0","method":"notifications/progress"}',
    ],
)
def test_copies_under_a_new_id_or_params_are_what_model_copy_makes(body: bytes) -> None:
    # with_id and the params helpers build their copies without model_copy (it cost too much
    # per call); they must stay indistinguishable from it, unknown members included.
    message = jsonrpc.parse(body)
    updates = [("id", 99), ("params", {"k": 1})]
    fields = type(message).model_fields
    for field, value in [(f, v) for f, v in updates if f in fields]:
        ours = jsonrpc._replaced(message, field, value)
        theirs = message.model_copy(update={field: value})
        assert ours == theirs and type(ours) is type(theirs)
        assert jsonrpc.dump(ours) == jsonrpc.dump(theirs)
        assert ours.model_fields_set == theirs.model_fields_set
        assert ours.model_extra == theirs.model_extra
        assert jsonrpc.parse(body) == message  # the original is unchanged


@pytest.mark.parametrize(
    ("meta", "token"),
    [
        ({"progressToken": "tok"}, "tok"),
        ({"progressToken": 0}, 0),
        ({"progressToken": True}, None),  # a bool is no id, so it names no call
        ({"progressToken": {"call": 1}}, None),
        ({"progressToken": 1.5}, None),
        ({}, None),
        ("not an object", None),
    ],
)
def test_a_progress_token_is_read_only_where_it_can_be_a_request_id(
    meta: object, token: object
) -> None:
    request = Request(jsonrpc="2.0", id=1, method="tools/call", params={"_meta": meta})
    assert jsonrpc.progress_token(request) == token


def test_with_progress_token_replaces_the_token_and_keeps_other_meta_and_params() -> None:
    meta = {"progressToken": "client", "io.example/trace": "t-1"}
    request = Request(jsonrpc="2.0", id=1, method="tools/call", params={"name": "x", "_meta": meta})
    upstream = jsonrpc.with_progress_token(request, 42)
    assert upstream.params == {
        "name": "x",
        "_meta": {"progressToken": 42, "io.example/trace": "t-1"},
    }
    assert jsonrpc.progress_token(request) == "client"  # the original is unchanged


@pytest.mark.parametrize(
    ("value", "is_id"),
    [(1, True), ("a", True), (0, True), (True, False), (1.0, False), (None, False), ([], False)],
)
def test_only_strings_and_integers_are_request_ids(value: object, is_id: bool) -> None:
    assert jsonrpc.is_request_id(value) is is_id


def test_params_are_added_replaced_and_removed_on_copies() -> None:
    note = Notification(jsonrpc="2.0", method="notifications/cancelled", params={"requestId": 9})
    renamed = jsonrpc.with_param(note, "requestId", 3)
    tagged = jsonrpc.with_meta(renamed, "io.example/k", {"v": 1})
    bare = jsonrpc.without_param(tagged, "_meta")
    assert renamed.params == {"requestId": 3}
    assert tagged.params == {"requestId": 3, "_meta": {"io.example/k": {"v": 1}}}
    assert bare.params == {"requestId": 3}
    assert note.params == {"requestId": 9}


def test_an_error_response_carries_data_only_when_given() -> None:
    plain = json.loads(jsonrpc.dump(jsonrpc.error_response(1, INTERNAL_ERROR, "no")))
    with_data = json.loads(jsonrpc.dump(jsonrpc.error_response(None, -32022, "v", {"s": [1]})))
    assert plain == {"jsonrpc": "2.0", "id": 1, "error": {"code": INTERNAL_ERROR, "message": "no"}}
    assert with_data["id"] is None and with_data["error"]["data"] == {"s": [1]}
