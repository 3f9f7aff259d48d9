"""Who the upstream is told calls: headers the gateway adds to every upstream HTTP request.

The client's own token is meant for the gateway (its audience is the route's resource), so
it is not passed on (MCP security best practices: no token passthrough). Instead a route may
send a short-lived JWT the gateway signs, naming the principal and the route
(`SignedAssertion`), a token the gateway obtains for itself from an authorization server
with the client credentials grant (`ClientCredentials`), or a token for the caller that the
gateway obtains by exchanging the caller's own (`TokenExchange`, RFC 8693). Tokens are cached
until shortly before they expire, and fetched by one request at a time.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from typing import Any, Protocol

import aiohttp
import jwt
from cryptography.hazmat.primitives.asymmetric.ec import EllipticCurvePrivateKey
from cryptography.hazmat.primitives.asymmetric.rsa import RSAPrivateKey
from cryptography.hazmat.primitives.serialization import load_pem_private_key

from gateway.config import UpstreamConfig, UpstreamIdentity
from gateway.protocol.errors import UpstreamUnavailable
from gateway.security.client_auth import authenticate_client

log = logging.getLogger(__name__)

#: Assertions kept for reuse, one per principal; the least recently used goes first.
_KEPT_ASSERTIONS = 1024
#: A token is fetched again this long before it expires (or at half its life, if sooner).
_REFRESH_MARGIN_SECONDS = 60.0
_TOKEN_TIMEOUT_SECONDS = 10.0


class Identity(Protocol):
    async def headers(self, principal: str | None) -> Mapping[str, str]:
        """The headers naming the caller (or the gateway) to the upstream.

        Raises:
            UpstreamUnavailable: the credential cannot be had now.
        """
        ...

    def observe(self, principal: str, token: str) -> None:
        """The caller `principal` authenticated with `token` (for an exchange later)."""


class NoIdentity:
    async def headers(self, principal: str | None) -> Mapping[str, str]:
        return {}

    def observe(self, principal: str, token: str) -> None:
        pass


def _bearer(config: UpstreamIdentity, token: str) -> dict[str, str]:
    value = f"Bearer {token}" if config.header.lower() == "authorization" else token
    return {config.header: value}


class SignedAssertion:
    """A JWT per principal: iss, aud, sub (the principal), route, iat, exp, jti."""

    def __init__(
        self, config: UpstreamIdentity, route: str, url: str, clock: Callable[[], float] = time.time
    ) -> None:
        """Raises:
        ValueError: the key is unusable; the message names `key_env`, never the key.
        """
        self._config = config
        self._route = route
        self._audience = config.audience or url
        self._clock = clock
        self._key: Any = _signing_key(config)
        self._kept: OrderedDict[str, tuple[float, dict[str, str]]] = OrderedDict()

    def observe(self, principal: str, token: str) -> None:
        pass

    async def headers(self, principal: str | None) -> Mapping[str, str]:
        if principal is None:  # the config refuses this mode on a route without authentication
            return {}
        now = self._clock()
        kept = self._kept.get(principal)
        # Reused for the first half of its life, so the upstream always gets one with time left.
        if kept is not None and now < kept[0]:
            self._kept.move_to_end(principal)
            return kept[1]
        lifetime = self._config.lifetime_seconds
        claims = {
            "iss": self._config.issuer,
            "aud": self._audience,
            "sub": principal,
            "route": self._route,
            "iat": int(now),
            "exp": int(now) + lifetime,
            "jti": secrets.token_urlsafe(16),
        }
        header = {"kid": self._config.key_id} if self._config.key_id else None
        token = jwt.encode(claims, self._key, algorithm=self._config.algorithm, headers=header)
        headers = _bearer(self._config, token)
        self._kept[principal] = (now + lifetime / 2, headers)
        if len(self._kept) > _KEPT_ASSERTIONS:
            self._kept.popitem(last=False)
        return headers


def _signing_key(config: UpstreamIdentity) -> Any:
    where = f"upstream.identity.key_env: {config.key_env}"
    if config.algorithm == "HS256":
        if len(config.secret.encode()) < 32:
            raise ValueError(f"{where}: an HS256 key must be at least 32 bytes (RFC 7518 §3.2)")
        return config.secret
    try:
        key = load_pem_private_key(config.secret.encode(), password=None)
    except (ValueError, TypeError):
        raise ValueError(f"{where}: not an unencrypted PEM private key") from None
    wanted = RSAPrivateKey if config.algorithm == "RS256" else EllipticCurvePrivateKey
    if not isinstance(key, wanted):
        raise ValueError(f"{where}: not a key for {config.algorithm}")
    return key


class TokenEndpoint:
    """One authorization server's token endpoint, as the gateway's client (RFC 6749)."""

    def __init__(
        self,
        config: UpstreamIdentity,
        http: Callable[[], aiohttp.ClientSession],
        clock: Callable[[], float],
    ) -> None:
        self._config = config
        self._http = http
        self._clock = clock

    async def token(self, form: dict[str, str]) -> tuple[dict[str, str], float]:
        """The headers carrying a new token, and when to fetch the next.

        Raises:
            UpstreamUnavailable: no token; the message names the config key, never a secret.
        """
        cfg = self._config
        assert cfg.token_url is not None and cfg.client_id is not None
        form = dict(form)
        if cfg.scopes:
            form["scope"] = " ".join(cfg.scopes)
        if cfg.resource:
            form["resource"] = cfg.resource
        headers = authenticate_client(cfg.auth_method, cfg.client_id, cfg.secret, form)
        started = self._clock()
        try:
            async with asyncio.timeout(_TOKEN_TIMEOUT_SECONDS):
                async with self._http().post(cfg.token_url, data=form, headers=headers) as resp:
                    status = resp.status
                    body = await resp.json(content_type=None) if status == 200 else None
        except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
            raise _unavailable(f"cannot reach it ({type(exc).__name__})") from None
        token = body.get("access_token") if isinstance(body, dict) else None
        if not isinstance(token, str) or not token:
            raise _unavailable(f"no access token in its answer (HTTP {status})")
        assert isinstance(body, dict)
        expires_in = body.get("expires_in")
        lifetime = float(expires_in) if isinstance(expires_in, int | float) else 300.0
        refresh_at = started + max(0.0, min(lifetime / 2, lifetime - _REFRESH_MARGIN_SECONDS))
        return _bearer(cfg, token), refresh_at


def _unavailable(why: str) -> UpstreamUnavailable:
    message = f"no token for the upstream from upstream.identity.token_url: {why}"
    log.warning("%s", message)
    return UpstreamUnavailable(message)


class ClientCredentials:
    """The gateway's own access token (RFC 6749 section 4.4), the same for every caller."""

    def __init__(
        self,
        config: UpstreamIdentity,
        http: Callable[[], aiohttp.ClientSession],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._endpoint = TokenEndpoint(config, http, clock)
        self._clock = clock
        self._lock = asyncio.Lock()
        self._headers: dict[str, str] = {}
        self._refresh_at = 0.0

    def observe(self, principal: str, token: str) -> None:
        pass

    async def headers(self, principal: str | None) -> Mapping[str, str]:
        if self._clock() < self._refresh_at:
            return self._headers
        async with self._lock:  # one fetch at a time; who waited finds the new token
            if self._clock() >= self._refresh_at:
                form = {"grant_type": "client_credentials"}
                self._headers, self._refresh_at = await self._endpoint.token(form)
        return self._headers


_EXCHANGE = "urn:ietf:params:oauth:grant-type:token-exchange"
_ACCESS_TOKEN = "urn:ietf:params:oauth:token-type:access_token"
#: Callers whose latest token (and exchanged token) is kept; the least recently seen goes first.
_KEPT_CALLERS = 4096


class TokenExchange:
    """A token for the caller, issued in exchange for the caller's own (RFC 8693): the
    upstream sees the user (and, in `act`, the gateway acting for them), never the token
    that was meant for the gateway."""

    def __init__(
        self,
        config: UpstreamIdentity,
        http: Callable[[], aiohttp.ClientSession],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._config = config
        self._endpoint = TokenEndpoint(config, http, clock)
        self._clock = clock
        self._lock = asyncio.Lock()
        self._subjects: OrderedDict[str, str] = OrderedDict()
        self._exchanged: dict[str, tuple[float, dict[str, str]]] = {}

    def observe(self, principal: str, token: str) -> None:
        if self._subjects.get(principal) != token:
            # A new token (refreshed, or with other scopes): what it yields may differ too.
            self._exchanged.pop(principal, None)
        self._subjects[principal] = token
        self._subjects.move_to_end(principal)
        if len(self._subjects) > _KEPT_CALLERS:
            gone, _ = self._subjects.popitem(last=False)
            self._exchanged.pop(gone, None)

    async def headers(self, principal: str | None) -> Mapping[str, str]:
        if principal is None:  # the config refuses this mode on a route without authentication
            return {}
        kept = self._exchanged.get(principal)
        if kept is not None and self._clock() < kept[0]:
            return kept[1]
        async with self._lock:
            kept = self._exchanged.get(principal)
            if kept is not None and self._clock() < kept[0]:
                return kept[1]
            subject = self._subjects.get(principal)
            if subject is None:
                # A task re-run after a restart, before its caller came back.
                raise _unavailable("no token of the caller to exchange yet")
            form = {
                "grant_type": _EXCHANGE,
                "subject_token": subject,
                "subject_token_type": _ACCESS_TOKEN,
                "requested_token_type": _ACCESS_TOKEN,
            }
            if self._config.audience:
                form["audience"] = self._config.audience
            headers, refresh_at = await self._endpoint.token(form)
            if principal in self._subjects:
                self._exchanged[principal] = (refresh_at, headers)
            return headers


def identity_for(
    route: str, config: UpstreamConfig, http: Callable[[], aiohttp.ClientSession]
) -> Identity:
    """The identity a route's upstream requests carry, by `upstream.identity.mode`.

    Raises:
        ValueError: a signing key is unusable (the message names the key).
    """
    ident = config.identity
    if ident.mode == "signed_assertion":
        return SignedAssertion(ident, route, config.url or "")
    if ident.mode == "client_credentials":
        return ClientCredentials(ident, http)
    if ident.mode == "token_exchange":
        return TokenExchange(ident, http)
    return NoIdentity()
