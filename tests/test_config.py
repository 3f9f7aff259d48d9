"""Configuration: the shipped file, env references, and errors that name file and key."""

from __future__ import annotations

import hashlib
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from pydantic import BaseModel

from gateway.config import (
    ConfigError,
    JwtConfig,
    load_settings,
    parse_settings,
    route_auth,
    route_limits,
)

from .conftest import ROOT

ROUTES = [{"name": "r", "upstream": {"transport": "sse", "url": "http://127.0.0.1:9/sse"}}]


def _keys(model: BaseModel, prefix: str = "") -> set[str]:
    out = set()
    for name in type(model).model_fields:
        value = getattr(model, name)
        if isinstance(value, tuple) and value and isinstance(value[0], BaseModel):
            value = value[0]
        out.add(prefix + name)
        if isinstance(value, BaseModel):
            out |= _keys(value, f"{prefix}{name}.")
    return out


def test_shipped_config_is_exactly_the_built_in_default_and_lists_every_key() -> None:
    # `mcp-task-gateway` without --config runs these defaults; the file documents them.
    path = ROOT / "config" / "gateway.yaml"
    default = load_settings(None)
    assert load_settings(path) == default
    assert default.listen.host == "127.0.0.1"
    written = yaml.safe_load(path.read_text())

    def listed(data: object, prefix: str = "") -> set[str]:
        if isinstance(data, list) and data:
            data = data[0]
        if not isinstance(data, dict):
            return set()
        out = set()
        for key, value in data.items():
            out.add(prefix + key)
            out |= listed(value, f"{prefix}{key}.")
        return out

    assert _keys(default) <= listed(written)
    # `jwt` is null by default, so its keys are documented in the comments beside it.
    auth_section = path.read_text().split("\nauth:", 1)[1].split("\nlimits:", 1)[0]
    assert {key for key in JwtConfig.model_fields if f"{key}:" not in auth_section} == set()


def test_env_references_are_resolved(tmp_path: Path) -> None:
    settings = parse_settings(
        {
            "routes": [
                {
                    "name": "r",
                    "upstream": {
                        "transport": "streamable_http",
                        "url": "http://127.0.0.1:9/mcp",
                        "headers": {"X-Api-Key": "key-${API_KEY}"},
                    },
                }
            ]
        },
        "f.yaml",
        env={"API_KEY": "s3cret"},
    )
    assert settings.routes[0].single.headers == {"X-Api-Key": "key-s3cret"}


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        ({"listen": {"hots": "x"}}, "f.yaml: listen.hots: unknown key (did you mean `host`?)"),
        ({"listen": {"port": "eighty"}}, "f.yaml: listen.port:"),
        (
            {"routes": [{"name": "a", "upstream": {"transport": "stdio"}}]},
            "f.yaml: routes[0].upstream.command: required for transport stdio",
        ),
        (
            {"routes": [{"name": "a", "upstream": {"transport": "ftp", "url": "x"}}]},
            "f.yaml: routes[0].upstream.transport:",
        ),
        (
            {"routes": [{"name": "a", "upstream": {"transport": "sse", "url": "${MISSING}"}}]},
            "f.yaml: routes[0].upstream.url: environment variable MISSING is not set",
        ),
        (
            {
                "routes": [
                    {"name": "a", "upstream": {"transport": "sse", "url": "http://x/sse"}},
                    {"name": "a", "upstream": {"transport": "sse", "url": "http://y/sse"}},
                ]
            },
            "two routes share the name 'a'",
        ),
        ({"routes": []}, "f.yaml: routes:"),
        (["not", "a", "mapping"], "f.yaml: the top level must be a mapping"),
        (
            {"routes": [{"name": "a", "upstream": {"transport": "sse", "url": "x:8/sse"}}]},
            "f.yaml: routes[0].upstream.url: must be an http:// or https:// URL with a host",
        ),
        (
            {"routes": [{"name": "a", "upstream": {"transport": "sse", "url": "http://x:y/s"}}]},
            "f.yaml: routes[0].upstream.url: has a port that is not a number",
        ),
        (
            {"audit": {"file": "a.log", "stream": "stderr"}, "routes": ROUTES},
            "f.yaml: audit.stream: is where the lines go without `file`",
        ),
        *(
            # A careless poll window: one longer than a client waits for an answer, or none.
            (
                {"routes": [{**ROUTES[0], "tasks": {"poll_window_ms": window}}]},
                "f.yaml: routes[0].tasks.poll_window_ms:",
            )
            for window in (-1, 10_001, 1e18, "soon", None)
        ),
        *(
            # Durations past a century overflowed the dates and timers they became, and caps
            # past the databases' integers failed every creation.
            (
                {"routes": [{**ROUTES[0], "tasks": {key: value}}]},
                f"f.yaml: routes[0].tasks.{key}:",
            )
            for key, value in (
                ("max_ttl_ms", 10**16),
                ("default_ttl_ms", 10**16),
                ("poll_interval_ms", 10**20),
                ("time_limit_seconds", 1e300),
                ("input_timeout_seconds", 1e300),
            )
        ),
        *(
            ({"limits": {key: 10**20}, "routes": ROUTES}, f"f.yaml: limits.{key}:")
            for key in ("active_tasks_per_principal", "sessions_per_principal", "max_ttl_ms")
        ),
        (
            {"routes": [{**ROUTES[0], "limits": {"active_tasks_per_principal": 10**20}}]},
            "f.yaml: routes[0].limits.active_tasks_per_principal:",
        ),
        *(
            # Lax validation read a yes/no as 1 or 0: a 1 ms poll interval, a cap of none.
            (data, f"f.yaml: {key}: a number is expected, not true or false")
            for data, key in (
                (
                    {"routes": [{**ROUTES[0], "tasks": {"poll_interval_ms": True}}]},
                    "routes[0].tasks.poll_interval_ms",
                ),
                ({"listen": {"port": True}, "routes": ROUTES}, "listen.port"),
                (
                    {"limits": {"active_tasks_per_principal": False}, "routes": ROUTES},
                    "limits.active_tasks_per_principal",
                ),
                (
                    {"routes": [{**ROUTES[0], "tasks": {"time_limit_seconds": True}}]},
                    "routes[0].tasks.time_limit_seconds",
                ),
                ({"tracing": {"sample_ratio": True}, "routes": ROUTES}, "tracing.sample_ratio"),
            )
        ),
    ],
)
def test_bad_config_names_the_file_and_the_key(data: object, expected: str) -> None:
    with pytest.raises(ConfigError) as raised:
        parse_settings(data, "f.yaml", env={})
    assert expected in str(raised.value)


def test_bad_yaml_and_missing_files_are_config_errors(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("listen: [unclosed\n")
    with pytest.raises(ConfigError, match="bad.yaml: not valid YAML"):
        load_settings(bad)
    with pytest.raises(ConfigError, match="nope.yaml: cannot read"):
        load_settings(tmp_path / "nope.yaml")


def test_cli_exits_nonzero_naming_the_key_before_listening(tmp_path: Path) -> None:
    bad = tmp_path / "gateway.yaml"
    bad.write_text("listen: {host: 127.0.0.1, port: 8080}\nroutes:\n  - name: x\n    upstrem: {}\n")
    run = subprocess.run(
        [sys.executable, "-m", "gateway", "--config", str(bad)],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
    )
    assert run.returncode == 2
    assert f"{bad}: routes[0].upstrem: unknown key" in run.stderr
    assert "Running on" not in run.stderr


def test_route_limits_override_the_global_ones_and_null_inherits() -> None:
    upstream = {"transport": "sse", "url": "http://127.0.0.1:9/sse"}
    settings = parse_settings(
        {
            "limits": {"burst": 5, "sessions_per_principal": None},
            "routes": [
                {"name": "a", "upstream": upstream, "limits": {"requests_per_second": 7}},
                {"name": "b", "upstream": upstream, "limits": {"requests_per_second": None}},
            ],
        },
        "f.yaml",
        env={},
    )
    a, b = (route_limits(settings, route) for route in settings.routes)
    assert (a.requests_per_second, a.burst, a.sessions_per_principal) == (7, 5, None)
    assert b.requests_per_second == 100  # null on a route inherits; it never lifts a limit


def test_secrets_named_by_env_are_resolved_at_load_and_a_missing_one_names_the_key() -> None:
    keys = {"mode": "api_keys", "api_keys": [{"principal": "bob", "key_env": "BOB_KEY"}]}
    loaded = parse_settings({"auth": keys, "routes": ROUTES}, "f.yaml", env={"BOB_KEY": "k"})
    assert loaded.auth.api_keys[0].digest == hashlib.sha256(b"k").digest()
    with pytest.raises(
        ConfigError, match=r"f.yaml: auth.api_keys\[0\]: environment variable BOB_KEY"
    ):
        parse_settings({"auth": keys, "routes": ROUTES}, "f.yaml", env={})


def test_every_unset_variable_is_named_at_once_never_a_value() -> None:
    upstream = {
        "transport": "streamable_http",
        "url": "http://${HOST}:${PORT}/mcp",
        "headers": {"Authorization": "Bearer ${TOKEN}"},
    }
    data = {
        "auth": {"api_keys": [{"principal": "bob", "key_env": "BOB_KEY"}]},
        "metrics": {"bearer_token_env": "SCRAPE_TOKEN"},
        "routes": [{"name": "r", "upstream": upstream}],
    }
    with pytest.raises(ConfigError) as raised:
        parse_settings(data, "f.yaml", env={"PORT": "8", "SCRAPE_TOKEN": "hunter2"})
    assert str(raised.value).splitlines() == [
        "f.yaml: routes[0].upstream.url: environment variable HOST is not set",
        "f.yaml: routes[0].upstream.headers.Authorization: environment variable TOKEN is not set",
        "f.yaml: auth.api_keys[0].key_env: environment variable BOB_KEY is not set (or empty)",
    ]


def test_an_upstream_is_shown_without_credentials_query_or_arguments() -> None:
    def location(upstream: dict[str, object]) -> str:
        settings = parse_settings({"routes": [{"name": "r", "upstream": upstream}]}, "f", env={})
        return settings.routes[0].single.location

    url = "https://user:pw@[::1]:8443/a/mcp?token=t#f"
    assert location({"transport": "streamable_http", "url": url}) == "https://[::1]:8443/a/mcp"
    assert location({"transport": "sse", "url": "http://h/sse"}) == "http://h/sse"
    assert location({"transport": "stdio", "command": ["server", "--key", "k"]}) == "server"


def test_cli_names_a_missing_key_file_and_exits_before_listening(tmp_path: Path) -> None:
    config = tmp_path / "gateway.yaml"
    config.write_text(
        "auth:\n  mode: jwt\n  jwt: {algorithms: [RS256], public_key_file: /nonexistent/key.pem,"
        " audience: gw}\nroutes: [{name: r, upstream: {transport: sse, url: 'http://127.0.0.1:9/sse'}}]\n"
    )
    run = subprocess.run(
        [sys.executable, "-m", "gateway", "--config", str(config)],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )
    assert run.returncode == 2
    assert "/nonexistent/key.pem" in run.stderr and "public_key_file" in run.stderr
    assert "Running on" not in run.stderr


# -- auth: the mode an auth section means

KEYS = [{"principal": "bob", "key_env": "BOB_KEY"}]
JWT = {"secret_env": "JWT_SECRET", "audience": "gateway"}
AUTH_ENV = {"BOB_KEY": "k", "JWT_SECRET": "s" * 32}


def _route(auth: object = None) -> dict[str, object]:
    route: dict[str, object] = {"name": "r", "upstream": ROUTES[0]["upstream"]}
    if auth is not None:
        route["auth"] = auth
    return route


@pytest.mark.parametrize(
    ("top", "route", "modes"),
    [
        ({"api_keys": KEYS}, None, ("api_keys", "api_keys")),
        ({"jwt": JWT}, None, ("jwt", "jwt")),
        ({"mode": "api_keys", "api_keys": KEYS}, None, ("api_keys", "api_keys")),
        ({"mode": "jwt", "jwt": JWT}, None, ("jwt", "jwt")),
        ({}, None, ("none", "none")),
        ({"mode": "none"}, None, ("none", "none")),
        ({"mode": "none", "api_keys": [], "jwt": None}, None, ("none", "none")),
        ({"list_tasks_without_auth": True}, None, ("none", "none")),
        # A route's section without mode: its own credentials decide, else it keeps the top's.
        ({"api_keys": KEYS}, {"jwt": JWT}, ("api_keys", "jwt")),
        ({"jwt": JWT}, {"api_keys": KEYS}, ("jwt", "api_keys")),
        ({"api_keys": KEYS}, {}, ("api_keys", "api_keys")),
        ({"api_keys": KEYS}, {"list_tasks_without_auth": True}, ("api_keys", "api_keys")),
        ({"jwt": JWT}, {"list_tasks_without_auth": True}, ("jwt", "jwt")),
        # Opening a route takes `mode: none`, said on the route.
        ({"api_keys": KEYS}, {"mode": "none"}, ("api_keys", "none")),
        ({}, {"api_keys": KEYS}, ("none", "api_keys")),
        ({}, {"mode": "jwt", "jwt": JWT}, ("none", "jwt")),
    ],
    ids=[
        "api-keys-without-mode",
        "jwt-without-mode",
        "api-keys",
        "jwt",
        "empty",
        "none",
        "none-with-empty-credentials",
        "list-tasks-only",
        "route-jwt-without-mode",
        "route-api-keys-without-mode",
        "route-empty-keeps-top",
        "route-list-tasks-keeps-top-keys",
        "route-list-tasks-keeps-top-jwt",
        "route-opened-explicitly",
        "route-closed-under-open-top",
        "route-jwt-under-open-top",
    ],
)
def test_accepted_auth_shapes_and_the_mode_each_means(
    top: dict[str, object], route: dict[str, object] | None, modes: tuple[str, str]
) -> None:
    settings = parse_settings({"auth": top, "routes": [_route(route)]}, "f.yaml", env=AUTH_ENV)

    assert (settings.auth.mode, route_auth(settings, settings.routes[0]).mode) == modes


def test_a_route_section_without_mode_or_credentials_keeps_its_other_keys() -> None:
    settings = parse_settings(
        {"routes": [_route({"list_tasks_without_auth": True}), _route({}) | {"name": "s"}]},
        "f.yaml",
        env=AUTH_ENV,
    )
    listing, empty = (route_auth(settings, route) for route in settings.routes)

    assert (listing.mode, listing.list_tasks_without_auth) == ("none", True)
    assert empty == settings.auth


@pytest.mark.parametrize(
    ("top", "route", "expected"),
    [
        (
            {"api_keys": KEYS, "jwt": JWT},
            None,
            "f.yaml: auth: `api_keys` and `jwt` are both written",
        ),
        (
            {"mode": "jwt", "api_keys": KEYS, "jwt": JWT},
            None,
            "f.yaml: auth: `api_keys` and `jwt` are both written",
        ),
        (
            {"mode": "none", "api_keys": KEYS},
            None,
            "f.yaml: auth.api_keys: written, but `mode: none` turns authentication off",
        ),
        (
            {"mode": "none", "jwt": JWT},
            None,
            "f.yaml: auth.jwt: written, but `mode: none` turns authentication off",
        ),
        ({"mode": "api_keys"}, None, "f.yaml: auth.api_keys: mode api_keys needs"),
        ({"mode": "jwt"}, None, "f.yaml: auth.jwt: mode jwt needs this section"),
        ({"mode": "jwt", "jwt": None}, None, "f.yaml: auth.jwt: mode jwt needs this section"),
        ({"mode": "basic"}, None, "f.yaml: auth.mode:"),
        (
            {"api_keys": KEYS},
            {"mode": "none", "api_keys": KEYS},
            "f.yaml: routes[0].auth.api_keys: written, but `mode: none`",
        ),
        (
            {"api_keys": KEYS},
            {"api_keys": KEYS, "jwt": JWT},
            "f.yaml: routes[0].auth: `api_keys` and `jwt` are both written",
        ),
        ({}, {"mode": "api_keys"}, "f.yaml: routes[0].auth.api_keys: mode api_keys needs"),
        (
            # The same key by its digest and through the environment: two callers at once.
            {"api_keys": [*KEYS, {"principal": "eve", "sha256": hashlib.sha256(b"k").hexdigest()}]},
            None,
            "f.yaml: auth.api_keys: one key is listed for both 'bob' and 'eve'",
        ),
    ],
    ids=[
        "both-without-mode",
        "both-with-mode",
        "none-with-api-keys",
        "none-with-jwt",
        "api-keys-mode-without-keys",
        "jwt-mode-without-jwt",
        "jwt-mode-with-null-jwt",
        "unknown-mode",
        "route-none-with-api-keys",
        "route-both",
        "route-api-keys-mode-without-keys",
        "one-key-two-principals",
    ],
)
def test_refused_auth_shapes_name_the_file_and_the_key(
    top: dict[str, object], route: dict[str, object] | None, expected: str
) -> None:
    with pytest.raises(ConfigError) as raised:
        parse_settings({"auth": top, "routes": [_route(route)]}, "f.yaml", env=AUTH_ENV)

    assert expected in str(raised.value)


# -- auth.jwt: audience and key sources


@pytest.mark.parametrize(
    "jwt",
    [
        JWT,
        {"secret_env": "JWT_SECRET", "verify_audience": False},
        {"algorithms": ["RS256"], "audience": "gw", "jwks_url": "https://id.example.com/jwks"},
        {"algorithms": ["ES256"], "audience": "gw", "jwks_url": "http://127.0.0.1:9/jwks.json"},
        {"algorithms": ["RS256"], "audience": "gw", "jwks_file": "/etc/jwks.json"},
        {"algorithms": ["RS256"], "audience": "gw", "public_key_file": "/etc/key.pem"},
    ],
    ids=["audience", "audience-check-off", "jwks-url-https", "jwks-url-http", "jwks-file", "pem"],
)
def test_accepted_jwt_sections(jwt: dict[str, object]) -> None:
    settings = parse_settings({"auth": {"jwt": jwt}, "routes": ROUTES}, "f.yaml", env=AUTH_ENV)

    assert settings.auth.jwt is not None and settings.auth.mode == "jwt"


@pytest.mark.parametrize(
    ("jwt", "expected"),
    [
        ({"secret_env": "JWT_SECRET"}, "f.yaml: auth.jwt.audience: required"),
        (
            {"secret_env": "JWT_SECRET", "audience": "gw", "verify_audience": False},
            "f.yaml: auth.jwt.verify_audience: false, but `audience` is set",
        ),
        (
            {"algorithms": ["RS256"], "audience": "gw", "jwks_url": "file:///etc/jwks.json"},
            "f.yaml: auth.jwt.jwks_url: must be an http:// or https:// URL",
        ),
        (
            {"algorithms": ["RS256"], "audience": "gw", "jwks_url": "https:///jwks"},
            "f.yaml: auth.jwt.jwks_url: must be an http:// or https:// URL",
        ),
        (
            {"algorithms": ["RS256"], "audience": "gw"},
            "f.yaml: auth.jwt: RS256/ES256 need exactly one of",
        ),
        (
            {
                "algorithms": ["RS256"],
                "audience": "gw",
                "jwks_url": "https://id.example.com/jwks",
                "jwks_file": "/etc/jwks.json",
            },
            "f.yaml: auth.jwt: RS256/ES256 need exactly one of",
        ),
        (
            {**JWT, "jwks_url": "https://id.example.com/jwks"},
            "f.yaml: auth.jwt.jwks_url: is for RS256/ES256; HS256 uses `secret_env`",
        ),
        (
            {
                "algorithms": ["RS256"],
                "audience": "gw",
                "jwks_url": "https://x/j",
                "jwks_cache_seconds": 0,
            },
            "f.yaml: auth.jwt.jwks_cache_seconds:",
        ),
    ],
    ids=[
        "no-audience",
        "audience-and-check-off",
        "jwks-url-file-scheme",
        "jwks-url-no-host",
        "no-key-source",
        "two-key-sources",
        "hs256-with-jwks-url",
        "zero-cache",
    ],
)
def test_refused_jwt_sections_name_the_key(jwt: dict[str, object], expected: str) -> None:
    with pytest.raises(ConfigError) as raised:
        parse_settings({"auth": {"jwt": jwt}, "routes": ROUTES}, "f.yaml", env=AUTH_ENV)

    assert expected in str(raised.value)


# -- start-up: routes, YAML, lists


def test_only_a_run_without_config_serves_the_demo(tmp_path: Path) -> None:
    commented_out = tmp_path / "gateway.yaml"
    commented_out.write_text("listen: {port: 8080}\n# routes:\n#   - name: mine\n")
    empty = tmp_path / "empty.yaml"
    empty.write_text("")

    assert [route.name for route in load_settings(None).routes] == ["demo"]
    for path in (commented_out, empty):
        with pytest.raises(ConfigError) as raised:
            load_settings(path)
        assert str(raised.value) == (
            f"{path}: routes: required: list at least one route "
            "(the demo runs only when no --config is given)"
        )


def test_a_nested_mis_indented_routes_key_is_refused_not_ignored() -> None:
    with pytest.raises(ConfigError) as raised:
        parse_settings({"listen": {"port": 8080, "routes": ROUTES}}, "f.yaml", env={})

    assert "f.yaml: listen.routes: unknown key" in str(raised.value)
    assert "f.yaml: routes: required" in str(raised.value)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "listen:\n  host: [unclosed\nroutes: []\n",
            "line 3, column 7: expected ',' or ']', but got ':' "
            "(while parsing a flow sequence at line 2, column 9)",
        ),
        (
            "listen:\n\thost: x\n",
            "line 2, column 1: found character '\\t' that cannot start any token",
        ),
        ("routes: *nowhere\n", "line 1, column 9: found undefined alias 'nowhere'"),
    ],
    ids=["unclosed-list", "tab", "undefined-alias"],
)
def test_yaml_syntax_errors_name_the_file_line_and_column(
    tmp_path: Path, text: str, expected: str
) -> None:
    path = tmp_path / "gateway.yaml"
    path.write_text(text)

    with pytest.raises(ConfigError) as raised:
        load_settings(path)

    assert str(raised.value).startswith(f"{path}: not valid YAML: {expected}")


def test_yaml_errors_do_not_quote_the_offending_line(tmp_path: Path) -> None:
    path = tmp_path / "gateway.yaml"
    path.write_text("routes:\n  headers: {Authorization: Bearer sk-live-secret, [\n")

    with pytest.raises(ConfigError) as raised:
        load_settings(path)

    assert "sk-live-secret" not in str(raised.value)


@pytest.mark.parametrize(
    ("upstream", "expected"),
    [
        (
            {"transport": "stdio", "command": "python -m server --token ${TOKEN}"},
            "f.yaml: routes[0].upstream.command: a list is expected "
            "(program and arguments, e.g. [python, -m, server]), not a single string",
        ),
        (
            {"transport": "sse", "url": "http://x/sse", "forward_headers": "Authorization"},
            "f.yaml: routes[0].upstream.forward_headers: a list is expected, not a single string",
        ),
    ],
    ids=["command", "forward-headers"],
)
def test_a_string_where_a_list_belongs_says_a_list_is_expected(
    upstream: dict[str, object], expected: str
) -> None:
    with pytest.raises(ConfigError) as raised:
        parse_settings(
            {"routes": [{"name": "a", "upstream": upstream}]}, "f.yaml", env={"TOKEN": "s3cret"}
        )

    assert str(raised.value) == expected  # and never the value: it may hold a secret
