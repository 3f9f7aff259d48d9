"""Several replicas on one PostgreSQL store: this replica's lease, wake-ups from the others,
and the tasks of a replica that died (DESIGN.md, "Several replicas").

No replica forwards anything to another: they meet only in the store. A task's runner is the
replica that runs its call; another replica's write to it (a client's cancel that landed
there, its answer to a question) reaches the runner as a wake-up through the store's `watch`
(LISTEN/NOTIFY), after which the runner re-reads the row. Nothing depends on a wake-up
arriving: every third of `store.lease_seconds` this replica renews its lease (in a loop of
its own, ahead of the requests queued at the pool, so that no load delays it), and a round
re-checks the runs here and claims the tasks of replicas whose lease has expired, which get
the decision a restart gives (`TaskRunner.recover`): failed, or run again here for tools
safe to repeat; after an outage of the store, only once every live replica has had a lease
to renew its own. Each round also counts the live replicas, whose number sets this replica's
share of the request rates (`limits.Share`). With SQLite there is one process per file and
none of this runs.
"""

from __future__ import annotations

import asyncio
import logging
import time

from aiohttp import web

from gateway.aio import TaskSet
from gateway.http.keys import RUNNER, SETTINGS, SHARE, STORE, TASK_INPUTS
from gateway.protocol.errors import StoreUnreachable
from gateway.recovery import reruns
from gateway.tasks.notifier import Notifier
from gateway.tasks.recovery import INTERRUPTED_MESSAGE, REPLICA_LOST_MESSAGE

log = logging.getLogger(__name__)


def lost_message(app: web.Application) -> str:
    """How the tasks a lost process left running are failed: by its own restart (one process
    per SQLite file), or by a surviving replica."""
    if app[SETTINGS].store.shared:
        return REPLICA_LOST_MESSAGE
    return INTERRUPTED_MESSAGE


async def start(app: web.Application, notifier: Notifier, tasks: TaskSet) -> None:
    """Hear the other replicas' writes, and keep this replica's lease (PostgreSQL only)."""
    if not app[SETTINGS].store.shared:
        return
    runner, answers = app[RUNNER], app[TASK_INPUTS]

    def changed(task_id: str | None) -> None:
        if task_id is None:
            notifier.all_changed()
        else:
            notifier.task_changed(task_id)
        # News sent for one replica reaches them all (a cancel for the runner, a result for
        # a replica waiting on it): of a task whose call runs elsewhere only the waiters here
        # hear, so that a replica's cost per task does not grow with the number of replicas.
        if task_id is None or runner.runs_here(task_id):
            tasks.spawn(runner.changed_elsewhere(task_id), name="task changed elsewhere")
        if task_id is None or answers.hosted(task_id):
            tasks.spawn(answers.answered_elsewhere(task_id), name="task answered elsewhere")

    await app[STORE].watch(changed)
    _count(app, await app[STORE].renew_lease())
    reach = _Reach()
    tasks.spawn(_renew(app, reach), name="replica lease")
    tasks.spawn(_look(app, reach), name="replica round")


def _count(app: web.Application, live: int) -> None:
    """A lease round saw `live` replicas: this one's share of the rates follows."""
    share = app[SHARE]
    if live != share.replicas:
        log.info("%d live replica(s): each holds 1/%d of every request rate", live, live)
    share.count(live)


class _Reach:
    """Since when this replica has reached the store without a break, as its lease renewals
    found it (it did at start); None while it cannot."""

    def __init__(self) -> None:
        self.since: float | None = time.monotonic()

    def renewed(self, lease: float) -> None:
        if self.since is None:
            self.since = time.monotonic()
            log.info("the task store is reachable again: leases are claimed after %g s", lease)

    def lost(self) -> None:
        if self.since is not None:
            log.warning("the task store is unreachable: this replica's lease waits for it")
        self.since = None


async def _renew(app: web.Application, reach: _Reach) -> None:
    """This replica's lease, renewed every third of it whatever else the replica is doing.
    In one loop with the re-checks below, a round that waited for hundreds of runs' reads let
    the lease lapse under load, and the other replicas failed this one's running tasks."""
    lease = app[SETTINGS].store.lease_seconds
    while True:
        await asyncio.sleep(lease / 3)
        try:
            _count(app, await app[STORE].renew_lease())
        except StoreUnreachable:
            reach.lost()
        except Exception:
            # A lease that lapses meanwhile costs this replica its tasks (fenced writes),
            # never a task run twice at once.
            log.exception("replica lease renewal failed; trying again in %.1f s", lease / 3)
        else:
            reach.renewed(lease)


async def _look(app: web.Application, reach: _Reach) -> None:
    """Each round, the runs here re-checked and the questions answered elsewhere looked for
    (what a lost notification would have said), then the tasks of lapsed leases claimed."""
    lease = app[SETTINGS].store.lease_seconds
    while True:
        await asyncio.sleep(lease / 3)
        if reach.since is None:
            continue  # the renewals say when the store is back
        try:
            await app[RUNNER].changed_elsewhere(None)
            await app[TASK_INPUTS].answered_elsewhere(None)
            # An outage every replica saw lapsed every lease at once: that is no replica's
            # death. Their tasks (whose outcomes may be in hand, waiting to be written) are
            # claimed only once each live replica has had a whole lease to renew its own.
            if reach.since is not None and time.monotonic() - reach.since >= lease:
                claimed = await app[RUNNER].recover(reruns.bounds_of(app), lost_message(app))
                await reruns.start(app, claimed)
        except StoreUnreachable:
            pass  # the renewals say so, and when it is back
        except Exception:
            log.exception("replica round failed; trying again in %.1f s", lease / 3)
