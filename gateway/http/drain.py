"""The drain before a stop: what the first SIGTERM or SIGINT starts (see `http.listen.serve`).

From that moment `/readyz` answers 503, so a load balancer sends no new clients, and new work
is refused with 503 and `Retry-After` (admission asks `draining`): a new session
(`initialize`), a new task (a 2025-11-25 `tools/call` with `params.task`), a new 2026-07-28
`tools/call`. Everything else goes on: requests in open sessions, `tasks/get`, waiting
`tasks/result` calls, `tasks/cancel`, answers to a task's questions. `run()` returns as soon
as no task runs, or after `shutdown.drain_seconds`; then the gateway shuts down as it did
before drains existed, failing the tasks still running as interrupted.
"""

from __future__ import annotations

import asyncio
import logging

from gateway.config import ShutdownConfig
from gateway.observability.metrics import Metrics
from gateway.tasks.runner import TaskRunner

log = logging.getLogger(__name__)

#: Seconds a refused client is told to wait: by then a load balancer has moved it elsewhere,
#: or the gateway is back.
RETRY_AFTER_SECONDS = 5


class Drain:
    """Whether the gateway drains, and the wait for its running tasks to end."""

    def __init__(self, config: ShutdownConfig, metrics: Metrics) -> None:
        self._seconds = config.drain_seconds
        self._metrics = metrics
        self._draining = False

    @property
    def draining(self) -> bool:
        return self._draining

    async def run(self, runner: TaskRunner) -> None:
        """Refuse new work from now on; return once no task runs, or after drain_seconds
        (cancelled by a second signal)."""
        self._draining = True
        self._metrics.draining.set(1)
        running = runner.running
        log.info(
            "draining: %d task(s) running; new sessions and tasks get 503 for up to %g s "
            "(shutdown.drain_seconds), a second SIGTERM or SIGINT stops now",
            running,
            self._seconds,
        )
        if not running:
            return
        try:
            async with asyncio.timeout(self._seconds):
                await runner.idle()
        except TimeoutError:
            log.warning(
                "drain time over (shutdown.drain_seconds: %g): %d task(s) still running "
                "fail as interrupted",
                self._seconds,
                runner.running,
            )
        else:
            log.info("drained: every task has ended")
