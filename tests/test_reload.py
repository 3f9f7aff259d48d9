"""Reloading the configuration (`gateway.http.reload.reload`, what SIGHUP runs), in-process: all or
nothing, what a change applies to, and secret rotation. The SIGHUP journey over a real process
with tasks running is in test_reload_process.py."""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import math
import os
import signal
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiohttp
import jwt
import pytest
import yaml
from aiohttp import web
from aiohttp.test_utils import TestServer
from cryptography.hazmat.primitives.asymmetric import rsa
from jwt.algorithms import RSAAlgorithm

from gateway.app import create_app
from gateway.config import ConfigError, ListenConfig, load_settings
from gateway.http import listen
from gateway.http.keys import METRICS, RELOADS, ROUTES
from gateway.http.reload import on_sighup, reload

from .conftest import DEMO, free_port
from .fakes import SEEN
from .helpers import (
    INIT,
    WITH_TASKS,
    audit_events,
    headers,
    modern_rpc,
    open_session,
    rpc,
    start_task,
)

OLD_KEY, NEW_KEY = "old-key-0123456789abcdef", "new-key-0123456789abcdef"
WELL_KNOWN = "/.well-known/oauth-protected-resource"


def _sha(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def _keys(*keys: str) -> dict[str, Any]:
    return {"api_keys": [{"principal": "alice", "sha256": _sha(key)} for key in keys]}


def _bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def _write(path: Path, **config: Any) -> Path:
    """A config file (JSON is YAML) with its store in the file's directory."""
    data = {"store": {"path": str(path.parent / "gateway.db")}, **config}
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


@asynccontextmanager
async def _serving(config: Path) -> AsyncIterator[tuple[web.Application, str]]:
    """The gateway for `config` on a loopback port, as the command runs it; (app, base URL)."""
    settings = load_settings(config)
    app = create_app(settings)
    address = ListenConfig(host="127.0.0.1", port=0)
    runner = await listen.start(app, address, settings.http)
    try:
        host, port = runner.addresses[0][:2]
        yield app, f"http://{host}:{port}"
    finally:
        await runner.cleanup()


def _recorded(recorder: TestServer, **upstream: Any) -> dict[str, Any]:
    return {"transport": "streamable_http", "url": str(recorder.make_url("/mcp")), **upstream}


async def _status(http: aiohttp.ClientSession, url: str, **extra: str) -> int:
    """The HTTP status of an initialize at `url`."""
    async with http.post(url, json=INIT, headers=headers(**extra)) as resp:
        return resp.status


def _reloads(app: web.Application, outcome: str) -> float:
    value = app[METRICS].registry.get_sample_value(
        "mcp_gateway_config_reloads_total", {"outcome": outcome}
    )
    assert value is not None
    return value


async def test_an_invalid_file_is_refused_whole_with_the_start_up_error_and_nothing_changes(
    tmp_path: Path, recorder: TestServer, caplog: pytest.LogCaptureFixture
) -> None:
    config = tmp_path / "gateway.yaml"
    _write(config, routes=[{"name": "a", "upstream": _recorded(recorder)}])
    async with _serving(config) as (app, base), aiohttp.ClientSession() as http:
        running = app[ROUTES]["a"]
        # A new route, and a bad limit: the route must not appear.
        b = {"name": "b", "upstream": _recorded(recorder)}
        _write(config, limits={"burst": 0}, routes=[{"name": "a", "upstream": DEMO}, b])
        with pytest.raises(ConfigError) as start_up:
            load_settings(config)
        caplog.set_level(logging.INFO)
        result = await reload(app, config)

        assert result.outcome == "refused" and result.error == str(start_up.value)
        assert str(config) in result.error and "limits.burst" in result.error
        assert app[ROUTES] == {"a": running}
        assert await _status(http, f"{base}/b/mcp") == 404
        assert await _status(http, f"{base}/a/mcp") == 200
        # A key file that cannot be read is refused the same way, naming the key and the file.
        jwt_auth = {"algorithms": ["RS256"], "audience": "x", "public_key_file": "/nonexistent"}
        _write(config, auth={"jwt": jwt_auth}, routes=[b])
        missing = await reload(app, config)
        assert missing.outcome == "refused"
        assert missing.error.startswith(
            f"{config}: auth.jwt.public_key_file: cannot read /nonexistent"
        )
        assert app[ROUTES] == {"a": running} and _reloads(app, "refused") == 2

    errors = [r for r in caplog.records if r.name == "gateway.reload" and r.levelname == "ERROR"]
    assert len(errors) == 2 and "limits.burst" in errors[0].getMessage()
    events = audit_events(caplog)
    failed = [e for e in events if e["event"] == "config_reload_failed"]
    assert [e["file"] for e in failed] == [str(config)] * 2


async def test_a_reload_with_an_endless_rate_is_refused_and_the_running_limits_stay(
    tmp_path: Path, recorder: TestServer
) -> None:
    config = tmp_path / "gateway.yaml"
    _write(config, routes=[{"name": "a", "upstream": _recorded(recorder)}])
    async with _serving(config) as (app, _):
        written = json.loads(config.read_text(encoding="utf-8"))
        # safe_dump writes infinity as YAML's own `.inf`.
        endless = {**written, "limits": {"requests_per_second": math.inf}}
        config.write_text(yaml.safe_dump(endless), encoding="utf-8")
        result = await reload(app, config)

        assert result.outcome == "refused"
        assert f"{config}: limits.requests_per_second: a finite number is expected" in result.error
        assert app[RELOADS].settings.limits.requests_per_second == 100.0


async def test_an_api_key_rotates_with_an_overlap_and_an_open_session_carries_on(
    tmp_path: Path, recorder: TestServer, caplog: pytest.LogCaptureFixture
) -> None:
    config = tmp_path / "gateway.yaml"
    routes = [{"name": "a", "upstream": _recorded(recorder)}]
    _write(config, auth=_keys(OLD_KEY), routes=routes)
    async with _serving(config) as (app, base), aiohttp.ClientSession() as http:
        url = f"{base}/a/mcp"
        upstream = app[ROUTES]["a"].upstream
        async with http.post(url, json=INIT, headers=headers(**_bearer(OLD_KEY))) as resp:
            session_id = resp.headers["Mcp-Session-Id"]
        assert await _status(http, url, **_bearer(NEW_KEY)) == 401

        caplog.set_level(logging.INFO)
        _write(config, auth=_keys(OLD_KEY, NEW_KEY), routes=routes)  # the overlap
        both = await reload(app, config)
        assert both.changed == ("a (auth.api_keys)",) and both.sections == ("auth",)
        assert await _status(http, url, **_bearer(OLD_KEY)) == 200
        assert await _status(http, url, **_bearer(NEW_KEY)) == 200

        _write(config, auth=_keys(NEW_KEY), routes=routes)  # the old one withdrawn
        assert (await reload(app, config)).outcome == "applied"
        assert await _status(http, url, **_bearer(OLD_KEY)) == 401
        assert app[ROUTES]["a"].upstream is upstream  # the same upstream: its pool is kept
        # The session alice opened with the old key is hers with the new one.
        listing = {"jsonrpc": "2.0", "id": 5, "method": "tools/list"}
        async with http.post(
            url, json=listing, headers=headers(session_id, **_bearer(NEW_KEY))
        ) as resp:
            assert resp.status == 200 and "result" in await resp.json()
    assert OLD_KEY not in caplog.text and NEW_KEY not in caplog.text
    assert _sha(OLD_KEY) not in caplog.text
    reloaded = audit_events(caplog)
    assert [e["changed"] for e in reloaded if e["event"] == "config_reloaded"] == [
        ["a (auth.api_keys)"],
        ["a (auth.api_keys)"],
    ]


async def _open(http: aiohttp.ClientSession, url: str, key: str) -> str:
    """An initialized session opened with the API key `key`; its id."""
    async with http.post(url, json=INIT, headers=headers(**_bearer(key))) as resp:
        assert resp.status == 200
        session_id = resp.headers["Mcp-Session-Id"]
    note = {"jsonrpc": "2.0", "method": "notifications/initialized"}
    async with http.post(url, json=note, headers=headers(session_id, **_bearer(key))) as resp:
        assert resp.status == 202
    return session_id


async def test_secrets_from_the_environment_are_read_again_and_new_sessions_get_the_new_header(
    tmp_path: Path, recorder: TestServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CLIENT_KEY", OLD_KEY)
    monkeypatch.setenv("UPSTREAM_TOKEN", "token-1")
    config = tmp_path / "gateway.yaml"
    upstream = _recorded(recorder, headers={"X-Token": "${UPSTREAM_TOKEN}"})
    auth = {"api_keys": [{"principal": "alice", "key_env": "CLIENT_KEY"}]}
    _write(config, auth=auth, routes=[{"name": "a", "upstream": upstream}])
    seen = recorder.app[SEEN]
    listing = {"jsonrpc": "2.0", "id": 5, "method": "tools/list"}
    async with _serving(config) as (app, base), aiohttp.ClientSession() as http:
        url = f"{base}/a/mcp"
        opened = await _open(http, url, OLD_KEY)
        pool = app[ROUTES]["a"].upstream
        status, _ = await modern_rpc(
            http, url, "tools/list", {}, WITH_TASKS, extra=_bearer(OLD_KEY)
        )
        assert status == 200 and {h["X-Token"] for h in seen} == {"token-1"}

        monkeypatch.setenv("CLIENT_KEY", NEW_KEY)
        monkeypatch.setenv("UPSTREAM_TOKEN", "token-2")
        result = await reload(app, config)  # the same file
        assert result.changed == ("a (upstream.headers, auth.api_keys)",)
        assert app[ROUTES]["a"].upstream is not pool
        assert await _status(http, url, **_bearer(OLD_KEY)) == 401

        seen.clear()
        await _open(http, url, NEW_KEY)  # a new session: the rotated header
        assert {h["X-Token"] for h in seen} == {"token-2"}
        seen.clear()
        async with http.post(url, json=listing, headers=headers(opened, **_bearer(NEW_KEY))):
            pass  # the session opened before keeps its upstream connection and headers
        assert [h["X-Token"] for h in seen] == ["token-1"]
        seen.clear()
        status, _ = await modern_rpc(
            http, url, "tools/list", {}, WITH_TASKS, extra=_bearer(NEW_KEY)
        )
        assert status == 200 and {h["X-Token"] for h in seen} == {"token-2"}


async def test_a_removed_route_refuses_new_requests_while_its_open_session_finishes_its_task(
    tmp_path: Path, recorder: TestServer
) -> None:
    config = tmp_path / "gateway.yaml"
    auth = {"list_tasks_without_auth": True}
    kept = {"name": "a", "upstream": _recorded(recorder)}
    _write(config, routes=[kept, {"name": "demo", "upstream": DEMO, "auth": auth}])
    async with _serving(config) as (app, base), aiohttp.ClientSession() as http:
        url = f"{base}/demo/mcp"
        session_id = await open_session(http, url)
        task_id = await start_task(http, url, session_id, "slow", {"seconds": 0.5, "steps": 1})

        _write(config, routes=[kept])
        result = await reload(app, config)
        assert result.removed == ("demo",) and app[ROUTES].keys() == {"a"}
        assert await _status(http, url) == 404  # no new session
        # The open session is still served, by the route as it was: its task ends, readable.
        answer = await rpc(http, url, session_id, "tasks/result", {"taskId": task_id})
        assert answer["result"]["content"][0]["text"] == "slept 0.5 s"
        async with http.delete(url, headers=headers(session_id)) as resp:
            assert resp.status == 200
        # Its last session ended: the path is gone for everyone.
        listing = {"jsonrpc": "2.0", "id": 3, "method": "tools/list"}
        async with http.post(url, json=listing, headers=headers(session_id)) as resp:
            assert resp.status == 404


async def test_restart_only_keys_are_named_in_a_warning_and_the_rest_applies(
    tmp_path: Path, recorder: TestServer, caplog: pytest.LogCaptureFixture
) -> None:
    config = tmp_path / "gateway.yaml"
    a = {"name": "a", "upstream": _recorded(recorder)}
    _write(config, routes=[a])
    async with _serving(config) as (app, base), aiohttp.ClientSession() as http:
        route = app[ROUTES]["a"]
        b = {"name": "b", "upstream": _recorded(recorder)}
        _write(config, listen={"port": 1}, http={"keepalive_seconds": 5}, routes=[a, b])
        caplog.set_level(logging.INFO)
        result = await reload(app, config)

        assert result.outcome == "applied" and result.added == ("b",)
        assert result.needs_restart == ("listen.port", "http.keepalive_seconds")
        assert app[ROUTES]["a"] is route  # unchanged: kept as it was, pool and all
        assert await _status(http, f"{base}/b/mcp") == 200
        # Nothing in the file changed since: applied, and the keys still wait for a restart.
        again = await reload(app, config)
        assert again.added == again.changed == () and again.needs_restart == result.needs_restart
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert any("listen.port, http.keepalive_seconds changed" in w for w in warnings)
    assert "configuration reloaded from" in caplog.text and "routes added: b" in caplog.text
    assert "nothing changed" in caplog.text


async def test_a_route_a_reload_moves_in_the_file_is_named_where_it_now_is(
    tmp_path: Path, recorder: TestServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A reload keeps the upstream of a route whose upstream it leaves as it was (its
    connections, its tokens), and its identity's messages named the route's old place."""
    monkeypatch.setenv("GW_SECRET", "gateway-secret")
    identity = {
        "mode": "client_credentials",
        "token_url": f"http://127.0.0.1:{free_port()}/token",
        "client_id": "gateway",
        "client_secret_env": "GW_SECRET",
    }
    moved = {"name": "moved", "upstream": _recorded(recorder, identity=identity)}
    config = _write(tmp_path / "gateway.yaml", routes=[moved])
    async with _serving(config) as (app, base):
        _write(config, routes=[{"name": "first", "upstream": _recorded(recorder)}, moved])
        assert (await reload(app, config)).outcome == "applied"
        async with aiohttp.ClientSession() as http:
            async with http.post(f"{base}/moved/mcp", json=INIT, headers=headers()) as resp:
                message = (await resp.json())["error"]["message"]
    assert "from routes[1].upstream.identity.token_url: cannot reach it" in message


def _rsa() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


def _jwks(path: Path, kid: str, key: rsa.RSAPrivateKey) -> None:
    jwk = {**RSAAlgorithm.to_jwk(key.public_key(), as_dict=True), "kid": kid}
    path.write_text(json.dumps({"keys": [jwk]}), encoding="utf-8")


def _token(kid: str, key: rsa.RSAPrivateKey) -> dict[str, str]:
    claims = {"sub": "alice", "aud": "gw", "exp": int(time.time()) + 600}
    token = jwt.encode(claims, key, algorithm="RS256", headers={"kid": kid})
    return {"Authorization": f"Bearer {token}"}


async def test_a_rotated_jwks_file_is_read_again_on_reload(
    tmp_path: Path, recorder: TestServer
) -> None:
    config, keys = tmp_path / "gateway.yaml", tmp_path / "jwks.json"
    old, new = _rsa(), _rsa()
    _jwks(keys, "old", old)
    auth = {"jwt": {"algorithms": ["RS256"], "audience": "gw", "jwks_file": str(keys)}}
    _write(config, auth=auth, routes=[{"name": "a", "upstream": _recorded(recorder)}])
    async with _serving(config) as (app, base), aiohttp.ClientSession() as http:
        url = f"{base}/a/mcp"
        assert await _status(http, url, **_token("old", old)) == 200
        _jwks(keys, "new", new)  # the file is replaced; the config is not
        assert await _status(http, url, **_token("new", new)) == 401  # read at load only

        result = await reload(app, config)
        assert result.changed == ("a (auth key files)",)
        assert await _status(http, url, **_token("new", new)) == 200
        assert await _status(http, url, **_token("old", old)) == 401


async def test_an_added_oauth_route_publishes_its_metadata_at_once_and_a_removed_one_stops(
    tmp_path: Path, recorder: TestServer
) -> None:
    config = tmp_path / "gateway.yaml"
    oauth = {
        "issuer": "https://issuer.test",
        "jwks_url": "https://issuer.test/jwks.json",
        "public_url": "https://mcp.example.com",
    }
    a, b = ({"name": n, "upstream": _recorded(recorder)} for n in "ab")
    _write(config, auth={"oauth": oauth}, routes=[a])
    async with _serving(config) as (app, base), aiohttp.ClientSession() as http:
        _write(config, auth={"oauth": oauth}, routes=[b])
        assert (await reload(app, config)).added == ("b",)
        async with http.get(f"{base}{WELL_KNOWN}/b/mcp") as resp:
            assert resp.status == 200
            assert (await resp.json())["resource"] == "https://mcp.example.com/b/mcp"
        async with http.get(f"{base}{WELL_KNOWN}/a/mcp") as resp:
            assert resp.status == 404
        async with http.post(f"{base}{WELL_KNOWN}/b/mcp") as resp:
            assert resp.status == 405
        async with http.put(f"{base}/b/mcp") as resp:
            assert resp.status == 405 and resp.headers["Allow"] == "DELETE,GET,POST"


@asynccontextmanager
async def _with_sighup(
    config: Path | None, overrides: dict[str, object]
) -> AsyncIterator[web.Application]:
    """The gateway started as the command starts it: its listen overridden, SIGHUP handled
    (as `listen.Signals` does while it serves)."""
    settings = load_settings(config)
    settings = settings.model_copy(update={"listen": settings.listen.model_copy(update=overrides)})
    app = create_app(settings)
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(
        signal.SIGHUP, on_sighup(app, None if config is None else str(config), overrides)
    )
    runner = await listen.start(app, settings.listen, settings.http)
    try:
        yield app
    finally:
        loop.remove_signal_handler(signal.SIGHUP)
        await runner.cleanup()


async def _hang_up(until: Callable[[], bool]) -> None:
    """Send this process SIGHUP; return once `until()` holds."""
    os.kill(os.getpid(), signal.SIGHUP)
    async with asyncio.timeout(5):
        while not until():  # noqa: ASYNC110 - the handler's reload has no event to await
            await asyncio.sleep(0.01)


async def test_sighup_reloads_the_file_and_the_command_lines_listen_stays(
    tmp_path: Path, recorder: TestServer, caplog: pytest.LogCaptureFixture
) -> None:
    config = tmp_path / "gateway.yaml"
    a, b = ({"name": n, "upstream": _recorded(recorder)} for n in "ab")
    _write(config, listen={"host": "127.0.0.1", "port": 1}, routes=[a])
    caplog.set_level(logging.INFO)
    async with _with_sighup(config, {"port": 0}) as app:
        _write(config, listen={"host": "127.0.0.1", "port": 1}, routes=[a, b])
        await _hang_up(lambda: "b" in app[ROUTES])
    assert f"SIGHUP: reloading {config}" in caplog.text
    assert "after a restart" not in caplog.text  # --port overrides the file, as at start


async def test_sighups_while_a_reload_waits_to_start_are_that_reload(
    tmp_path: Path, recorder: TestServer, caplog: pytest.LogCaptureFixture
) -> None:
    """A flood of SIGHUPs (a file watcher gone wrong) queued a reload each, every one
    re-reading the whole file; the one waiting to start reads the file as it is by then."""
    config = tmp_path / "gateway.yaml"
    a, b = ({"name": n, "upstream": _recorded(recorder)} for n in "ab")
    _write(config, routes=[a])
    caplog.set_level(logging.INFO)
    async with _with_sighup(config, {"host": "127.0.0.1", "port": 0}) as app:
        async with app[RELOADS].lock:  # a reload under way
            for n in range(1, 21):
                await _hang_up(lambda: caplog.text.count("SIGHUP: ") == n)  # noqa: B023
            _write(config, routes=[a, b])
        async with asyncio.timeout(5):
            while "b" not in app[ROUTES]:  # noqa: ASYNC110 - a reload has no event to await
                await asyncio.sleep(0.01)
        assert caplog.text.count("configuration reloaded from") == 1
        assert caplog.text.count("SIGHUP: a reload waits to start already") == 19
        await _hang_up(lambda: caplog.text.count("configuration reloaded from") == 2)
    assert caplog.text.count("SIGHUP: reloading") == 2  # nothing waited: a reload of its own


async def test_sighup_without_a_config_file_only_says_so(
    recorder: TestServer, caplog: pytest.LogCaptureFixture
) -> None:
    async with _with_sighup(None, {"host": "127.0.0.1", "port": 0}) as app:
        routes = app[ROUTES].copy()
        await _hang_up(lambda: "no --config file to re-read" in caplog.text)
        assert app[ROUTES] == routes


async def test_a_path_served_at_start_answers_as_the_table_in_force_says(
    tmp_path: Path, recorder: TestServer
) -> None:
    # aiohttp finds the start's route paths as fixed resources (`urls.add_routes`), all to
    # the handler that looks the path up in the table in force: a reload moves them.
    config = tmp_path / "gateway.yaml"
    _write(config, routes=[{"name": "a", "upstream": _recorded(recorder), "path": "/x/mcp"}])
    async with _serving(config) as (app, base), aiohttp.ClientSession() as http:

        async def server_at(path: str) -> str | int:
            async with http.post(f"{base}{path}", json=INIT, headers=headers()) as resp:
                if resp.status != 200:
                    return resp.status
                return str((await resp.json())["result"]["serverInfo"]["name"])

        assert await server_at("/x/mcp") == "recorder"
        _write(config, routes=[{"name": "b", "upstream": DEMO, "path": "/x/mcp"}])
        assert (await reload(app, config)).outcome == "applied"
        assert await server_at("/x/mcp") == "gateway-demo"
        _write(config, routes=[{"name": "c", "upstream": _recorded(recorder)}])
        assert (await reload(app, config)).outcome == "applied"
        assert await server_at("/x/mcp") == 404
        assert await server_at("/c/mcp") == "recorder"  # a path new since the start
