"""Configuration of tools safe to repeat: `routes[].tasks.repeatable` and `max_attempts`."""

from __future__ import annotations

import pytest

from gateway.config import ConfigError, TaskPolicy, parse_settings

HTTP = {"transport": "streamable_http", "url": "http://127.0.0.1:9/mcp"}


def settings_with(tasks: object, upstream: object = HTTP) -> dict[str, object]:
    return {"routes": [{"name": "r", "upstream": upstream, "tasks": tasks}]}


def policy(tasks: object, upstream: object = HTTP) -> TaskPolicy:
    return parse_settings(settings_with(tasks, upstream), "f.yaml", env={}).routes[0].tasks


def test_by_default_no_tool_is_repeated_and_a_task_runs_at_most_three_times() -> None:
    default = policy({})

    assert default.repeatable == () and default.max_attempts == 3
    assert not default.repeats("search", {"readOnlyHint": True, "idempotentHint": True})


def test_listed_tools_repeat_whatever_their_annotations_say() -> None:
    listed = policy({"repeatable": ["search", "fetch"], "max_attempts": 5})

    assert listed.repeatable == ("search", "fetch") and listed.max_attempts == 5
    assert listed.repeats("search", None)
    assert listed.repeats("fetch", {"readOnlyHint": False, "destructiveHint": True})
    assert not listed.repeats("delete", {"readOnlyHint": True})


@pytest.mark.parametrize(
    ("annotations", "repeats"),
    [
        ({"readOnlyHint": True}, True),
        ({"idempotentHint": True}, True),
        ({"readOnlyHint": False, "idempotentHint": True, "destructiveHint": True}, True),
        ({"readOnlyHint": False, "idempotentHint": False}, False),
        ({"destructiveHint": False}, False),
        # Only a real true counts: the hints are booleans.
        ({"readOnlyHint": "true", "idempotentHint": 1}, False),
        ({}, False),
        (None, False),
    ],
)
def test_annotated_repeats_the_tools_whose_annotations_say_read_only_or_idempotent(
    annotations: dict[str, object] | None, repeats: bool
) -> None:
    annotated = policy({"repeatable": "annotated"})

    assert annotated.repeats("any_tool", annotations) is repeats


@pytest.mark.parametrize(
    ("tasks", "expected"),
    [
        ({"repeatable": "search"}, "a single tool is written [name]"),
        ({"repeatable": True}, "must be a list of tool names, or `annotated`"),
        ({"repeatable": None}, "must be a list of tool names, or `annotated`"),
        ({"repeatable": {"search": True}}, "must be a list of tool names, or `annotated`"),
        ({"repeatable": ["search", 3]}, "item 1 is not a tool name"),
        ({"repeatable": [""]}, "item 0 is not a tool name"),
        ({"max_attempts": 0}, "greater than or equal to 1"),
        ({"max_attempts": 21}, "less than or equal to 20"),
        ({"max_attempts": "many"}, "valid integer"),
    ],
)
def test_wrong_shapes_are_refused_naming_the_key(tasks: dict[str, object], expected: str) -> None:
    with pytest.raises(ConfigError) as raised:
        parse_settings(settings_with(tasks), "gateway.yaml", env={})

    key = next(iter(tasks))
    message = str(raised.value)
    assert message.startswith(f"gateway.yaml: routes[0].tasks.{key}: ")
    assert expected in message and "\n" not in message


@pytest.mark.parametrize(
    ("upstream", "how"),
    [
        ({**HTTP, "identity": {"mode": "passthrough"}}, "upstream.identity.mode is passthrough"),
        ({**HTTP, "forward_headers": ["X-Trace", "authorization"]}, "forward_headers lists"),
        ({**HTTP, "forward_headers": ["AUTHORIZATION"]}, "forward_headers lists Authorization"),
    ],
)
@pytest.mark.parametrize("repeatable", [["search"], "annotated"])
def test_repeatable_is_refused_where_the_clients_credentials_go_upstream(
    upstream: dict[str, object], how: str, repeatable: object
) -> None:
    with pytest.raises(ConfigError) as raised:
        parse_settings(settings_with({"repeatable": repeatable}, upstream), "f.yaml", env={})

    message = str(raised.value)
    assert message.startswith("f.yaml: routes[0].tasks.repeatable: ")
    assert how in message and "credentials" in message and "never stored" in message


def test_a_credential_forwarding_route_may_keep_repeatable_empty() -> None:
    upstream = {**HTTP, "identity": {"mode": "passthrough"}, "forward_headers": ["Authorization"]}

    assert policy({"repeatable": [], "max_attempts": 2}, upstream).repeatable == ()


def test_other_forwarded_headers_and_the_gateways_own_identity_allow_repeatable() -> None:
    forwards_trace = {**HTTP, "forward_headers": ["X-Trace"]}
    stdio = {"transport": "stdio", "command": ["python", "-m", "server"]}

    assert policy({"repeatable": ["search"]}, forwards_trace).repeats("search", None)
    assert policy({"repeatable": "annotated"}, stdio).repeatable == "annotated"
