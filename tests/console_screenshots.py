"""Screenshots of the operators' console for the docs: `python -m tests.console_screenshots`.

Starts a gateway with the demo upstream and an admin listener, makes a few tasks of two
principals (running, completed, failed, cancelled), signs in with headless chromium and writes
a PNG of each page to docs/images/console-*.png. Run it again whenever the pages change, so
that the pictures in docs/operations.md stay true.
"""

from __future__ import annotations

import asyncio
import os
import sys
import tempfile
from pathlib import Path

from gateway.app import create_app
from gateway.config import ListenConfig, parse_settings
from gateway.http import listen

from .cdp import Page, chromium_path, launched, page
from .conftest import ROOT, free_port
from .console import AUTH, KEYS, ROUTES, TOKEN, Console

IMAGES = ROOT / "docs" / "images"


async def shoot(tab: Page, name: str) -> None:
    path = IMAGES / f"console-{name}.png"
    png = await tab.screenshot(width=1100)
    await asyncio.to_thread(path.write_bytes, png)
    print(f"wrote {path.relative_to(ROOT)} ({len(png) // 1024} kB)")


async def pictures(console: Console, browser: str) -> None:
    running = await console.task("alice", "slow", {"seconds": 600, "steps": 60})
    await console.task("bob", "slow", {"seconds": 600})
    for text in ("hello", "world"):
        await console.finished(await console.task("bob", "echo", {"text": text}))
    await console.finished(await console.task("alice", "fail"))
    stopped = await console.task("alice", "slow", {"seconds": 600})
    async with page(browser) as tab:
        await tab.goto(console.url)
        await shoot(tab, "sign-in")
        await tab.type("#token", TOKEN)
        await tab.click("#sign-in")
        await tab.click(f'a[href$="{stopped}"]')
        await tab.click("#cancel")
        await tab.click("#confirm")
        await tab.goto(f"{console.url}tasks")
        await shoot(tab, "tasks")
        await tab.goto(f"{console.url}tasks/{running}")
        await shoot(tab, "task")
        await tab.click("#cancel")
        await shoot(tab, "cancel")
        await tab.goto(f"{console.url}purge")
        await shoot(tab, "purge")
        await tab.goto(f"{console.url}sessions")
        await shoot(tab, "sessions")
        await tab.goto(f"{console.url}routes")
        await shoot(tab, "routes")


async def main() -> None:
    executable = chromium_path()
    if executable is None:
        sys.exit("chromium is not installed (`bash .ci/chromium.sh` installs it)")
    os.environ["ADMIN_TOKEN"] = TOKEN
    for who, key in KEYS.items():
        os.environ[f"{who.upper()}_KEY"] = key
    IMAGES.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="console-screenshots-") as tmp:
        port = free_port()
        data = {
            "store": {"path": str(Path(tmp) / "gateway.db")},
            "routes": ROUTES,
            "auth": AUTH,
            "admin": {"listen": {"host": "127.0.0.1", "port": port}},
        }
        settings = parse_settings(data, "the screenshots' settings")
        address = ListenConfig(host="127.0.0.1", port=0)
        runner = await listen.start(create_app(settings), address, settings.http)
        try:
            host, main_port = runner.addresses[0][:2]
            base = f"http://{host}:{main_port}"
            console = Console(f"{base}/demo/mcp", base, f"http://127.0.0.1:{port}")
            with launched(executable) as browser:
                await pictures(console, browser)
        finally:
            await runner.cleanup()


if __name__ == "__main__":
    asyncio.run(main())
