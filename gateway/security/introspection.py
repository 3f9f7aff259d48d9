"""Opaque access tokens, checked at the identity provider's RFC 7662 introspection endpoint.

A token that is not a JWT cannot be verified locally: the gateway asks the provider (POST,
authenticated as a confidential client) and checks the answer as it checks a JWT's claims:
`active`, then `exp` and `nbf` with the leeway, `iss` when given, and an `aud` naming this
route's resource (RFC 8707); the principal and scopes are read from it by `auth`.

Answers are kept per SHA-256 of the token (never the token), at most `cache_seconds_max` and
never past the token's `exp`; a refusal (inactive, wrong audience) is kept a few seconds, so
one bad token sent in a flood is asked about once. Concurrent requests with one new token
share one introspection. While the provider cannot answer, requests get
`IdentityProviderUnavailable` (503 with Retry-After), and for a few seconds after a failure
it is not asked again.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import math
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence

import aiohttp

from gateway.config.tokens import IntrospectionConfig
from gateway.security.client_auth import authenticate_client
from gateway.security.errors import AuthError, IdentityProviderUnavailable

log = logging.getLogger(__name__)

#: One introspection may take this long; the requests that need it wait as long at most.
_TIMEOUT_SECONDS = 5.0
#: After a failed introspection the provider is not asked again for this long (503 at once).
_RETRY_SECONDS = 5.0
#: How long a refusal (inactive, wrong audience or issuer) is kept.
_REFUSAL_SECONDS = 10.0
#: Tokens whose answers are kept; the least recently used goes first.
_MAX_ENTRIES = 10_000
#: Introspections in flight at once; more requests with new tokens wait for a turn.
_CONCURRENT = 16

Claims = dict[str, object]


class Introspector:
    """One route's view of the introspection endpoint: the checks need its audiences."""

    def __init__(
        self,
        config: IntrospectionConfig,
        *,
        issuer: str,
        audiences: Sequence[str],
        leeway_seconds: float,
        clock: Callable[[], float] = time.time,
        section: str = "auth.oauth",
    ) -> None:
        """`section` is where the file writes the oauth section that holds `config`
        (`routes[2].auth.oauth`): the log names its keys there."""
        self._config = config
        self._url_key = f"{section}.introspection.url"
        self._issuer = issuer
        self._audiences = frozenset(audiences)
        self._leeway = leeway_seconds
        self._clock = clock  # wall clock: `exp` and `nbf` are POSIX times
        self._kept: OrderedDict[bytes, tuple[float, Claims | str]] = OrderedDict()
        self._asking: dict[bytes, asyncio.Lock] = {}
        self._turns = asyncio.Semaphore(_CONCURRENT)
        self._retry_at = 0.0
        self._failing = False  # the outage is logged once, when it starts

    async def claims(self, token: str) -> Claims:
        """The introspection answer for an active token meant for this route.

        Raises:
            AuthError: the token is not active, expired, or not for this route or issuer.
            IdentityProviderUnavailable: the provider cannot be asked now.
        """
        key = hashlib.sha256(token.encode()).digest()
        found = self._cached(key)
        if found is None:
            lock = self._asking.setdefault(key, asyncio.Lock())
            try:
                async with lock:  # who waited finds the answer kept
                    found = self._cached(key) or await self._introspect(key, token)
            finally:
                if self._asking.get(key) is lock and not lock.locked():
                    del self._asking[key]
        if isinstance(found, str):
            raise AuthError(found)
        self._check_time(found)  # a kept answer ages
        return found

    def _cached(self, key: bytes) -> Claims | str | None:
        entry = self._kept.get(key)
        if entry is None:
            return None
        if self._clock() >= entry[0]:
            del self._kept[key]
            return None
        self._kept.move_to_end(key)
        return entry[1]

    async def _introspect(self, key: bytes, token: str) -> Claims | str:
        answer = await self._ask(token)
        now = self._clock()
        try:
            self._check(answer)
        except AuthError as exc:
            brief = min(_REFUSAL_SECONDS, self._config.cache_seconds_max)
            self._keep(key, now + brief, exc.reason)
            return exc.reason
        until = now + self._config.cache_seconds_max
        exp = answer.get("exp")
        if isinstance(exp, int | float):
            until = min(until, float(exp))  # never kept past the token's expiry
        self._keep(key, until, answer)
        return answer

    def _keep(self, key: bytes, until: float, value: Claims | str) -> None:
        if until <= self._clock():
            return
        self._kept[key] = (until, value)
        self._kept.move_to_end(key)
        while len(self._kept) > _MAX_ENTRIES:
            self._kept.popitem(last=False)

    async def _ask(self, token: str) -> Claims:
        wait = self._retry_at - self._clock()
        if wait > 0:
            raise _unavailable(wait)
        cfg = self._config
        form = {"token": token, "token_type_hint": "access_token"}
        headers = authenticate_client(cfg.auth_method, cfg.client_id, cfg.secret, form)
        async with self._turns:
            try:
                async with asyncio.timeout(_TIMEOUT_SECONDS):
                    # A session per question: answers are kept, so questions are rare, and the
                    # authenticator needs nothing closed at shutdown.
                    async with aiohttp.ClientSession(cookie_jar=aiohttp.DummyCookieJar()) as http:
                        async with http.post(cfg.url, data=form, headers=headers) as resp:
                            status = resp.status
                            body = await resp.json(content_type=None) if status == 200 else None
            except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
                raise self._failed(f"cannot reach it ({type(exc).__name__})") from None
        if status != 200:
            raise self._failed(f"HTTP {status}")
        if not isinstance(body, dict) or not isinstance(body.get("active"), bool):
            raise self._failed("the answer is not an RFC 7662 object with a boolean `active`")
        if self._failing:
            self._failing = False
            log.warning("%s %s: answers again", self._url_key, cfg.url)
        return body

    def _check(self, answer: Claims) -> None:
        if answer.get("active") is not True:
            raise AuthError("token not active")
        self._check_time(answer)
        # Optional in RFC 7662: the endpoint is the issuer's own; a different one is refused.
        if "iss" in answer and answer["iss"] != self._issuer:
            raise AuthError("wrong issuer")
        aud = answer.get("aud")
        if aud is None:  # without it the token could be meant for any resource
            raise AuthError("token is missing claim aud")
        named = [aud] if isinstance(aud, str) else aud if isinstance(aud, list) else []
        if not self._audiences.intersection(a for a in named if isinstance(a, str)):
            raise AuthError("wrong audience")

    def _check_time(self, answer: Claims) -> None:
        now = self._clock()
        for claim in ("exp", "nbf"):
            value = answer.get(claim)
            if value is not None and (
                not isinstance(value, int | float) or isinstance(value, bool)
            ):
                raise AuthError(f"claim {claim} must be a number")
        exp, nbf = answer.get("exp"), answer.get("nbf")
        if isinstance(exp, int | float) and now > exp + self._leeway:
            raise AuthError("token expired")
        if isinstance(nbf, int | float) and now < nbf - self._leeway:
            raise AuthError("token not yet valid")

    def _failed(self, why: str) -> IdentityProviderUnavailable:
        self._retry_at = self._clock() + _RETRY_SECONDS
        if not self._failing:
            self._failing = True
            log.warning(
                "%s %s: %s; opaque tokens get 503 until it answers (asked again at most every %gs)",
                self._url_key,
                self._config.url,
                why,
                _RETRY_SECONDS,
            )
        return _unavailable(_RETRY_SECONDS)


def _unavailable(wait: float) -> IdentityProviderUnavailable:
    return IdentityProviderUnavailable(
        "identity provider unavailable: try again later",
        headers={"Retry-After": str(max(1, math.ceil(wait)))},
    )
