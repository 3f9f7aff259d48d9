"""What reloads share, kept under the app's `RELOADS` key: the settings in force, the routes
they replaced, the command line's overrides, the lock one reload at a time holds, and the
background probes. `gateway.http.reload` does the reloading. Nothing here reads an app key,
so `http.keys`, which names this type, makes no import cycle with it.
"""

from __future__ import annotations

import asyncio

from gateway.aio import TaskSet
from gateway.config import Settings
from gateway.route import Route
from gateway.upstream.reachability import Probes


class Reloads:
    """What reloads share: the settings in force, the routes they replaced (kept open for the
    sessions and tasks still on them until the gateway stops), the command line's overrides."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        #: The --config file (what SIGHUP reloads); None: the built-in demo settings.
        self.path: str | None = None
        self.retired: list[Route] = []
        #: listen.host and listen.port as --host and --port set them, kept by every reload.
        self.listen_overrides: dict[str, object] = {}
        self.lock = asyncio.Lock()
        #: A SIGHUP's reload waits for the lock: later SIGHUPs need no other, as it reads
        #: the file as it is when it starts.
        self.waiting = False
        self.tasks = TaskSet("reloads")
        #: The background probes of routes: at start-up, and of those a reload adds or
        #: changes; the app's shutdown cancels the probes still running.
        self.probes = Probes("reachability check")

    async def close(self) -> None:
        """The gateway stops (after its sessions closed): close the replaced routes."""
        await self.tasks.close()
        await self.probes.close()
        for route in self.retired:
            await route.close()
        self.retired.clear()
