"""The gateway's stop, in the order it goes: the drain (`http.drain`: new work refused, the
running tasks let end), then the interrupt of whatever still runs, before the app's cleanup
releases what it holds. `http.listen.serve` starts the drain at the first SIGTERM or SIGINT;
the app's shutdown runs the interrupt.
"""

from __future__ import annotations

from aiohttp import web

from gateway.http.keys import DRAIN, RUNNER, SESSIONS
from gateway.tasks.recovery import SHUTDOWN_MESSAGE


async def drain(app: web.Application) -> None:
    """The first SIGTERM or SIGINT, before the app stops: /readyz says 503 and new sessions
    and tasks are refused from now on; returns once no task runs, or after
    shutdown.drain_seconds."""
    await app[DRAIN].run(app[RUNNER])


async def interrupt(app: web.Application) -> None:
    """The stop, after the drain: new connections are refused already; answer everyone still
    here.

    Tasks still running fail now as interrupted (a waiting tasks/result gets that as its
    answer), relayed calls get an error, streams end; aiohttp then gives open requests up to
    http.shutdown_grace_seconds before the app's cleanup closes sessions and the store.
    """
    await app[RUNNER].interrupt_all(SHUTDOWN_MESSAGE)
    app[SESSIONS].drain("the gateway is shutting down; send the request again once it is back")
