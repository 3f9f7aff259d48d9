"""Who the upstream is told calls: headers the gateway adds to every upstream HTTP request.

The client's own token is meant for the gateway (its audience is the route's resource), so
it is not passed on (MCP security best practices: no token passthrough). Instead a route may
send a short-lived JWT the gateway signs, naming the principal and the route
(`SignedAssertion`), a token the gateway obtains for itself from an authorization server
with the client credentials grant (`ClientCredentials`), or a token for the caller that the
gateway obtains by exchanging the caller's own (`TokenExchange`, RFC 8693); those two, from
an authorization server, are `token_grants`'. Messages name the keys where the file writes them
(`routes[2].upstream.identity.key_env`), never a secret.
"""

from __future__ import annotations

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
from gateway.upstream.token_grants import ClientCredentials, TokenExchange, bearer

#: Assertions kept for reuse, one per principal; the least recently used goes first.
_KEPT_ASSERTIONS = 1024


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


class SignedAssertion:
    """A JWT per principal: iss, aud, sub (the principal), route, iat, exp, jti."""

    def __init__(
        self,
        config: UpstreamIdentity,
        route: str,
        url: str,
        key: str,
        clock: Callable[[], float] = time.time,
    ) -> None:
        """`key` is where the file writes `config` (`routes[2].upstream.identity`).

        Raises:
            ValueError: the key is unusable; the message names `key_env`, never the key.
        """
        self._config = config
        self._route = route
        self._audience = config.audience or url
        self._clock = clock
        self._key: Any = _signing_key(config, f"{key}.key_env")
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
        headers = bearer(self._config, token)
        self._kept[principal] = (now + lifetime / 2, headers)
        if len(self._kept) > _KEPT_ASSERTIONS:
            self._kept.popitem(last=False)
        return headers


def _signing_key(config: UpstreamIdentity, key_env: str) -> Any:
    where = f"{key_env}: {config.key_env}"
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


def identity_for(
    route: str,
    config: UpstreamConfig,
    http: Callable[[], aiohttp.ClientSession],
    key: Callable[[], str],
) -> Identity:
    """The identity a route's upstream requests carry, by `upstream.identity.mode`. `key()`
    says where the file writes `config.identity` now (`routes[2].upstream.identity`): a
    reload may move the route and keep its upstream, identity and all.

    Raises:
        ValueError: a signing key is unusable (the message names the key).
    """
    ident = config.identity
    if ident.mode == "signed_assertion":
        return SignedAssertion(ident, route, config.url or "", key())
    if ident.mode == "client_credentials":
        return ClientCredentials(ident, http, key)
    if ident.mode == "token_exchange":
        return TokenExchange(ident, http, key)
    return NoIdentity()
