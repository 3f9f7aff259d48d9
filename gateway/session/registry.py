"""SessionRegistry: the live sessions, and the durable records that outlive a restart.

A session id is a 256-bit random token. Its record (route, negotiated version, the client's
handshake) is stored when the session opens, so after a restart a client that still holds
its id carries on: the session is rebuilt on first use and the upstream handshake replayed.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import secrets
import time
from datetime import timedelta

from gateway.aio import TaskSet
from gateway.config import HttpConfig, SessionsConfig
from gateway.observability.audit import audit
from gateway.protocol import jsonrpc
from gateway.protocol.errors import CapacityExceeded, LimitExceeded, SessionNotFound
from gateway.route import Route
from gateway.session.session import Session
from gateway.tasks.inputs import TaskInputs
from gateway.tasks.models import SessionRecord, utcnow
from gateway.tasks.store import TaskStore

log = logging.getLogger(__name__)

#: Sessions closed at once on shutdown.
_CLOSING_AT_ONCE = 100


class SessionRegistry:
    NOT_FOUND = (
        "Session not found: it ended, expired or never existed; "
        "send a new initialize without MCP-Session-Id"
    )

    #: With replicas, a stdio route's session is held by the replica that runs its child.
    ON_ANOTHER_REPLICA = (
        "Session not found on this gateway replica: its stdio server runs in another replica "
        "(or in one that stopped), and a new child here would not have its state. Keep each "
        "caller on one replica (a load balancer hashing on Authorization: docs/replicas.md); "
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
        self._store = store
        #: With a store that replicas share (another process may have made a record), where
        #: the questions of sessions' tasks are kept for the other replicas.
        self._board = board
        self._shared = board is not None
        self._sessions: dict[str, Session] = {}
        #: Sessions held per `Session.limit_key`: what limits.sessions_per_principal caps.
        self._per_limit_key: collections.Counter[str] = collections.Counter()
        self._tasks = TaskSet("sessions")
        #: Ended sessions whose records are still being deleted: not to be restored meanwhile.
        self._retiring: set[str] = set()

    def count(self, route: str) -> int:
        return sum(1 for s in self._sessions.values() if s.route.name == route)

    def uses(self, route: Route) -> bool:
        """Whether a live session was opened on this very `Route` (not one of its name that
        a reload built since)."""
        return any(s.route is route for s in self._sessions.values())

    def _add(self, session_id: str, route: Route, principal: str | None, limit_key: str) -> Session:
        """Hold a new session, within the gateway's cap and the route's per-principal limit.

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
        if cap is not None and self._per_limit_key[limit_key] >= cap:
            # Many clients never send DELETE (the TS SDK's close(), the inspector): their
            # sessions would lock the caller out for the idle timeout. The caller's least
            # recently used idle session makes room; only busy ones hold the cap.
            idle = self._idle_of(limit_key)
            if idle is None:
                route.metrics.limited.labels(route.name, "sessions").inc()
                raise LimitExceeded(
                    f"Too many sessions: this caller already has {cap} "
                    "(limits.sessions_per_principal), each with a call or task running; "
                    "end one with DELETE first"
                )
            log.info("session %s: ended to make room for a new one of its caller", idle.tag)
            self._forget(idle)
            self._retiring.add(idle.id)  # now: its record must not bring it back meanwhile
            self._tasks.spawn(self._retire(idle, "replaced"), name="retire session")
        session = Session(session_id, route, self._http, principal, limit_key)
        session.persist = self._store.update_session
        if self._board is not None:
            session.share_questions(self._board)
        self._sessions[session_id] = session
        self._per_limit_key[limit_key] += 1
        return session

    def create(self, route: Route, principal: str | None, limit_key: str) -> Session:
        """A new session for `principal`; `limit_key` is whom the per-principal limits count."""
        return self._add(secrets.token_urlsafe(32), route, principal, limit_key)

    def _forget(self, session: Session) -> bool:
        if self._sessions.pop(session.id, None) is None:
            return False
        self._per_limit_key[session.limit_key] -= 1
        if not self._per_limit_key[session.limit_key]:
            del self._per_limit_key[session.limit_key]
        return True

    async def opened(self, session: Session, initialize: jsonrpc.Request) -> None:
        """The upstream accepted the handshake: record the session durably."""
        audit(
            "session_created",
            route=session.route.name,
            principal=session.principal,
            protocol_version=session.protocol_version,
        )
        session.record = SessionRecord(
            session_id=session.id,
            route=session.route.name,
            principal=session.principal,
            protocol_version=session.protocol_version,
            initialize=initialize.model_dump(exclude_unset=True),
            created_at=utcnow(),
            upstream_session_id=session.upstream.session_id,
            upstream_protocol_version=session.upstream.protocol_version,
        )
        await self._store.save_session(session.record)

    async def get(
        self, session_id: str, route: Route, principal: str | None, limit_key: str
    ) -> Session:
        """The live session, or one rebuilt from its record after a restart.

        Raises:
            SessionNotFound: unknown or ended id, another route's session, or another
                principal's: all answered alike, so session ids cannot be probed. With a
                shared store, also the caller's own session of a stdio route that another
                replica holds (`ON_ANOTHER_REPLICA` says so).
        """
        session = self._sessions.get(session_id)
        if session is None:
            session = await self._restore(session_id, route, principal, limit_key)
        elif self._shared and not await self._still_recorded(session):
            session = None
        # By name: a reload that changes the route leaves open sessions on the one they began
        # on (its upstream connection, its headers), while the request is admitted by the new.
        if session is None or session.route.name != route.name or session.principal != principal:
            raise SessionNotFound(self.NOT_FOUND)
        session.last_seen = time.monotonic()
        return session

    def _portable(self, route: Route) -> bool:
        """Whether the route's sessions go on at any replica (a stdio child lives in one)."""
        return self._shared and route.upstream.config.transport != "stdio"

    async def _still_recorded(self, session: Session) -> bool:
        """Whether a session held here was not ended on another replica meanwhile; one that
        was is let go here. Read on every request (a primary-key read): the spec's 404 for
        an ended session must not wait, nor may a request here replay its handshake."""
        if session.record is None or await self._store.get_session(session.id) is not None:
            return True
        log.info("session %s: ended on another replica, let go here", session.tag)
        await self._let_go(session)
        return False

    async def _let_go(self, session: Session) -> None:
        """Close this replica's copy of a session that lives on in the shared store (or was
        ended elsewhere): its record and its upstream session are not this copy's to end."""
        if self._forget(session):
            session.upstream.keep_upstream_session()
            await session.close()

    async def _restore(
        self, session_id: str, route: Route, principal: str | None, limit_key: str
    ) -> Session | None:
        if session_id in self._retiring:
            return None
        record = await self._store.get_session(session_id)
        if session_id in self._retiring:  # ended while the record was being read
            return None
        if record is None or record.route != route.name or record.principal != principal:
            return None
        if self._shared and not self._portable(route):
            raise SessionNotFound(self.ON_ANOTHER_REPLICA)
        session = self._sessions.get(session_id)  # another request restored it meanwhile
        if session is not None:
            return session
        session = self._add(session_id, route, principal, limit_key)
        session.record = record
        session.protocol_version = record.protocol_version
        initialize = jsonrpc.Request.model_validate(record.initialize)
        initialized = record.initialized
        notification = jsonrpc.Notification.model_validate(initialized) if initialized else None
        upstream_id, version = record.upstream_session_id, record.upstream_protocol_version
        if self._shared and upstream_id is not None and version is not None:
            # Another replica opened it: its upstream session goes on, state and all.
            session.upstream.adopt(initialize, notification, upstream_id, version)
        else:
            session.upstream.restore(initialize, notification)
        log.info("route %s: session %s restored from the store", route.name, session.tag)
        return session

    def _idle_of(self, limit_key: str) -> Session | None:
        """The least recently used open session counted against `limit_key` with nothing
        in flight and no client reading its GET stream, if any."""
        idle = [
            s
            for s in self._sessions.values()
            if s.limit_key == limit_key and s.record is not None and not s.busy and not s.listening
        ]
        return min(idle, key=lambda s: s.last_seen, default=None)

    async def end(self, session: Session, why: str = "deleted", actor: str | None = None) -> None:
        if self._forget(session):
            await self._retire(session, why, actor)

    async def end_recorded(self, session_id: str, actor: str) -> SessionRecord | None:
        """End a recorded session for `actor` (an operator), as its client's DELETE would:
        held here, it is closed; held by another replica (or by none since a restart), its
        record goes, and the next request there gets 404 (`_still_recorded`, `_restore`).
        Returns the record, or None for an unknown id."""
        record = await self._store.get_session(session_id)
        if record is None:
            return None
        session = self._sessions.get(session_id)
        if session is not None and self._forget(session):
            await self._retire(session, "deleted", actor)
            return record
        audit(
            "session_ended",
            route=record.route,
            principal=record.principal,
            reason="deleted",
            actor=actor,
        )
        self._retiring.add(session_id)
        try:
            await self._store.delete_session(session_id)
        finally:
            self._retiring.discard(session_id)
        return record

    async def _retire(self, session: Session, why: str, actor: str | None = None) -> None:
        audit(
            "session_ended",
            route=session.route.name,
            principal=session.principal,
            reason=why,
            actor=actor,
        )
        self._retiring.add(session.id)
        try:
            await self._store.delete_session(session.id)
        finally:
            self._retiring.discard(session.id)
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
            for session in [s for s in self._sessions.values() if s.last_seen < cutoff]:
                if session.busy or session.record is None:
                    continue  # a call in flight, or its initialize still under way
                try:
                    if self._portable(session.route):
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
        for session in self._sessions.values():
            session.drain(reason)

    async def close(self) -> None:
        """Gateway shutdown: sessions stay recorded, so clients carry on after a restart.

        Closed side by side, a bounded number at a time: one close may take seconds (a stdio
        child slow to exit, an upstream slow to answer DELETE), and one after another a
        thousand of them would overrun any shutdown grace.
        """
        await self._tasks.close()
        sessions = list(self._sessions.values())
        for session in sessions:
            self._forget(session)
            if self._shared:
                session.upstream.keep_upstream_session()  # another replica may carry it on
        bound = asyncio.Semaphore(_CLOSING_AT_ONCE)

        async def close(session: Session) -> None:
            async with bound:
                await session.close()

        results = await asyncio.gather(*map(close, sessions), return_exceptions=True)
        for session, result in zip(sessions, results, strict=True):
            if isinstance(result, Exception):
                log.warning("session %s: closing it failed: %r", session.tag, result)

    async def prune_records(self) -> None:
        """Delete the records of sessions no client used for the idle timeout.

        Sessions live here count as used (their records are marked seen, one write for all):
        a session the reaper keeps because a task runs keeps its record too.
        """
        idle = self._config.idle_timeout_seconds
        now = utcnow()
        before = now - timedelta(seconds=idle)
        pruned = await self._store.prune_sessions(list(self._sessions), now, before)
        if pruned:
            log.info("%d session record(s) unused for %.0f s deleted", len(pruned), idle)
