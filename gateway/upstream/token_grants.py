"""The tokens an upstream identity obtains from an authorization server (RFC 6749): the
gateway's own (`ClientCredentials`, section 4.4), or one for the caller in exchange for the
caller's own (`TokenExchange`, RFC 8693), both from one `TokenEndpoint`. Each is cached until
shortly before it expires, and fetched by one request at a time. (`identity` holds the other
modes, and picks one by `upstream.identity.mode`.) A token that cannot be had is an error that
names the endpoint's key where the file writes it (`routes[2].upstream.identity.token_url`).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping

import aiohttp

from gateway.config import UpstreamIdentity
from gateway.protocol.errors import UpstreamUnavailable
from gateway.security.client_auth import authenticate_client

# The logger these lines had in `identity`: an operator's log filters still catch them.
log = logging.getLogger("gateway.upstream.identity")

#: A token is fetched again this long before it expires (or at half its life, if sooner).
_REFRESH_MARGIN_SECONDS = 60.0
_TOKEN_TIMEOUT_SECONDS = 10.0


def bearer(config: UpstreamIdentity, token: str) -> dict[str, str]:
    """The header carrying `token` as `config` says (`Authorization: Bearer`, or its own)."""
    value = f"Bearer {token}" if config.header.lower() == "authorization" else token
    return {config.header: value}


class TokenEndpoint:
    """One authorization server's token endpoint, as the gateway's client (RFC 6749)."""

    def __init__(
        self,
        config: UpstreamIdentity,
        http: Callable[[], aiohttp.ClientSession],
        clock: Callable[[], float],
        key: Callable[[], str],
    ) -> None:
        """`key()` says where the file writes `config` now (`routes[2].upstream.identity`)."""
        self._config = config
        self._http = http
        self._clock = clock
        self._key = key

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
            raise self.unavailable(f"cannot reach it ({type(exc).__name__})") from None
        token = body.get("access_token") if isinstance(body, dict) else None
        if not isinstance(token, str) or not token:
            raise self.unavailable(f"no access token in its answer (HTTP {status})")
        assert isinstance(body, dict)
        expires_in = body.get("expires_in")
        lifetime = float(expires_in) if isinstance(expires_in, int | float) else 300.0
        refresh_at = started + max(0.0, min(lifetime / 2, lifetime - _REFRESH_MARGIN_SECONDS))
        return bearer(cfg, token), refresh_at

    def unavailable(self, why: str) -> UpstreamUnavailable:
        """The error, logged, for a token the upstream cannot have (`why`)."""
        message = f"no token for the upstream from {self._key()}.token_url: {why}"
        log.warning("%s", message)
        return UpstreamUnavailable(message)


class ClientCredentials:
    """The gateway's own access token (RFC 6749 section 4.4), the same for every caller."""

    def __init__(
        self,
        config: UpstreamIdentity,
        http: Callable[[], aiohttp.ClientSession],
        key: Callable[[], str],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._endpoint = TokenEndpoint(config, http, clock, key)
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
        key: Callable[[], str],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._config = config
        self._endpoint = TokenEndpoint(config, http, clock, key)
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
                raise self._endpoint.unavailable("no token of the caller to exchange yet")
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
