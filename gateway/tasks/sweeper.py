"""Housekeeping on a timer: expired tasks go, then the store's other chores.

Every `store.sweep_interval_seconds` the runner's `sweep()` deletes the tasks whose ttl has
passed (stopping any still running), then each other chore runs (the session registry prunes
records of clients that never came back). A chore that fails is logged and tried again at
the next round: housekeeping never stops the gateway, and nothing waits for it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence

log = logging.getLogger(__name__)

Chore = Callable[[], Awaitable[None]]


async def sweep_forever(interval: float, chores: Sequence[Chore]) -> None:
    """Every `interval` seconds, each of `chores` in turn, until cancelled."""
    while True:
        await asyncio.sleep(interval)
        for chore in chores:
            try:
                await chore()
            except Exception:
                log.exception("store housekeeping (%s) failed; will try again", chore.__name__)
