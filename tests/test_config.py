"""Configuration: the shipped file, env references, and errors that name file and key."""

from __future__ import annotations

import hashlib
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from pydantic import BaseModel

from gateway.config import ConfigError, Settings, load_settings, parse_settings, route_limits

from .conftest import ROOT


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
    assert load_settings(path) == Settings()
    assert load_settings(None).listen.host == "127.0.0.1"
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

    assert _keys(Settings()) <= listed(written)


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
    assert settings.routes[0].upstream.headers == {"X-Api-Key": "key-s3cret"}


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        ({"listen": {"hots": "x"}}, "f.yaml: listen.hots: unknown key"),
        ({"listen": {"port": "eighty"}}, "f.yaml: listen.port:"),
        (
            {"routes": [{"name": "a", "upstream": {"transport": "stdio"}}]},
            "f.yaml: routes[0].upstream: transport stdio needs `command`",
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
    loaded = parse_settings({"auth": keys}, "f.yaml", env={"BOB_KEY": "k"})
    assert loaded.auth.api_keys[0].digest == hashlib.sha256(b"k").digest()
    with pytest.raises(
        ConfigError, match=r"f.yaml: auth.api_keys\[0\]: environment variable BOB_KEY"
    ):
        parse_settings({"auth": keys}, "f.yaml", env={})


def test_cli_names_a_missing_key_file_and_exits_before_listening(tmp_path: Path) -> None:
    config = tmp_path / "gateway.yaml"
    config.write_text(
        "auth:\n  mode: jwt\n  jwt: {algorithms: [RS256], public_key_file: /nonexistent/key.pem}\n"
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
