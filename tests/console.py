"""The console's test fixture: a gateway with an admin listener, two principals and the demo
upstream, and an operator's browser-less session (aiohttp with its cookie jar)."""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import aiohttp
import pytest

from .conftest import DEMO, StartGateway, free_port
from .helpers import open_session, start_task

TOKEN = "console-token-0123456789abcdef"
KEYS = {"alice": "alice-key-0123456789", "bob": "bob-key-0123456789"}
AUTH = {"api_keys": [{"principal": who, "key_env": f"{who.upper()}_KEY"} for who in KEYS]}
ROUTES = [{"name": "demo", "upstream": DEMO}]
CONSOLE = "/admin/console/"

_CSRF = re.compile(r'name="csrf" value="([^"]+)"')


def csrf_in(html: str) -> str:
    """The CSRF token a page's forms carry."""
    found = _CSRF.search(html)
    assert found is not None, "the page has no form with a CSRF token"
    return found[1]


@dataclass
class Console:
    """A gateway's addresses: its MCP endpoint, its own port and its admin listener."""

    mcp: str
    main: str
    admin: str

    @property
    def url(self) -> str:
        return f"{self.admin}{CONSOLE}"

    def client(self, who: str) -> aiohttp.ClientSession:
        return aiohttp.ClientSession(headers={"Authorization": f"Bearer {KEYS[who]}"})

    async def task(
        self, who: str, tool: str, arguments: dict[str, Any] | None = None, route: str = "demo"
    ) -> str:
        """A task `who` starts on `route`; its id."""
        mcp = f"{self.main}/{route}/mcp"
        async with self.client(who) as http:
            session = await open_session(http, mcp)
            return await start_task(http, mcp, session, tool, arguments)

    async def status(self, task_id: str) -> str:
        """The task's status, as the admin API says."""
        bearer = {"Authorization": f"Bearer {TOKEN}"}
        async with aiohttp.ClientSession(headers=bearer) as http:
            async with http.get(f"{self.admin}/admin/tasks/{task_id}") as resp:
                return str((await resp.json())["status"])

    async def finished(self, task_id: str) -> str:
        """Waits (at most 10 s) until the task has finished; its status."""
        async with asyncio.timeout(10):
            while True:
                status = await self.status(task_id)
                if status in ("completed", "failed", "cancelled"):
                    return status
                await asyncio.sleep(0.05)

    async def signed_in(self, http: aiohttp.ClientSession) -> str:
        """Signs `http` in (its cookie jar keeps the session); the session's CSRF token."""
        form = {"token": TOKEN}
        async with http.post(f"{self.url}sign-in", data=form, allow_redirects=False) as resp:
            assert resp.status == 303, await resp.text()
        async with http.get(f"{self.url}tasks") as page:
            assert page.status == 200
            return csrf_in(await page.text())


@asynccontextmanager
async def console_gateway(
    start_gateway: StartGateway,
    monkeypatch: pytest.MonkeyPatch,
    routes: list[dict[str, Any]] = ROUTES,
    **sections: Any,
) -> AsyncIterator[Console]:
    monkeypatch.setenv("ADMIN_TOKEN", TOKEN)
    for who, key in KEYS.items():
        monkeypatch.setenv(f"{who.upper()}_KEY", key)
    port = free_port()
    admin = {"listen": {"host": "127.0.0.1", "port": port}}
    base = await start_gateway(routes, auth=AUTH, admin=admin, **sections)
    yield Console(f"{base}/demo/mcp", base, f"http://127.0.0.1:{port}")
