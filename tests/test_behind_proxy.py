"""Behind a real reverse proxy (Debian's nginx): the client's address, scheme and host come
from the proxy's headers when, and only when, the proxy is one of `http.trusted_proxies`.

nginx connects to the gateway from 127.0.0.2 (`proxy_bind`), the only trusted address; it
passes the client's Host as X-Forwarded-Host (its own Host header names the gateway) and the
client's address in X-Forwarded-For. Test clients reach nginx from addresses of their own
(127.0.0.3, 127.0.0.4), or the gateway directly from 127.0.0.1, where the same headers are
nobody's word. Needs `nginx` (`bash .ci/nginx.sh` installs it): skipped locally without it,
failed under CI.
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import socket
import subprocess
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from multidict import CIMultiDict

from gateway.config import ConfigError
from gateway.config.loading import parse_settings
from gateway.config.sections import HttpConfig
from gateway.http.forwarded import Forwarded, read

from .conftest import StartGateway, free_port
from .helpers import INIT, audit_events, headers

PUBLIC_HOST = "gw.example.com"
KEY = "proxy-test-key-0123456789abcdef"
NETWORKS = HttpConfig(trusted_proxies=("10.0.0.0/8", "127.0.0.2")).proxy_networks


def test_the_client_is_the_rightmost_address_no_trusted_proxy_vouches_for() -> None:
    # The client may write anything left of the first hop a trusted proxy added.
    spoofed = CIMultiDict({"X-Forwarded-For": "1.2.3.4, 198.51.100.7, 10.1.1.1"})
    assert read(spoofed, NETWORKS).client == "198.51.100.7"
    several = CIMultiDict([("X-Forwarded-For", "198.51.100.7"), ("X-Forwarded-For", "10.0.0.5")])
    assert read(several, NETWORKS).client == "198.51.100.7"
    proxies_only = CIMultiDict({"X-Forwarded-For": "10.0.0.9, 10.0.0.5"})
    assert read(proxies_only, NETWORKS).client == "10.0.0.9"
    proto = CIMultiDict({"X-Forwarded-Proto": "http, HTTPS", "X-Forwarded-Host": "a, b.example"})
    assert read(proto, NETWORKS) == Forwarded(None, "https", "b.example")


def test_forwarded_wins_and_is_read_as_rfc_7239_writes_it() -> None:
    both = CIMultiDict(
        {
            "Forwarded": 'for="[2001:db8::1]:4711";proto=https;host=gw.example.com, for=10.0.0.3',
            "X-Forwarded-For": "203.0.113.9",
        }
    )
    assert read(both, NETWORKS) == Forwarded("2001:db8::1", "https", "gw.example.com")
    port = CIMultiDict({"Forwarded": "for=192.0.2.60:8080;proto=http"})
    assert read(port, NETWORKS) == Forwarded("192.0.2.60", "http", None)
    hidden = CIMultiDict({"Forwarded": "for=unknown, for=_proxy7;by=10.0.0.1"})
    assert read(hidden, NETWORKS).client == "_proxy7"  # not an address: never trusted


def nginx_binary() -> str:
    found = shutil.which("nginx") or (
        "/usr/sbin/nginx" if os.path.exists("/usr/sbin/nginx") else None
    )
    if found is None:
        if os.environ.get("CI"):
            pytest.fail("nginx is not installed; CI must run `bash .ci/nginx.sh` first")
        pytest.skip("nginx is not installed (`bash .ci/nginx.sh` installs it)")
    return found


@contextmanager
def nginx(gateway_port: int, tmp_path: Path) -> Iterator[int]:
    """nginx on a port of its own in front of the gateway; yields that port."""
    port = free_port()
    home = tmp_path / "nginx"
    home.mkdir()
    temp = " ".join(
        f"{kind}_temp_path {home / kind};"
        for kind in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi")
    )
    user = "user root;" if os.geteuid() == 0 else ""
    (home / "nginx.conf").write_text(
        f"""
        {user}
        daemon off;
        worker_processes 1;
        pid {home / "nginx.pid"};
        error_log {home / "error.log"} warn;
        events {{ worker_connections 64; }}
        http {{
            access_log off;
            {temp}
            server {{
                listen 127.0.0.1:{port};
                location / {{
                    proxy_pass http://127.0.0.1:{gateway_port};
                    proxy_bind 127.0.0.2;
                    proxy_http_version 1.1;
                    proxy_set_header Connection "";
                    proxy_buffering off;
                    proxy_set_header Host $proxy_host;
                    proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;
                    proxy_set_header X-Forwarded-Proto $scheme;
                    proxy_set_header X-Forwarded-Host $host;
                }}
            }}
        }}
        """
    )
    log = home / "stderr.log"
    with log.open("wb") as err:
        proc = subprocess.Popen(
            [nginx_binary(), "-p", str(home), "-c", str(home / "nginx.conf")],
            stdout=subprocess.DEVNULL,
            stderr=err,
        )
    try:
        deadline = time.monotonic() + 10
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"nginx exited: {log.read_text()}")
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
        yield port
    finally:
        proc.terminate()
        proc.wait(10)


@asynccontextmanager
async def client_from(address: str) -> AsyncIterator[aiohttp.ClientSession]:
    """An HTTP client whose connections leave from `address` (a loopback address)."""
    connector = aiohttp.TCPConnector(local_addr=(address, 0))
    async with aiohttp.ClientSession(connector=connector) as http:
        yield http


async def test_behind_a_trusted_proxy_the_clients_host_address_and_limits_are_its_own(
    start_gateway: StartGateway, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, "gateway.audit")
    digest = hashlib.sha256(KEY.encode()).hexdigest()
    auth = {"mode": "api_keys", "api_keys": [{"principal": "alice", "sha256": digest}]}
    routes: list[dict[str, Any]] = [
        {
            "name": "demo",
            "upstream": {"transport": "stdio", "command": ["python", "-m", "gateway.demo"]},
            "auth": auth,
        }
    ]
    base = await start_gateway(
        routes,
        http={"trusted_proxies": ["127.0.0.2"], "allowed_hosts": [PUBLIC_HOST]},
        limits={"requests_per_second": 0.1, "burst": 3},
    )
    gateway_port = int(base.rsplit(":", 1)[1])
    with nginx(gateway_port, tmp_path) as port:
        public = f"http://127.0.0.1:{port}/demo/mcp"
        key = headers(Authorization=f"Bearer {KEY}", Host=PUBLIC_HOST)
        async with client_from("127.0.0.3") as first, client_from("127.0.0.4") as second:
            # nginx's own Host header names the gateway's address, which is not served; the
            # client's, forwarded, is: the Host check reads the client's.
            async with first.post(public, json=INIT, headers=key) as opened:
                assert opened.status == 200, await opened.text()
            # Failed authentications are limited per client: the first client uses up its
            # burst, the second (another address behind the same proxy) still gets its 401.
            wrong = headers(Authorization="Bearer wrong", Host=PUBLIC_HOST)
            statuses = []
            for _ in range(4):
                async with first.post(public, json=INIT, headers=wrong) as refused:
                    statuses.append(refused.status)
            async with second.post(public, json=INIT, headers=wrong) as other:
                other_status = other.status
    # Straight to the gateway (127.0.0.1 is no trusted proxy) the same headers are ignored.
    spoofed = headers(
        Authorization=f"Bearer {KEY}",
        **{"X-Forwarded-Host": PUBLIC_HOST, "X-Forwarded-For": "127.0.0.9"},
    )
    async with aiohttp.ClientSession() as http:
        async with http.post(f"{base}/demo/mcp", json=INIT, headers=spoofed) as direct:
            direct_status = direct.status
    assert statuses[:3] == [401, 401, 401] and statuses[3] == 429
    assert other_status == 401
    assert direct_status == 421  # its Host (127.0.0.1:port) is not gw.example.com
    failures = audit_events(caplog, "auth_failed")
    assert {f["remote"] for f in failures} == {"127.0.0.3", "127.0.0.4"}


@pytest.mark.parametrize("value", ["not-an-address", "10.0.0.0/33", "300.1.2.3"])
def test_a_trusted_proxy_that_is_no_address_is_refused_naming_the_key(value: str) -> None:
    with pytest.raises(ConfigError) as refused:
        parse_settings({"http": {"trusted_proxies": ["127.0.0.1", value]}}, "gateway.yaml")
    assert "gateway.yaml: http.trusted_proxies[1]" in str(refused.value)
    assert "is not an IP address or network" in str(refused.value)
