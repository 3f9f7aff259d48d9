"""The pure rules of a route of several members (`gateway.protocol.members`): names split at
the first separator, cursors that refuse what the gateway never gave, capabilities merged."""

from __future__ import annotations

import base64

import pytest

from gateway.protocol import members


@pytest.mark.parametrize(
    ("name", "split"),
    [
        ("search__web", ("search", "web")),
        ("files__a__b", ("files", "a__b")),  # a tool's own name may hold the separator
        ("plain", None),
        ("__web", None),
        ("search__", None),
        ("", None),
    ],
)
def test_a_client_name_splits_at_its_first_separator(
    name: str, split: tuple[str, str] | None
) -> None:
    assert members.split(name) == split
    if split is not None:
        assert members.qualify(*split) == name


def test_a_cursor_carries_the_members_with_more_to_come() -> None:
    cursor = members.cursor([(0, "p2"), (2, "x")])
    assert members.read_cursor(cursor, 3) == [(0, "p2"), (2, "x")]
    assert members.read_cursor(None, 3) is None


def _b64(raw: str) -> str:
    return base64.urlsafe_b64encode(raw.encode()).decode()


@pytest.mark.parametrize(
    "cursor",
    [
        "",
        "not base64 ~~~",
        _b64("not json"),
        _b64("[]"),
        _b64("{}"),
        _b64('[[3, "x"]]'),  # no fourth member
        _b64('[[-1, "x"]]'),
        _b64('[[true, "x"]]'),  # a bool is not an index
        _b64("[[0, 5]]"),
        _b64('[[1, "a"], [0, "b"]]'),  # out of order
        _b64('[[0, "a"], [0, "b"]]'),  # twice
        _b64("[" * 10_000),
        _b64("[" * 3000),  # deep, within the length: the parser's recursion must not see it
        "A" * 5000,
        17,
    ],
)
def test_a_cursor_the_gateway_never_gave_is_refused(cursor: object) -> None:
    with pytest.raises(ValueError, match="invalid cursor"):
        members.read_cursor(cursor, 3)


def test_a_page_qualifies_names_and_drops_what_is_not_an_item() -> None:
    result = {"tools": [{"name": "a"}, {"name": ""}, {"nope": 1}, "text", {"name": 5}]}
    assert members.qualified_page(result, "tools", "m") == [{"name": "m__a"}]
    assert members.qualified_page({"tools": "x"}, "tools", "m") == []
    resources = {"resources": [{"uri": "file:///a", "name": "a"}, 3]}
    assert members.qualified_page(resources, "resources", "m") == [
        {"uri": "file:///a", "name": "a"}
    ]


def test_capabilities_merge_to_what_any_member_offers() -> None:
    merged = members.merged_initialize(
        "work",
        "2025-06-18",
        {
            "a": {"capabilities": {"tools": {"listChanged": False}}, "instructions": "A!"},
            "b": {"capabilities": {"prompts": {}, "logging": {}, "resources": {"subscribe": True}}},
        },
        "1.0",
    )
    assert merged["capabilities"] == {
        "tools": {"listChanged": True},
        "prompts": {"listChanged": True},
        "logging": {},
        "resources": {"subscribe": True, "listChanged": True},
    }
    assert merged["instructions"] == "a: A!"
    assert merged["serverInfo"] == {"name": "work", "version": "1.0"}
    assert merged["protocolVersion"] == "2025-06-18"
