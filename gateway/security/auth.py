"""Who is calling: the HTTP Authorization header checked against one `AuthConfig`.

An `Authenticator` is built once per config. It reads key files then, so a bad file stops
start-up instead of failing every request. `authenticate()` runs on every request. An API
key is hashed once and its SHA-256 digest looked up among the configured ones, whatever
their number (the digest of a guess is unpredictable, so the lookup's time tells a guesser
nothing that leads to a key). A JWT is
verified by `jwt_verify` with the configured algorithms only; an OAuth access token the
same way, for the route's resource (`oauth`), or, when it is not a JWT and the provider offers
it, by RFC 7662 introspection (`introspection`); it carries the scopes it grants. Failures
raise `AuthError`, whose reason is safe to log and to return because it never contains the
credential.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Literal

import jwt

from gateway.config import AuthConfig
from gateway.security.errors import MISSING_TOKEN, AuthError
from gateway.security.introspection import Introspector
from gateway.security.jwt_verify import JwtVerifier, principal_of
from gateway.security.oauth import ProtectedResource, scopes_of

#: Far above any real token (identity providers' JWTs are a few kB), far below what parsing
#: would cost anything; aiohttp refuses a header over 8 kB before this is reached.
_MAX_TOKEN_CHARS = 16 * 1024


@dataclass(frozen=True, slots=True)
class Principal:
    """An authenticated caller, and how it proved who it is: made by the authenticator from
    credentials it has checked, and read on every request (a dataclass, as a `Task` is)."""

    name: str
    method: Literal["api_key", "jwt", "oauth"]
    #: What an OAuth access token grants (`scope` or `scp`); empty for other methods.
    scopes: frozenset[str] = frozenset()


class Authenticator:
    """Checks bearer credentials against one `AuthConfig`. Build it once and call it per request."""

    def __init__(
        self,
        config: AuthConfig,
        resource: ProtectedResource | None = None,
        section: str | None = None,
    ) -> None:
        """Read the keys the config names, so no request waits on a file. Mode oauth needs
        the route's `resource`: tokens must be issued for it. `section` is where the file
        writes the section of the mode (`routes[2].auth.jwt`; by default the gateway's own,
        `auth.jwt`), for messages naming its keys.

        Raises:
            ValueError: a key file is missing or unusable, or the HS256 secret is too short;
                the message names the config key and the file.
        """
        self._mode = config.mode
        # Principals are built here, so a request for a known key allocates nothing. A key
        # names one principal: `AuthConfig` refuses one listed for two.
        self._api_keys = {
            key.digest: Principal(name=key.principal, method="api_key") for key in config.api_keys
        }
        self._jwt: JwtVerifier | None = None
        self._oauth: JwtVerifier | None = None
        self._introspection: Introspector | None = None
        self._tenant_claim: str | None = None
        if config.mode == "jwt":
            assert config.jwt is not None  # AuthConfig's validator guarantees it
            self._jwt = JwtVerifier(config.jwt, section=section or "auth.jwt")
        if config.mode == "oauth":
            assert config.oauth is not None and resource is not None
            section = section or "auth.oauth"
            self._oauth = JwtVerifier(config.oauth.verification(), resource.audiences, section)
            self._tenant_claim = config.oauth.tenant_claim
            if config.oauth.introspection is not None:
                self._introspection = Introspector(
                    config.oauth.introspection,
                    issuer=config.oauth.issuer,
                    audiences=resource.audiences,
                    leeway_seconds=config.oauth.leeway_seconds,
                    section=section,
                )

    @property
    def required(self) -> bool:
        return self._mode != "none"

    async def authenticate(self, authorization: str | None) -> Principal | None:
        """Return the caller named by the Authorization header value, or None in mode "none".

        Raises:
            AuthError: the credentials are missing or were not accepted.
            IdentityProviderUnavailable: `jwks_url` is needed but cannot be fetched, or the
                introspection endpoint cannot answer.
        """
        if self._mode == "none":
            return None
        token = bearer_token(authorization)
        if self._introspection is not None and not _is_jwt(token):
            return self._from_access_token(await self._introspection.claims(token))
        if self._oauth is not None:
            return self._from_access_token(await self._oauth.claims(token))
        if self._jwt is not None:
            return Principal(name=await self._jwt.verify(token), method="jwt")
        return self._match_api_key(token)

    def _from_access_token(self, claims: dict[str, object]) -> Principal:
        assert self._oauth is not None
        name = principal_of(claims, self._oauth.principal_claim)
        if self._tenant_claim is not None:
            # The same subject in two tenants is two callers, who must not see each other's tasks.
            name = f"{principal_of(claims, self._tenant_claim)}/{name}"
        try:
            scopes = scopes_of(claims)
        except ValueError as exc:
            raise AuthError(str(exc)) from None
        return Principal(name=name, method="oauth", scopes=scopes)

    def _match_api_key(self, token: str) -> Principal:
        found = self._api_keys.get(hashlib.sha256(token.encode()).digest())
        if found is None:
            raise AuthError("unknown API key")
        return found


def _is_jwt(token: str) -> bool:
    """A JWS in compact form: three parts, the first a JSON header. Anything else (an opaque
    string, or an encrypted JWT, which the gateway cannot read) goes to introspection."""
    if token.count(".") != 2:
        return False
    try:
        jwt.get_unverified_header(token)
    except jwt.PyJWTError:
        return False
    return True


def bearer_token(authorization: str | None) -> str:
    """The token of an `Authorization: Bearer` value.

    Raises:
        AuthError: there is none, or it is too long or not ASCII.
    """
    if authorization is None or not authorization.strip():
        raise AuthError(MISSING_TOKEN)
    if len(authorization) > _MAX_TOKEN_CHARS:
        raise AuthError("token too long")
    # "Bearer", in any case, one or more spaces, the token. RFC 6750's credentials are ASCII:
    # refusing anything else (and whitespace) here means the token always encodes, and
    # non-ASCII letters cannot case-fold into "Bearer". (String methods, not a regular
    # expression: this runs for every request, and the regex engine cost 3,000 instructions.)
    scheme, _, token = authorization.strip().partition(" ")
    token = token.lstrip(" ")
    if not (scheme.isascii() and scheme.lower() == "bearer" and visible_ascii(token)):
        raise AuthError("expected Authorization: Bearer <token>")
    return token


def visible_ascii(text: str) -> bool:
    """Whether `text` is one or more visible ASCII characters (\\x21 to \\x7e): no space, no
    control character, nothing beyond ASCII."""
    return bool(text) and text.isascii() and text.isprintable() and " " not in text
