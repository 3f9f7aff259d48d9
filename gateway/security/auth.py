"""Who is calling: the HTTP Authorization header checked against one `AuthConfig`.

An `Authenticator` is built once per config. It reads key files then, so a bad file stops
start-up instead of failing every request. `authenticate()` runs on every request. An API
key is hashed once and compared in constant time with every configured digest. A JWT is
verified by `jwt_verify` with the configured algorithms only. Failures raise `AuthError`,
whose reason is safe to log and to return because it never contains the credential.
"""

from __future__ import annotations

import hashlib
import hmac
import re
from typing import Literal

from pydantic import BaseModel, ConfigDict

from gateway.config import AuthConfig
from gateway.security.errors import MISSING_TOKEN, AuthError
from gateway.security.jwt_verify import JwtVerifier

# RFC 6750's credentials are ASCII. Refusing anything else (and whitespace) here means the
# token always encodes, and non-ASCII letters cannot case-fold into "Bearer".
_BEARER = re.compile(r"Bearer +([\x21-\x7e]+)", re.IGNORECASE | re.ASCII)


class Principal(BaseModel):
    """An authenticated caller, and how it proved who it is."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    method: Literal["api_key", "jwt"]


class Authenticator:
    """Checks bearer credentials against one `AuthConfig`. Build it once and call it per request."""

    def __init__(self, config: AuthConfig) -> None:
        """Read the keys the config names, so no request waits on a file.

        Raises:
            ValueError: a key file is missing or unusable, or the HS256 secret is too short;
                the message names the config key and the file.
        """
        self._mode = config.mode
        # Principals are built here, so a request for a known key allocates nothing.
        self._api_keys = tuple(
            (key.digest, Principal(name=key.principal, method="api_key")) for key in config.api_keys
        )
        self._jwt: JwtVerifier | None = None
        if config.mode == "jwt":
            assert config.jwt is not None  # AuthConfig's validator guarantees it
            self._jwt = JwtVerifier(config.jwt)

    @property
    def required(self) -> bool:
        return self._mode != "none"

    async def authenticate(self, authorization: str | None) -> Principal | None:
        """Return the caller named by the Authorization header value, or None in mode "none".

        Raises:
            AuthError: the credentials are missing or were not accepted.
            IdentityProviderUnavailable: `jwks_url` is needed but cannot be fetched.
        """
        if self._mode == "none":
            return None
        token = _bearer_token(authorization)
        if self._jwt is not None:
            return Principal(name=await self._jwt.verify(token), method="jwt")
        return self._match_api_key(token)

    def _match_api_key(self, token: str) -> Principal:
        digest = hashlib.sha256(token.encode()).digest()
        found: Principal | None = None
        for key_digest, principal in self._api_keys:
            # No early exit, so the time taken does not reveal which key matched.
            if hmac.compare_digest(digest, key_digest) and found is None:
                found = principal
        if found is None:
            raise AuthError("unknown API key")
        return found


def _bearer_token(authorization: str | None) -> str:
    if authorization is None or not authorization.strip():
        raise AuthError(MISSING_TOKEN)
    match = _BEARER.fullmatch(authorization.strip())
    if match is None:
        raise AuthError("expected Authorization: Bearer <token>")
    return match.group(1)
