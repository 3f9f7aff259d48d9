"""Who is signed in to the console: sessions behind a cookie, and their CSRF tokens.

A session's id is 32 random bytes the browser keeps in an `HttpOnly`, `SameSite=Strict`
cookie; the gateway keeps only its SHA-256, so a memory dump names no cookie that works. A
session ends when its operator signs out, or after `IDLE_SECONDS` without a request. At most
`MAX_SESSIONS` are kept; a new one beyond that ends the one idle longest, so that a flood of
sign-ins (each needs the token) cannot grow memory. Sessions live in the replica that made them:
behind a load balancer, an operator signs in to the one it sends them to.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass

#: Seconds without a request after which a session has ended.
IDLE_SECONDS = 30 * 60
#: Sessions kept at once: a few operators, each in a browser or two.
MAX_SESSIONS = 32
#: The cookie's name; it is sent to `/admin/console/` alone.
COOKIE = "gateway_console"
#: Longer than any id this module makes: a longer cookie is not looked up at all.
_MAX_COOKIE = 100


@dataclass(slots=True)
class Session:
    """One signed-in browser: the token its forms carry, and when it was last seen."""

    csrf: str
    seen: float

    def carries(self, given: str) -> bool:
        """Whether `given` is this session's CSRF token (in constant time)."""
        return hmac.compare_digest(given.encode("utf-8", "replace"), self.csrf.encode())


def _digest(cookie: str) -> bytes:
    return hashlib.sha256(cookie.encode("utf-8", "replace")).digest()


class Sessions:
    """The console's sessions in this replica; `clock` is monotonic seconds (tests pass their
    own, so that expiry needs no waiting)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._open: dict[bytes, Session] = {}

    def open(self) -> tuple[str, Session]:
        """A new session: the cookie's value, and the session."""
        now = self._clock()
        self._forget_idle(now)
        if len(self._open) >= MAX_SESSIONS:
            oldest = min(self._open, key=lambda key: self._open[key].seen)
            del self._open[oldest]
        cookie = secrets.token_urlsafe(32)
        session = self._open[_digest(cookie)] = Session(secrets.token_urlsafe(32), now)
        return cookie, session

    def find(self, cookie: str | None) -> Session | None:
        """The live session of `cookie`, now seen again; None for no cookie, a forged one or
        one whose session has ended."""
        if not cookie or len(cookie) > _MAX_COOKIE:
            return None
        key = _digest(cookie)
        session = self._open.get(key)
        if session is None:
            return None
        now = self._clock()
        if now - session.seen > IDLE_SECONDS:
            del self._open[key]
            return None
        session.seen = now
        return session

    def close(self, cookie: str | None) -> None:
        """Ends the session of `cookie`, if there is one."""
        if cookie and len(cookie) <= _MAX_COOKIE:
            self._open.pop(_digest(cookie), None)

    def __len__(self) -> int:
        return len(self._open)

    def _forget_idle(self, now: float) -> None:
        idle = [key for key, s in self._open.items() if now - s.seen > IDLE_SECONDS]
        for key in idle:
            del self._open[key]
