"""Tasks of tools safe to repeat, run again after the process that ran them was lost.

At start-up, `TaskRunner.recover` gives each task the previous process left running the one
decision (`tasks.recovery.after_loss`): failed, or its next attempt begun in the store. Here
the latter are started again from what each kept: the call goes out on an upstream session
held for the task's principal (no client is connected: a re-run is the gateway's own call),
opened with the question capabilities the task's request had, so that its questions become
the task's input requests as on the 2026-07-28 path. The earlier attempt's call may still be
running on an HTTP upstream: that session is told it was cancelled first.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from aiohttp import web

from gateway.calls.call import HeldCall
from gateway.http.keys import HELD_SESSIONS, MODERN_TASK_API, ROUTES, RUNNER, STORE
from gateway.protocol import jsonrpc
from gateway.route import Route
from gateway.tasks.models import Task, principal_of
from gateway.tasks.recovery import Bounds, Rerun, call_of

log = logging.getLogger(__name__)

RESTARTED = "the gateway restarted while this attempt ran"


def bounds_of(app: web.Application) -> Callable[[str], Bounds | None]:
    """`TaskRunner.recover`'s view of the configured routes."""

    def bounds(route_name: str) -> Bounds | None:
        route = app[ROUTES].get(route_name)
        if route is None:
            return None
        return Bounds(route.policy.max_attempts, route.policy.time_limit_seconds)

    return bounds


async def start(app: web.Application, reruns: list[tuple[Task, Rerun]]) -> None:
    for task, rerun in reruns:
        route = app[ROUTES].get(task.route)
        kept = await app[STORE].get_request(task.task_id)
        if route is None or kept is None:
            await app[RUNNER].fail_lost(
                [task.task_id], "interrupted: gateway restarted; its request was not kept"
            )
            continue
        await _cancel_earlier(app, route, task)
        request, capabilities = call_of(kept)
        principal = principal_of(task)
        lease = await app[HELD_SESSIONS].lease(route, principal, capabilities, {})
        call = HeldCall(lease, request)
        call.key_prefix = f"attempt{rerun.attempt}-"
        call.start()
        api = app[MODERN_TASK_API]
        host = api.host_for(call, task.owner, principal, route.policy)
        limit = route.policy.time_limit_seconds
        app[RUNNER].rerun(task, host, call.outgoing, rerun.time_left, limit)
        log.info("task of %s on route %s: attempt %d runs", task.tool, route.name, rerun.attempt)


async def _cancel_earlier(app: web.Application, route: Route, task: Task) -> None:
    """Best effort: the earlier attempt's call, on the HTTP upstream session it went on."""
    earlier = await app[STORE].get_upstream_call(task.task_id)
    if earlier is None or earlier.session_id is None:
        return
    note = jsonrpc.cancelled(earlier.request_id, RESTARTED)
    await route.upstream.tell_session(earlier.session_id, note, principal_of(task))
