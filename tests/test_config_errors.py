"""Errors a newcomer can act on: a missing key named at its own path, the nearest valid key
for a mistyped one, a file without routes told so, and a careless key shown safely."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from gateway.config import ConfigError, load_admin, parse_settings

ROUTES = [{"name": "r", "upstream": {"transport": "sse", "url": "http://127.0.0.1:9/sse"}}]
STDIO: dict[str, Any] = {"upstream": {"transport": "stdio", "command": ["server"]}}


@pytest.mark.parametrize(
    ("route", "expected"),
    [
        ({"upstream": {"transport": "streamable_http"}}, "routes[0].upstream.url: required for"),
        ({"upstream": {"transport": "sse"}}, "routes[0].upstream.url: required for transport sse"),
        ({"upstream": {"transport": "stdio"}}, "routes[0].upstream.command: required for"),
        (
            {"upstream": {"transport": "stdio", "command": ["x"], "url": "http://a/mcp"}},
            "routes[0].upstream.url: is for streamable_http and sse, not stdio",
        ),
        (
            {"upstreams": [{"name": "a", "transport": "streamable_http"}]},
            "routes[0].upstreams[0].url: required for transport streamable_http",
        ),
        ({}, "routes[0].upstream: required: the server this route fronts"),
        (
            {
                "upstream": {"transport": "stdio", "command": ["x"]},
                "tasks": {"default_ttl_ms": 10, "max_ttl_ms": 5},
            },
            "routes[0].tasks.default_ttl_ms: must not exceed max_ttl_ms (5)",
        ),
    ],
)
def test_a_missing_conditional_key_is_named_at_its_own_path(
    route: dict[str, Any], expected: str
) -> None:
    """docs/configuration.md promises the key path of the key to add (`routes[0].upstream.url`),
    not the section's."""
    with pytest.raises(ConfigError) as raised:
        parse_settings({"routes": [{"name": "a", **route}]}, "f.yaml", env={})

    assert f"f.yaml: {expected}" in str(raised.value)


def test_an_hs256_section_without_its_secret_names_secret_env() -> None:
    with pytest.raises(ConfigError) as raised:
        parse_settings(
            {
                "auth": {"jwt": {"algorithms": ["HS256"], "verify_audience": False}},
                "routes": ROUTES,
            },
            "f.yaml",
        )

    assert "f.yaml: auth.jwt.secret_env: required for HS256" in str(raised.value)


def test_a_file_with_no_routes_says_it_needs_one() -> None:
    with pytest.raises(ConfigError) as raised:
        parse_settings({"routes": []}, "f.yaml", env={})

    assert str(raised.value) == (
        "f.yaml: routes: required: list at least one route "
        "(the demo runs only when no --config is given)"
    )


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        ({"listen": {"prot": 1}}, "listen.prot: unknown key (did you mean `port`?)"),
        ({"stroe": {}}, "stroe: unknown key (did you mean `store`?)"),
        (
            {"routes": [{"name": "a", "upstrem": {}}]},
            "routes[0].upstrem: unknown key (did you mean `upstream`?)",
        ),
        (
            {"routes": [{"name": "a", **STDIO, "tasks": {"sync_windw_ms": 1}}]},
            "routes[0].tasks.sync_windw_ms: unknown key (did you mean `sync_window_ms`?)",
        ),
        (
            {
                "routes": [
                    {"name": "a", "upstreams": [{"name": "m", **STDIO["upstream"], "comand": 1}]}
                ]
            },
            "routes[0].upstreams[0].comand: unknown key (did you mean `command`?)",
        ),
        ({"routes": [{"name": "a", **STDIO, "zzzzzz": 1}]}, "routes[0].zzzzzz: unknown key\n"),
    ],
)
def test_an_unknown_key_suggests_the_nearest_valid_one(data: dict[str, Any], expected: str) -> None:
    data = {"routes": [{"name": "a", **STDIO}], **data}
    with pytest.raises(ConfigError) as raised:
        parse_settings(data, "f.yaml", env={})

    assert f"f.yaml: {expected}" in str(raised.value) + "\n"


def test_the_admin_command_suggests_keys_of_the_admin_section(tmp_path: Path) -> None:
    path = tmp_path / "gateway.yaml"
    path.write_text("admin: {tokn_env: X}\n")
    with pytest.raises(ConfigError) as raised:
        load_admin(path)

    assert f"{path}: admin.tokn_env: unknown key (did you mean `token_env`?)" in str(raised.value)


@pytest.mark.parametrize(
    ("key", "shown"),
    [
        ("upstr\x00eam", "routes[0].upstr\\x00eam: unknown key (did you mean `upstream`?)"),
        ("rou\x1b[31mtes", "routes[0].rou\\x1b[31mtes: unknown key"),
        ("u" * 1_000_000, "routes[0]." + "u" * 80 + "...: unknown key"),
    ],
)
def test_an_unknown_key_is_shown_escaped_and_cut(key: str, shown: str) -> None:
    """A careless file's key may hold NUL, a terminal's escape sequence or a megabyte."""
    with pytest.raises(ConfigError) as raised:
        parse_settings({"routes": [{"name": "a", **STDIO, key: 1}]}, "f.yaml", env={})

    message = str(raised.value)
    assert f"f.yaml: {shown}" in message
    assert "\x00" not in message and "\x1b" not in message and len(message) < 400
