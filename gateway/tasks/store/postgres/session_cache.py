"""The session records this replica has read or written, kept so that a request on a session
held here does not read its record back from the database each time.

A record changes or goes on any replica (a client's DELETE, an operator's end, a prune, a new
upstream session), so an entry here is trusted only while the news of such changes reaches
this replica: a trigger (`schema`) sends each changed or deleted session's id on
`SESSION_CHANNEL`, and the listener hands it to `drop`. While the listener is not connected
the cache is not used at all (`live`), and at each reconnection, when news may have been
lost, it is emptied (`drop(None)`). A read that was under way when news came is not kept
(`epoch`), since it may predate the change. Each entry is kept for `KEPT_SECONDS` at most:
the backstop for news that never came, as the slow poll is for a task's waiter.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from gateway.tasks.models import SessionRecord

#: How long an entry is trusted without a word from the database.
KEPT_SECONDS = 1.0
#: Entries kept at most (the oldest go first): a replica holds at most its max_sessions.
_MOST = 10_000


class SessionCache:
    """Records by session id, each with the time it was read or written."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._records: dict[str, tuple[float, SessionRecord]] = {}
        #: Counts the news heard: a read begun in an earlier epoch is not kept.
        self.epoch = 0
        #: Whether news of changes reaches this replica now (the listener is connected).
        self.live: Callable[[], bool] = lambda: False

    def get(self, session_id: str) -> SessionRecord | None:
        """The record, if kept and still to be trusted."""
        kept = self._records.get(session_id)
        if kept is None:
            return None
        if not self.live() or self._clock() - kept[0] > KEPT_SECONDS:
            del self._records[session_id]
            return None
        return kept[1]

    def keep(self, record: SessionRecord, epoch: int) -> None:
        """Keep `record`, read or written in `epoch`, unless news came since."""
        if epoch != self.epoch or not self.live():
            return
        self._records.pop(record.session_id, None)
        if len(self._records) >= _MOST:
            del self._records[next(iter(self._records))]
        self._records[record.session_id] = (self._clock(), record)

    def drop(self, session_id: str | None) -> None:
        """The record of `session_id` changed or went (None: any may have)."""
        self.epoch += 1
        if session_id is None:
            self._records.clear()
        else:
            self._records.pop(session_id, None)
