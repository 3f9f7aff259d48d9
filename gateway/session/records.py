"""SessionRecords: what of a session outlives its process, in the store.

A session's record (route, principal, negotiated version, the client's handshake, the
upstream's session) is written once the upstream accepted the handshake. A client that still
holds its id after a restart carries on: the registry rebuilds the session from its record on
first use, and the upstream handshake is replayed. With a store that replicas share, another
replica rebuilds it the same way and adopts the upstream session itself, state and all,
except on a stdio route, whose child lives in one replica only. An ended session's record is
deleted, and one no replica has used for the idle timeout is pruned.
"""

from __future__ import annotations

import logging
from datetime import timedelta

from gateway.observability.audit import audit
from gateway.protocol import jsonrpc
from gateway.protocol.errors import SessionNotFound
from gateway.route import Route
from gateway.session.session import Session
from gateway.tasks.models import SessionRecord, utcnow
from gateway.tasks.store import TaskStore

log = logging.getLogger(__name__)


class SessionRecords:
    #: With replicas, a stdio route's session is held by the replica that runs its child.
    ON_ANOTHER_REPLICA = (
        "Session not found on this gateway replica: its stdio server runs in another replica "
        "(or in one that stopped), and a new child here would not have its state. Keep each "
        "caller on one replica (a load balancer hashing on Authorization: docs/replicas.md); "
        "send a new initialize without MCP-Session-Id"
    )

    def __init__(self, store: TaskStore, shared: bool) -> None:
        self._store = store
        #: Replicas share the store: another process may have made a record, or ended it.
        self.shared = shared
        #: Ended sessions whose records are still being deleted: not to be restored meanwhile.
        self._retiring: set[str] = set()

    def portable(self, route: Route) -> bool:
        """Whether the route's sessions go on at any replica (a stdio child lives in one)."""
        return self.shared and route.upstream.shares_sessions

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

    async def update(self, record: SessionRecord) -> bool:
        """Write a session's changed record (the client's initialized, a new upstream session)."""
        return await self._store.update_session(record)

    async def get(self, session_id: str) -> SessionRecord | None:
        return await self._store.get_session(session_id)

    async def of_caller(self, route: str, principal: str, limit: int) -> list[str]:
        """The ids of `principal`'s recorded sessions on `route` (any replica's, or none's
        since a replica let one go), least recently seen first, at most `limit`, less those
        ended here whose records are still being deleted."""
        ids = await self._store.caller_sessions(route, principal, limit)
        return [session_id for session_id in ids if session_id not in self._retiring]

    async def recorded(self, session: Session, fresh: bool = False) -> bool:
        """Whether the store still holds the record of a session held here (true while it has
        none yet: its handshake is under way). `fresh` reads the database itself: asked before
        a replayed handshake gives the session a new upstream session, which must not outlive
        a delete on another replica whose news has not come here yet."""
        if session.record is None:
            return True
        return await self._store.get_session(session.id, fresh) is not None

    async def find(
        self, session_id: str, route: Route, principal: str | None
    ) -> SessionRecord | None:
        """The record to rebuild a session from: None for an unknown id, one being ended, or
        another route's or principal's session.

        Raises:
            SessionNotFound: the caller's own session of a stdio route, with a shared store:
                the replica that runs its child holds it (`ON_ANOTHER_REPLICA` says so).
        """
        if session_id in self._retiring:
            return None
        record = await self._store.get_session(session_id)
        if session_id in self._retiring:  # ended while the record was being read
            return None
        if record is None or record.route != route.name or record.principal != principal:
            return None
        if self.shared and not self.portable(route):
            raise SessionNotFound(self.ON_ANOTHER_REPLICA)
        return record

    def resume(self, session: Session, record: SessionRecord) -> None:
        """Carry on a session rebuilt from its record: the upstream handshake is replayed, or
        with replicas, the upstream session another one opened is adopted."""
        session.record = record
        session.protocol_version = record.protocol_version
        initialize = jsonrpc.Request.model_validate(record.initialize)
        initialized = record.initialized
        notification = jsonrpc.Notification.model_validate(initialized) if initialized else None
        upstream_id, version = record.upstream_session_id, record.upstream_protocol_version
        if self.shared and upstream_id is not None and version is not None:
            # Another replica opened it: its upstream session goes on, state and all.
            session.upstream.adopt(initialize, notification, upstream_id, version)
        else:
            session.upstream.restore(initialize, notification)
        log.info("route %s: session %s restored from the store", session.route.name, session.tag)

    def retire(self, session_id: str) -> None:
        """The session is ending: its record must not bring it back before `end` deletes it."""
        self._retiring.add(session_id)

    async def end(
        self, session_id: str, route: str, principal: str | None, why: str, actor: str | None
    ) -> None:
        """Audit a session's end and delete its record."""
        audit("session_ended", route=route, principal=principal, reason=why, actor=actor)
        self._retiring.add(session_id)
        try:
            await self._store.delete_session(session_id)
        finally:
            self._retiring.discard(session_id)

    async def prune(self, live: list[str], idle: float) -> None:
        """Delete the records of sessions no client used for `idle` seconds.

        The `live` sessions, held here, count as used (their records are marked seen, one
        write for all): a session the reaper keeps because a task runs keeps its record too.
        """
        now = utcnow()
        before = now - timedelta(seconds=idle)
        pruned = await self._store.prune_sessions(live, now, before)
        if pruned:
            log.info("%d session record(s) unused for %.0f s deleted", len(pruned), idle)
