"""/healthz, /readyz, /livez: whether to send traffic here, and whether the process lives.

`/healthz` (a load balancer, the Docker HEALTHCHECK) and `/readyz` (a readiness probe) answer
whether the store takes durable writes; `/readyz` also answers 503 from the moment a drain
begins (the first SIGTERM), so traffic moves before the process stops. `/livez` (a liveness
probe) answers that the process serves requests at all, and never touches the store, so a
slow disk or a drain never gets the process killed.

Anyone who can reach the port may ask, so an answer must not cost a durable write each time,
nor say more than "ok" or which part is unavailable. The default check trusts a commit the
store made in the last `_FRESH_SECONDS` (the store writes on every task and session change),
else it makes one probe write itself. `?deep=1` always asks for a write of its own, but one
probe serves every caller that asks while it runs and for a second after, so a flood of deep
checks costs about one fsync a second. Why a probe failed goes to the log, never the answer.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

from aiohttp import web

from gateway.http.drain import Drain
from gateway.tasks.store import TaskStore

log = logging.getLogger(__name__)

_FRESH_SECONDS = 30.0
_DEEP_REUSE_SECONDS = 1.0
#: Within the Docker HEALTHCHECK's 4 s, so a stuck store shows as a 503 rather than a timeout.
_PROBE_TIMEOUT_SECONDS = 3.0


class Health:
    def __init__(
        self, store: TaskStore, drain: Drain, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._store = store
        self._drain = drain
        self._clock = clock
        self._probe: asyncio.Future[bool] | None = None
        self._probed_at = float("-inf")
        self._probe_ok = False
        self._failing = False

    async def writable(self, deep: bool) -> bool:
        """Whether the store took a durable write recently enough (`deep`: about now)."""
        now = self._clock()
        if not deep and now - self._store.last_commit < _FRESH_SECONDS:
            return True
        reuse = _DEEP_REUSE_SECONDS if deep else _FRESH_SECONDS
        if self._probe is None and now - self._probed_at < reuse:
            return self._probe_ok
        if self._probe is None:
            self._probe = asyncio.ensure_future(self._run_probe())
        # shield: a caller that goes away must not cancel the probe the others wait on.
        return await asyncio.shield(self._probe)

    async def _run_probe(self) -> bool:
        try:
            async with asyncio.timeout(_PROBE_TIMEOUT_SECONDS):
                await self._store.check_writable()
            ok = True
        except Exception as exc:  # any failure means "do not send traffic here"
            if not self._failing:  # once per failure streak, not once per probe
                log.error("health check: the store takes no writes: %r", exc)
            ok = False
        if ok and self._failing:
            log.info("health check: the store takes writes again")
        self._failing = not ok
        self._probe_ok, self._probed_at, self._probe = ok, self._clock(), None
        return ok

    async def handler(self, request: web.Request) -> web.Response:
        """/healthz: serving, and the store takes durable writes (`?deep=1`: about now)."""
        deep = request.query.get("deep", "") not in ("", "0", "false")
        if await self.writable(deep):
            return _ok()
        return _unavailable("store")

    async def ready(self, request: web.Request) -> web.Response:
        """/readyz: as /healthz, and not draining (the listener accepts: it answered)."""
        if self._drain.draining:
            return _unavailable("draining")
        return await self.handler(request)

    @staticmethod
    async def live(request: web.Request) -> web.Response:
        """/livez: the process answers; no store access."""
        return _ok()


def _ok() -> web.Response:
    return web.json_response({"status": "ok"})


def _unavailable(reason: str) -> web.Response:
    return web.json_response({"status": "unavailable", "reason": reason}, status=503)
