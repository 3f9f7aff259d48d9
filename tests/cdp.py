"""Headless chromium driven over the Chrome DevTools Protocol, with aiohttp's websocket client:
enough of it to sign in, type, click, wait for a page, record every request a page makes and
take a screenshot (the console's browser tests and its screenshot script). No dependency
beyond the browser: Debian's `chromium` package.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import itertools
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

import aiohttp
import pytest

#: Every wait on the browser is bounded by this.
WAIT = 15.0


def chromium_path() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


def chromium() -> str:
    """Debian's chromium, for a test that drives it: skipped locally without it, failed under
    CI (which installs it)."""
    found = chromium_path()
    if found is None:
        if os.environ.get("CI"):
            pytest.fail("chromium is not installed; CI must run `bash .ci/chromium.sh` first")
        pytest.skip("chromium is not installed (`bash .ci/chromium.sh` installs it)")
    return found


@contextmanager
def launched(executable: str) -> Iterator[str]:
    """Runs headless chromium with a throwaway profile; yields its browser websocket URL."""
    # Chromium's helper processes may still write to the profile as it goes: a leftover file
    # must not fail the test that used it.
    scratch = tempfile.TemporaryDirectory(prefix="console-browser-", ignore_cleanup_errors=True)
    with scratch as profile:
        proc = subprocess.Popen(
            [
                executable,
                "--headless=new",
                "--no-sandbox",  # root in a container has no user namespaces for the sandbox
                "--disable-gpu",
                "--disable-dev-shm-usage",
                "--no-first-run",
                "--disable-background-networking",  # no update checks: the requests seen are ours
                "--disable-component-update",
                "--remote-debugging-port=0",
                f"--user-data-dir={profile}",
                "about:blank",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,  # its renderers and helpers in one group, stopped together
        )
        try:
            port_file = Path(profile) / "DevToolsActivePort"
            deadline = time.monotonic() + WAIT
            while not port_file.exists() or len(port_file.read_text().splitlines()) < 2:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("chromium did not open its debugging port")
                time.sleep(0.05)
            port, path = port_file.read_text().splitlines()[:2]
            yield f"ws://127.0.0.1:{port}{path}"
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


class Page:
    """One tab in a browser context of its own (its own cookies), over one websocket."""

    def __init__(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        self._ws = ws
        self._ids = itertools.count(1)
        self._answers: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self._waiters: list[tuple[str, asyncio.Future[dict[str, Any]]]] = []
        self.session = ""
        #: Every URL the page asked for, in order.
        self.requests: list[str] = []

    async def read(self) -> None:
        async for message in self._ws:
            data = json.loads(message.data)
            if "id" in data:
                future = self._answers.pop(data["id"], None)
                if future is not None and not future.done():
                    future.set_result(data)
                continue
            method = data.get("method")
            if method == "Network.requestWillBeSent":
                self.requests.append(data["params"]["request"]["url"])
            for name, waiter in list(self._waiters):
                if name == method and not waiter.done():
                    waiter.set_result(data.get("params", {}))
                    self._waiters.remove((name, waiter))

    async def send(self, method: str, session: bool = True, **params: Any) -> dict[str, Any]:
        number = next(self._ids)
        future = self._answers[number] = asyncio.get_running_loop().create_future()
        message: dict[str, Any] = {"id": number, "method": method, "params": params}
        if session and self.session:
            message["sessionId"] = self.session
        await self._ws.send_str(json.dumps(message))
        async with asyncio.timeout(WAIT):
            answer = await future
        if "error" in answer:
            raise RuntimeError(f"{method}: {answer['error']}")
        return dict(answer.get("result", {}))

    def event(self, method: str) -> asyncio.Future[dict[str, Any]]:
        waiter: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._waiters.append((method, waiter))
        return waiter

    async def evaluate(self, expression: str) -> Any:
        answer = await self.send(
            "Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True
        )
        if "exceptionDetails" in answer:
            raise RuntimeError(f"{expression}: {answer['exceptionDetails']}")
        return answer["result"].get("value")

    async def loads(self, expression: str) -> None:
        """Runs `expression` (a click, a navigation) and waits for the page it loads."""
        loaded = self.event("Page.loadEventFired")
        await self.evaluate(expression)
        async with asyncio.timeout(WAIT):
            await loaded

    async def goto(self, url: str) -> None:
        loaded = self.event("Page.loadEventFired")
        await self.send("Page.navigate", url=url)
        async with asyncio.timeout(WAIT):
            await loaded

    async def click(self, selector: str) -> None:
        """Clicks the element `selector` picks, and waits for the page that loads."""
        await self.loads(f"document.querySelector({json.dumps(selector)}).click()")

    async def type(self, selector: str, text: str) -> None:
        """Types `text` into the field `selector` picks, as a keyboard would."""
        await self.evaluate(f"document.querySelector({json.dumps(selector)}).value = ''")
        await self.evaluate(f"document.querySelector({json.dumps(selector)}).focus()")
        await self.send("Input.insertText", text=text)

    async def text(self, selector: str = "body") -> str:
        found = await self.evaluate(
            f"(document.querySelector({json.dumps(selector)}) || {{}}).innerText || ''"
        )
        return str(found)

    async def path(self) -> str:
        return str(await self.evaluate("location.pathname"))

    async def until(self, expression: str) -> None:
        """Waits until `expression` is true in the page."""
        async with asyncio.timeout(WAIT):
            while True:
                if await self.evaluate(expression):
                    return
                await asyncio.sleep(0.1)

    async def screenshot(self, width: int = 1200) -> bytes:
        """The page as a PNG, `width` pixels wide and as tall as its content (to 1600)."""
        height = await self.evaluate("Math.ceil(document.documentElement.scrollHeight)")
        await self.send(
            "Emulation.setDeviceMetricsOverride",
            width=width,
            height=max(300, min(int(height), 1600)),
            deviceScaleFactor=1,
            mobile=False,
        )
        shot = await self.send("Page.captureScreenshot", format="png")
        return base64.b64decode(shot["data"])


@asynccontextmanager
async def page(browser: str) -> AsyncIterator[Page]:
    """A tab in a fresh browser context of `browser` (a websocket URL from `launched`)."""
    async with aiohttp.ClientSession() as http, http.ws_connect(browser, max_msg_size=0) as ws:
        tab = Page(ws)
        async with asyncio.TaskGroup() as group:
            reader = group.create_task(tab.read())
            context = (await tab.send("Target.createBrowserContext"))["browserContextId"]
            target = await tab.send(
                "Target.createTarget", url="about:blank", browserContextId=context
            )
            attached = await tab.send(
                "Target.attachToTarget", targetId=target["targetId"], flatten=True
            )
            tab.session = attached["sessionId"]
            await tab.send("Page.enable")
            await tab.send("Network.enable")
            try:
                yield tab
            finally:
                tab.session = ""
                await tab.send("Target.disposeBrowserContext", browserContextId=context)
                reader.cancel()
