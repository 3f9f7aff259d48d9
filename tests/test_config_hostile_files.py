"""Files that are not configurations, or that are built to hurt: each is refused at once with
one line naming it (and the key), never read for ever, expanded into all the memory, or let
through to fail later with a traceback."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from gateway.app import create_app
from gateway.commands.config_check import main as config_check_main
from gateway.commands.serve import serve
from gateway.config import ConfigError, load_admin, load_settings
from gateway.security.jwt_keys import load_jwks, load_pem

ROUTES = 'routes: [{name: r, upstream: {transport: sse, url: "http://127.0.0.1:9/sse"}}]\n'
ADMIN_TOKEN = "0123456789abcdef0123456789abcdef"
#: Each JWT key file's loader, and the key that names its file.
KEY_LOADERS = [(load_pem, "auth.jwt.public_key_file"), (load_jwks, "auth.jwt.jwks_file")]


def _fifo_refused(fifo: Path, read: Callable[[Path], Any]) -> BaseException | None:
    """What `read(fifo)` raised, within five seconds; a read still waiting for a writer then
    gets one that writes nothing, so that a failing test ends too."""
    os.mkfifo(fifo)
    with ThreadPoolExecutor(1) as pool:
        reading = pool.submit(read, fifo)
        try:
            return reading.exception(timeout=5)
        finally:
            if not reading.done():
                os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))


def test_a_fifo_as_the_config_file_is_refused_without_waiting_for_a_writer(
    tmp_path: Path,
) -> None:
    """A SIGHUP reload reads the file in a thread under a lock: a FIFO held it for ever, and
    shutdown, which waits for that thread, with it."""
    fifo = tmp_path / "gateway.yaml"

    raised = _fifo_refused(fifo, load_settings)

    assert isinstance(raised, ConfigError)
    assert str(raised) == f"{fifo}: not a regular file: not a configuration"


def test_a_fifo_as_the_config_file_is_refused_for_the_admin_command_too(tmp_path: Path) -> None:
    fifo = tmp_path / "gateway.yaml"

    raised = _fifo_refused(fifo, load_admin)

    assert isinstance(raised, ConfigError)
    assert str(raised) == f"{fifo}: not a regular file: not a configuration"


def test_a_device_or_a_directory_as_the_config_file_stays_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as device:
        load_settings("/dev/zero")
    with pytest.raises(ConfigError) as directory:
        load_settings(tmp_path)

    assert str(device.value) == "/dev/zero: not a regular file: not a configuration"
    assert str(directory.value) == f"{tmp_path}: cannot read the configuration: Is a directory"


@pytest.mark.parametrize(("load", "key"), KEY_LOADERS)
def test_a_fifo_as_a_jwt_key_file_is_refused_without_waiting_for_a_writer(
    tmp_path: Path, load: Callable[[str, list[str], str], Any], key: str
) -> None:
    fifo = tmp_path / "key"

    raised = _fifo_refused(fifo, lambda path: load(str(path), ["RS256"], key))

    assert isinstance(raised, ValueError)
    assert str(raised) == f"{key}: {fifo}: not a regular file: not a key file"


def test_a_fifo_as_a_jwt_key_file_stops_the_gateways_start_without_waiting(
    tmp_path: Path,
) -> None:
    """The route's own read of its key files (what a reload compares) comes before the
    verifier's, at start and in each reload: it waited on a FIFO too."""
    fifo = tmp_path / "key.pem"
    config = tmp_path / "gateway.yaml"
    jwt = f"{{algorithms: [RS256], public_key_file: {fifo}, audience: aud}}"
    config.write_text(f"auth: {{jwt: {jwt}}}\n{ROUTES}")

    raised = _fifo_refused(fifo, lambda _: create_app(load_settings(config)))

    assert isinstance(raised, ValueError)
    assert "not a regular file: not a key file" in str(raised)


@pytest.mark.parametrize(("load", "key"), KEY_LOADERS)
def test_a_jwt_key_file_past_a_mebibyte_is_refused_unread(
    tmp_path: Path, load: Callable[[str, list[str], str], Any], key: str
) -> None:
    """/dev/zero, or a log named by mistake, was read whole into memory."""
    big = tmp_path / "key"
    with big.open("wb") as file:
        file.truncate(1024 * 1024 + 1)

    with pytest.raises(ValueError) as raised:
        load(str(big), ["RS256"], key)

    assert str(raised.value) == f"{key}: {big}: larger than 1048576 bytes: not a key file"


def test_an_alias_bomb_is_refused_within_a_second(tmp_path: Path) -> None:
    """Seven levels of nine aliases each: 600 bytes that expand to 4.8 million values, which
    took 20 s and 200 MB to walk (and one level more, nine times that)."""
    lines = ["l0: &l0 [" + ", ".join(["lol"] * 9) + "]"]
    lines += [f"l{n}: &l{n} [" + ", ".join([f"*l{n - 1}"] * 9) + "]" for n in range(1, 7)]
    bomb = tmp_path / "gateway.yaml"
    bomb.write_text("\n".join(lines) + "\n" + ROUTES)
    assert bomb.stat().st_size < 1000

    started = time.monotonic()
    with pytest.raises(ConfigError) as raised:
        load_settings(bomb)
    with pytest.raises(ConfigError) as raised_admin:
        load_admin(bomb)

    assert time.monotonic() - started < 1
    expected = (
        f"{bomb}: more than 1000000 values once its aliases are expanded: not a configuration"
    )
    assert str(raised.value) == str(raised_admin.value) == expected


def test_an_alias_to_itself_is_refused_as_nested_too_deeply(tmp_path: Path) -> None:
    config = tmp_path / "gateway.yaml"
    config.write_text("loop: &loop [*loop]\n" + ROUTES)

    with pytest.raises(ConfigError) as raised:
        load_settings(config)

    assert str(raised.value) == f"{config}: nested too deeply to be a configuration"


def test_anchors_shared_by_routes_still_load(tmp_path: Path) -> None:
    config = tmp_path / "gateway.yaml"
    config.write_text(
        "routes:\n"
        "  - {name: a, upstream: &up {transport: sse, url: 'http://127.0.0.1:9/sse'}}\n"
        "  - {name: b, upstream: *up}\n"
        "  - {name: c, upstream: {<<: *up, url: 'http://127.0.0.1:10/sse'}}\n"
    )

    settings = load_settings(config)

    assert [route.name for route in settings.routes] == ["a", "b", "c"]


def test_a_file_of_twenty_thousand_api_keys_is_within_the_bound(tmp_path: Path) -> None:
    keys = "".join(f"    - {{principal: p{n}, sha256: '{n:064x}'}}\n" for n in range(20_000))
    config = tmp_path / "gateway.yaml"
    config.write_text(f"auth:\n  api_keys:\n{keys}{ROUTES}")

    settings = load_settings(config)

    assert len(settings.auth.api_keys) == 20_000


@pytest.mark.parametrize(
    ("section", "key"),
    [
        ("http: {replay_buffer_events: %d}", "http.replay_buffer_events"),
        ("limits: {burst: %d}", "limits.burst"),
        ("sessions: {max_sessions: %d}", "sessions.max_sessions"),
        ("audit: {backups: %d}", "audit.backups"),
    ],
)
def test_a_count_past_what_its_container_holds_is_refused_naming_the_key(
    tmp_path: Path, section: str, key: str
) -> None:
    """2**70 events to replay was accepted, and then every initialize failed with HTTP 500:
    a deque's length is a C size."""
    config = tmp_path / "gateway.yaml"
    config.write_text(section % 2**70 + "\n" + ROUTES)

    with pytest.raises(ConfigError) as raised:
        load_settings(config)

    assert str(raised.value).startswith(f"{config}: {key}: Input should be less than or equal to")


def test_a_route_burst_past_the_bound_is_refused_naming_the_key(tmp_path: Path) -> None:
    config = tmp_path / "gateway.yaml"
    config.write_text(
        'routes: [{name: r, upstream: {transport: sse, url: "http://127.0.0.1:9/sse"}, '
        f"limits: {{burst: {2**70}}}}}]\n"
    )

    with pytest.raises(ConfigError) as raised:
        load_settings(config)

    assert str(raised.value).startswith(f"{config}: routes[0].limits.burst: Input should be")


NOT_FINITE = "a finite number is expected, not infinity or NaN (.inf, .nan)"


# YAML's own spellings, a string Python reads as infinity, and exponents past a double's range
# (`1e400` is a string to YAML, `1.0e+400` a float): each became inf or nan.
@pytest.mark.parametrize("value", [".inf", "-.inf", ".nan", ".NaN", '"inf"', "1e400", "1.0e+400"])
@pytest.mark.parametrize(
    ("content", "key"),
    [
        ("http: {keepalive_seconds: %s}\n" + ROUTES, "http.keepalive_seconds"),
        ("limits: {requests_per_second: %s}\n" + ROUTES, "limits.requests_per_second"),
        (
            "tracing: {otlp_endpoint: 'http://c:4318', sample_ratio: %s}\n" + ROUTES,
            "tracing.sample_ratio",
        ),
        (
            ROUTES.replace("}}]", "}, tasks: {time_limit_seconds: %s}}]"),
            "routes[0].tasks.time_limit_seconds",
        ),
    ],
)
def test_a_number_that_is_not_finite_is_refused_naming_the_key(
    tmp_path: Path, value: str, content: str, key: str
) -> None:
    """An endless keepalive or rate passed `gt=0`, and NaN was refused as "less than or equal
    to 1" or let through wherever no bound compared it."""
    config = tmp_path / "gateway.yaml"
    config.write_text(content % value)

    with pytest.raises(ConfigError) as raised:
        load_settings(config)

    assert str(raised.value) == f"{config}: {key}: {NOT_FINITE}"


def test_the_gateways_start_and_config_check_refuse_a_number_that_is_not_finite(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "gateway.yaml"
    config.write_text("shutdown: {drain_seconds: .inf}\n" + ROUTES)
    said = f"{config}: shutdown.drain_seconds: {NOT_FINITE}"

    assert config_check_main(["check", "--config", str(config)]) == 2
    assert said in capsys.readouterr().err
    with pytest.raises(SystemExit) as stopped:
        serve(str(config), None, None)
    assert stopped.value.code == 2 and said in capsys.readouterr().err


@pytest.mark.parametrize("host", [r"127.0.0.1\0", r"localhost\n", r"\e[31mlocalhost"])
@pytest.mark.parametrize(
    ("section", "key"),
    [
        ("listen: {host: %s}", "listen.host"),
        ("admin: {listen: {host: %s}}", "admin.listen.host"),
        ("metrics: {listen: {host: %s, port: 9464}}", "metrics.listen.host"),
    ],
)
def test_a_host_with_a_control_character_is_refused_naming_the_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, host: str, section: str, key: str
) -> None:
    """A NUL in listen.host passed validation, and serving then failed with a TypeError."""
    monkeypatch.setenv("ADMIN_TOKEN", ADMIN_TOKEN)
    config = tmp_path / "gateway.yaml"
    config.write_text(section % f'"{host}"' + "\n" + ROUTES)

    with pytest.raises(ConfigError) as raised:
        load_settings(config)

    assert str(raised.value) == (
        f"{config}: {key}: holds a control character: a host name or IP address is expected"
    )


def test_the_admin_command_refuses_a_host_with_a_control_character(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ADMIN_TOKEN", ADMIN_TOKEN)
    config = tmp_path / "gateway.yaml"
    config.write_text('admin: {listen: {host: "127.0.0.1\\0"}}\n' + ROUTES)

    with pytest.raises(ConfigError) as raised:
        load_admin(config)

    assert str(raised.value) == (
        f"{config}: admin.listen.host: holds a control character: a host name or IP address "
        "is expected"
    )
