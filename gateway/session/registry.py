"""SessionRegistry: the sessions this process holds, within the gateway's and the routes' caps.

A session id is a 256-bit random token. The registry creates sessions within
sessions.max_sessions and each route's limits.sessions_per_principal (the caller's least
recently used idle session making room), finds the one a request names, and ends sessions:
on DELETE, on an operator's word, idle, or at shutdown. A session it does not hold is rebuilt
from its stored record (`records.py`), after a restart or, with replicas, one that another
replica opened. With replicas, an authenticated caller's sessions are counted over the whole
deployment (`open`): its records in the store, read once per new session, never per request.
The sessions it holds, and how many each caller holds, are kept in `live.py`.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import secrets
import time

from gateway.aio import TaskSet, Turns
from gateway.config import HttpConfig, SessionsConfig
from gateway.protocol.errors import CapacityExceeded, LimitExceeded, SessionNotFound
from gateway.route import Route
from gateway.session.live import LiveSessions
from gateway.session.records import SessionRecords
from gateway.session.session import Session
from gateway.tasks.inputs import TaskInputs
from gateway.tasks.models import SessionRecord
from gateway.tasks.store import TaskStore

log = logging.getLogger(__name__)

#: Records read beyond a caller's cap: what races between replicas let through, made room from.
_READ_BEYOND = 64
_BUSY = "each with a call or task running"


class SessionRegistry:
    NOT_FOUND = (
        "Session not found: it ended, expired or never existed; "
        "send a new initialize without MCP-Session-Id"
    )

    def __init__(
        self,
        config: SessionsConfig,
        http: HttpConfig,
        store: TaskStore,
        board: TaskInputs | None = None,
    ) -> None:
        self._config = config
        self._http = http
        #: With a store that replicas share (another process may have made a record), where
        #: the questions of sessions' tasks are kept for the other replicas.
        self._board = board
        self.records = SessionRecords(store, shared=board is not None)
        self._sessions = LiveSessions()
        self._tasks = TaskSet("sessions")
        #: With replicas, one count of a caller's sessions at a time here (per route).
        self._counting = Turns()

    def count(self, route: str) -> int:
        return sum(1 for s in self._sessions if s.route.name == route)

    def uses(self, route: Route) -> bool:
        """Whether a live session was opened on this very `Route` (not one of its name that
        a reload built since)."""
        return any(s.route is route for s in self._sessions)

    def _add(
        self,
        session_id: str,
        route: Route,
        principal: str | None,
        limit_key: str,
        counted: bool = False,
    ) -> Session:
        """Hold a new session, within the gateway's cap and the route's per-principal limit
        (unless the deployment's count of the caller's sessions was made: `counted`).

        Raises:
            CapacityExceeded: the gateway holds sessions.max_sessions already.
            LimitExceeded: `limit_key` holds limits.sessions_per_principal on this route.
        """
        limit_key = f"{route.name}:{limit_key}"  # counted per route, like tasks
        if len(self._sessions) >= self._config.max_sessions:
            raise CapacityExceeded(
                f"the gateway already holds its maximum of {self._config.max_sessions} sessions "
                "(sessions.max_sessions)"
            )
        cap = route.limits.sessions_per_principal
        if not counted and cap is not None and self._sessions.held(limit_key) >= cap:
            # Many clients never send DELETE (the TS SDK's close(), the inspector): their
            # sessions would lock the caller out for the idle timeout. The caller's least
            # recently used idle session makes room; only busy ones hold the cap.
            idle = self._sessions.idle_of(limit_key)
            if idle is None:
                raise _refused(route, cap, _BUSY)
            self._replace(idle)
        session = Session(session_id, route, self._http, principal, limit_key)
        session.persist = self.records.update
        if self.records.shared:
            check = functools.partial(self.records.recorded, session, fresh=True)
            session.upstream.may_reestablish = check
        if self._board is not None:
            session.share_questions(self._board)
        self._sessions.add(session)
        return session

    def create(self, route: Route, principal: str | None, limit_key: str) -> Session:
        """A new session for `principal`; `limit_key` is whom the per-principal limits count."""
        return self._add(secrets.token_urlsafe(32), route, principal, limit_key)

    async def open(self, route: Route, principal: str | None, limit_key: str) -> Session:
        """A new session, as `create`; with replicas and a principal, within the cap counted
        over the deployment: the caller's records in the store, and its sessions here. At
        the cap, its least recently used idle session here makes room, else (a route whose
        sessions go on at any replica) its least recently seen record held elsewhere.

        Raises:
            CapacityExceeded, LimitExceeded: as `create`.
            StoreUnreachable: the caller's records could not be read.
        """
        cap = route.limits.sessions_per_principal
        if not self.records.shared or principal is None or cap is None:
            return self.create(route, principal, limit_key)
        key = f"{route.name}:{limit_key}"
        async with self._counting.turn(key):
            stored = await self.records.of_caller(route.name, principal, cap + _READ_BEYOND)
            # And the handshakes under way here; not a session whose record was ended elsewhere.
            mine = self._sessions.of(key)
            counted = set(stored) | {s.id for s in mine if s.record is None}
            elsewhere = [i for i in stored if i not in self._sessions]
            while len(counted) >= cap:
                if (idle := self._sessions.idle_of(key, counted)) is not None:
                    self._replace(idle)
                    counted.discard(idle.id)
                elif elsewhere and self.records.portable(route):
                    log.info("a session held elsewhere ended to make room for a new one")
                    counted.discard(oldest := elsewhere.pop(0))
                    await self.records.end(oldest, route.name, principal, "replaced", None)
                else:
                    why = "none idle on this replica" if elsewhere else _BUSY
                    raise _refused(route, len(counted), why)
            return self._add(secrets.token_urlsafe(32), route, principal, limit_key, counted=True)

    def _replace(self, idle: Session) -> None:
        """End an idle session to make room for a new one of its caller."""
        log.info("session %s: ended to make room for a new one of its caller", idle.tag)
        self._sessions.forget(idle)
        self.records.retire(idle.id)  # now: its record must not bring it back meanwhile
        self._tasks.spawn(self._retire(idle, "replaced"), name="retire session")

    async def get(
        self, session_id: str, route: Route, principal: str | None, limit_key: str
    ) -> Session:
        """The live session, or one rebuilt from its record after a restart.

        Raises:
            SessionNotFound: unknown or ended id, another route's session, or another
                principal's: all answered alike, so session ids cannot be probed. With a
                shared store, also the caller's own session of a stdio route that another
                replica holds (`SessionRecords.ON_ANOTHER_REPLICA` says so).
        """
        session = self._sessions.get(session_id)
        if session is None:
            session = await self._restore(session_id, route, principal, limit_key)
        elif self.records.shared and not await self._still_recorded(session):
            session = None
        # By name: a reload that changes the route leaves open sessions on the one they began
        # on (its upstream connection, its headers), while the request is admitted by the new.
        if session is None or session.route.name != route.name or session.principal != principal:
            raise SessionNotFound(self.NOT_FOUND)
        session.last_seen = time.monotonic()
        return session

    async def _still_recorded(self, session: Session) -> bool:
        """Whether a session held here was not ended on another replica meanwhile; one that
        was is let go here. Asked on every request (the store keeps the records it reads and
        hears of their end on any replica within a notification): the spec's 404 for an
        ended session must not wait, nor may a request here replay its handshake."""
        if await self.records.recorded(session):
            return True
        log.info("session %s: ended on another replica, let go here", session.tag)
        await self._let_go(session)
        return False

    async def _let_go(self, session: Session) -> None:
        """Close this replica's copy of a session that lives on in the shared store (or was
        ended elsewhere): its record and its upstream session are not this copy's to end."""
        if self._sessions.forget(session):
            session.upstream.keep_upstream_session()
            await session.close()

    async def _restore(
        self, session_id: str, route: Route, principal: str | None, limit_key: str
    ) -> Session | None:
        record = await self.records.find(session_id, route, principal)
        if record is None:
            return None
        session = self._sessions.get(session_id)  # another request restored it meanwhile
        if session is not None:
            return session
        # With replicas, a caller's recorded session is already one of its deployment's.
        counted = self.records.shared and principal is not None
        session = self._add(session_id, route, principal, limit_key, counted)
        self.records.resume(session, record)
        return session

    async def end(self, session: Session, why: str = "deleted", actor: str | None = None) -> None:
        if self._sessions.forget(session):
            await self._retire(session, why, actor)

    async def end_recorded(self, session_id: str, actor: str) -> SessionRecord | None:
        """End a recorded session for `actor` (an operator), as its client's DELETE would:
        held here, it is closed; held by another replica (or by none since a restart), its
        record goes, and the next request there gets 404 (`_still_recorded`, `_restore`).
        Returns the record, or None for an unknown id."""
        record = await self.records.get(session_id)
        if record is None:
            return None
        session = self._sessions.get(session_id)
        if session is not None and self._sessions.forget(session):
            await self._retire(session, "deleted", actor)
        else:
            await self.records.end(session_id, record.route, record.principal, "deleted", actor)
        return record

    async def _retire(self, session: Session, why: str, actor: str | None = None) -> None:
        try:
            await self.records.end(session.id, session.route.name, session.principal, why, actor)
        finally:
            # Its child and streams go even when the store fails; a record left behind
            # only lets its client come back, as after a restart.
            await session.close()

    def start_reaper(self) -> None:
        self._tasks.spawn(self._reap(), name="session-reaper")

    async def _reap(self) -> None:
        idle = self._config.idle_timeout_seconds
        while True:
            await asyncio.sleep(min(idle / 4, 60))
            cutoff = time.monotonic() - idle
            for session in [s for s in self._sessions if s.last_seen < cutoff]:
                if session.busy or session.record is None:
                    continue  # a call in flight, or its initialize still under way
                try:
                    if self.records.portable(session.route):
                        # Idle here says nothing of the other replicas; its record is
                        # pruned once no replica has seen it for the idle timeout.
                        log.info("session %s idle here for %.0f s: let go", session.tag, idle)
                        await self._let_go(session)
                        continue
                    log.info("session %s idle for %.0f s: ended", session.tag, idle)
                    await self.end(session, "idle")
                except Exception:
                    # One failure (the store, say) must not leave every later session running.
                    log.exception("session %s: ending it failed; reaping goes on", session.tag)

    def drain(self, reason: str) -> None:
        """Shutdown: every session answers what it relays and ends its GET stream."""
        for session in self._sessions:
            session.drain(reason)

    async def close(self) -> None:
        """Gateway shutdown: sessions stay recorded, so clients carry on after a restart."""
        await self._tasks.close()
        await self._sessions.close(keep_upstream=self.records.shared)

    async def prune_records(self) -> None:
        """Delete the records of sessions no client used for the idle timeout; those held
        here count as used."""
        await self.records.prune(self._sessions.ids(), self._config.idle_timeout_seconds)


def _refused(route: Route, held: int, why: str) -> LimitExceeded:
    route.metrics.limited.labels(route.name, "sessions").inc()
    return LimitExceeded(
        f"Too many sessions: this caller already has {held} (limits.sessions_per_principal), "
        f"{why}; end one with DELETE first"
    )
