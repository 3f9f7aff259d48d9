"""JWT verification: the configured key (a shared secret, or a PEM key or JWK set file, read
and checked by `jwt_keys`) or an identity provider's JWK set at `jwks_url`.

A JWK set at `jwks_url` is the one thing fetched at request time: PyJWKClient fetches and
caches it with blocking I/O, so it runs in a worker thread, one fetch at a time, and at most
once per cooldown for unknown key ids or after a failure. While the set cannot be fetched,
requests that need it get `IdentityProviderUnavailable` (503), not a 401: their tokens may
be fine, and a 401 would send well-behaved clients back to the identity provider.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Sequence
from typing import Any

import jwt
from jwt.types import Options

from gateway.config import JwtConfig
from gateway.security.errors import AuthError, IdentityProviderUnavailable
from gateway.security.jwt_keys import checked, load_jwks, load_pem

log = logging.getLogger(__name__)

# RFC 7518 §3.2: an HS256 key MUST be at least as long as the hash output. PyJWT would only
# warn about a shorter one, and it would warn on every request.
_MIN_HS256_SECRET_BYTES = 32

# The first entry that matches wins. InvalidSignatureError is a subclass of DecodeError.
_REASONS: tuple[tuple[type[jwt.PyJWTError], str], ...] = (
    (jwt.ExpiredSignatureError, "token expired"),
    (jwt.ImmatureSignatureError, "token not yet valid"),
    (jwt.InvalidAudienceError, "wrong audience"),
    (jwt.InvalidIssuerError, "wrong issuer"),
    (jwt.InvalidSignatureError, "invalid signature"),
    (jwt.InvalidAlgorithmError, "algorithm not allowed"),
    (jwt.DecodeError, "malformed token"),
)


#: One JWKS fetch may take this long; the requests that need it wait as long at most.
_JWKS_TIMEOUT_SECONDS = 5.0


class JwtVerifier:
    """The JWT half of `Authenticator`: the key, or key set, that verifies tokens."""

    def __init__(
        self, config: JwtConfig, audiences: Sequence[str] = (), section: str = "auth.jwt"
    ) -> None:
        """`audiences`, when given, replace `config.audience`: a token must name one of them
        (an OAuth route's resource, RFC 8707). `section` is where the file writes `config`
        (`routes[2].auth.jwt`, `auth.oauth`): messages name its keys there."""
        self._config = config
        self._algorithms = list(config.algorithms)
        self._audience: str | list[str] | None = list(audiences) or config.audience
        self._options: Options = {
            "require": ["exp", config.principal_claim],
            # Off only by an explicit `verify_audience: false` (config requires `audience`
            # otherwise); without an audience PyJWT would refuse every token that has an `aud`.
            "verify_aud": config.verify_audience or bool(audiences),
        }
        self._key: str | jwt.PyJWK | None = None  # HS256 secret or PEM key: used for every token
        self._by_kid: dict[str, jwt.PyJWK] = {}
        self._sole: jwt.PyJWK | None = None  # the JWKS key that kid-less tokens may use
        self._remote: _RemoteKeys | None = None
        if "HS256" in config.algorithms:  # config forbids mixing it with RS256/ES256
            if len(config.secret.encode()) < _MIN_HS256_SECRET_BYTES:
                raise ValueError(
                    f"{section}.secret_env: the HS256 secret in {config.secret_env} must be at "
                    f"least {_MIN_HS256_SECRET_BYTES} bytes (RFC 7518 §3.2)"
                )
            self._key = config.secret
        elif config.public_key_file is not None:
            where = f"{section}.public_key_file"
            self._key = load_pem(config.public_key_file, self._algorithms, where)
        elif config.jwks_url is not None:
            self._remote = _RemoteKeys(config.jwks_url, config, f"{section}.jwks_url")
        else:
            assert config.jwks_file is not None  # JwtConfig's validator guarantees one of them
            keys = load_jwks(config.jwks_file, self._algorithms, f"{section}.jwks_file")
            self._by_kid = {key.key_id: key for key in keys if key.key_id is not None}
            self._sole = keys[0] if len(keys) == 1 else None

    @property
    def principal_claim(self) -> str:
        return self._config.principal_claim

    async def verify(self, token: str) -> str:
        """Return the principal claim of a valid token.

        Raises:
            AuthError: the token is malformed, not valid now, or not signed by our key.
            IdentityProviderUnavailable: the `jwks_url` key set is needed and cannot be fetched.
        """
        return principal_of(await self.claims(token), self._config.principal_claim)

    async def claims(self, token: str) -> dict[str, Any]:
        """The claims of a valid token (which has the principal claim, of whatever type).

        Raises:
            AuthError: the token is malformed, not valid now, or not signed by our key.
            IdentityProviderUnavailable: the `jwks_url` key set is needed and cannot be fetched.
        """
        try:
            if self._key is not None:
                key = self._key
            elif self._remote is not None:
                key = await self._remote.key(jwt.get_unverified_header(token).get("kid"))
            else:
                key = self._key_from_set(token)
            claims = jwt.decode(
                token,
                key,
                algorithms=self._algorithms,
                options=self._options,
                audience=self._audience,
                issuer=self._config.issuer,
                leeway=self._config.leeway_seconds,
            )
        except jwt.MissingRequiredClaimError as exc:
            raise AuthError(f"token is missing claim {exc.claim}") from None
        except jwt.PyJWTError as exc:
            # `from None`: PyJWT's messages may quote decoded parts of the token.
            reason = next((r for kind, r in _REASONS if isinstance(exc, kind)), "invalid token")
            raise AuthError(reason) from None
        return claims

    def _key_from_set(self, token: str) -> jwt.PyJWK:
        kid = jwt.get_unverified_header(token).get("kid")
        if kid is None:
            if self._sole is None:
                raise AuthError("token has no key id")
            return self._sole
        key = self._by_kid.get(kid)
        if key is None:
            raise AuthError("unknown key id")
        return key


class _RemoteKeys:
    """The JWK set at `jwks_url`, fetched and cached by PyJWKClient. Its fetches block, so they
    run in a worker thread, one at a time; a key already in its cache is found on the loop."""

    def __init__(self, url: str, config: JwtConfig, config_key: str) -> None:
        self._url = url
        self._config_key = config_key
        self._algorithms = config.algorithms
        # cooldown_duration: an unknown kid forces a refetch at most once per cooldown.
        self._client = jwt.PyJWKClient(
            url,
            lifespan=config.jwks_cache_seconds,
            cooldown_duration=config.jwks_cooldown_seconds,
            timeout=_JWKS_TIMEOUT_SECONDS,
        )
        self._cooldown = config.jwks_cooldown_seconds
        self._lock = asyncio.Lock()
        self._retry_at = 0.0  # time.monotonic() before which a failed fetch is not retried
        self._failing = False  # the outage is logged once, when it starts
        self._warned: set[str] = set()  # kids of unusable keys, each logged once

    async def key(self, kid: object) -> jwt.PyJWK:
        """The key the token's `kid` names, fetching the set when it is not cached.

        Raises:
            AuthError: no kid, or none of the set's keys has it, or that key is unusable.
            IdentityProviderUnavailable: the set was needed and cannot be fetched.
        """
        if not isinstance(kid, str):
            raise AuthError("token has no key id")
        key = self._cached(kid)
        if key is None:
            async with self._lock:  # one fetch at a time; who waited may find it cached
                key = self._cached(kid) or await self._fetch(kid)
        try:
            return checked(key, f"{self._config_key}: {self._url}")
        except ValueError as exc:
            if kid not in self._warned:
                self._warned.add(kid)
                log.warning("key %r: %s", kid, exc)
            raise AuthError("unknown key id") from None

    def _cached(self, kid: str) -> jwt.PyJWK | None:
        cache = self._client.jwk_set_cache
        key_set = cache.get() if cache is not None else None  # None once the lifespan is over
        if key_set is None:
            return None
        # The keys PyJWKClient.get_signing_key would choose from.
        return next(
            (k for k in key_set.keys if k.key_id == kid and k.public_key_use in ("sig", None)),
            None,
        )

    async def _fetch(self, kid: str) -> jwt.PyJWK:
        wait = self._retry_at - time.monotonic()
        if wait > 0:
            raise self._unavailable(wait)
        try:
            key = await asyncio.to_thread(self._client.get_signing_key, kid)
        except jwt.PyJWKClientConnectionError as exc:
            raise self._failed(exc) from None
        except jwt.PyJWKClientError as exc:
            if self._cached_set_is_fresh():  # the set came; the kid is not in it
                self._recovered()
                raise AuthError("unknown key id") from None
            raise self._failed(exc) from None  # the answer was not a JWK set
        except (jwt.PyJWKSetError, ValueError) as exc:  # not JSON, or no usable key in it
            raise self._failed(exc) from None
        self._recovered()
        return key

    def _cached_set_is_fresh(self) -> bool:
        cache = self._client.jwk_set_cache
        return cache is not None and cache.get() is not None

    def _failed(self, exc: Exception) -> IdentityProviderUnavailable:
        self._retry_at = time.monotonic() + self._cooldown
        if not self._failing:
            self._failing = True
            log.warning(
                "%s %s: cannot fetch the key set (%s); tokens that need it get 503 "
                "until a fetch succeeds (retried at most every %gs)",
                self._config_key,
                self._url,
                exc,
                self._cooldown,
            )
        return self._unavailable(self._cooldown)

    def _recovered(self) -> None:
        if self._failing:
            self._failing = False
            log.warning("%s %s: the key set can be fetched again", self._config_key, self._url)

    @staticmethod
    def _unavailable(wait: float) -> IdentityProviderUnavailable:
        return IdentityProviderUnavailable(
            "identity provider unavailable: try again later",
            headers={"Retry-After": str(max(1, math.ceil(wait)))},
        )


def principal_of(claims: dict[str, Any], claim: str) -> str:
    """The value of the principal claim, which must be a non-empty string.

    Raises:
        AuthError: it is not.
    """
    name = claims.get(claim)
    if not isinstance(name, str) or not name:
        raise AuthError(f"claim {claim} must be a non-empty string")
    if "\x00" in name:  # a principal is kept with its tasks, and no store holds a NUL alike
        raise AuthError(f"claim {claim} must not hold a NUL character")
    return name
