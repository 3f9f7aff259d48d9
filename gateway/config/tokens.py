"""The sections of bearer tokens the gateway verifies: JWTs (a secret, a PEM key, a JWK set
file or URL) and OAuth access tokens (the gateway as an OAuth 2.1 resource server, with RFC
7662 introspection for opaque ones). `auth.AuthConfig` chooses among them and API keys.

Secrets named by `secret_env` and `client_secret_env` are read when the settings are loaded
(from the environment the loader is given).
"""

from __future__ import annotations

from typing import Annotated, Literal
from urllib.parse import urlsplit, urlunsplit

from pydantic import Field, PrivateAttr, ValidationInfo, field_validator, model_validator

from gateway.config.base import Section, refusal, secret_from_env


class JwtConfig(Section):
    algorithms: tuple[Literal["HS256", "RS256", "ES256"], ...] = ("HS256",)
    secret_env: str | None = Field(None, pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")
    public_key_file: str | None = None
    jwks_file: str | None = None
    #: An identity provider's JWK set, fetched when first needed and cached.
    jwks_url: str | None = None
    jwks_cache_seconds: float = Field(300.0, gt=0)
    #: At most one fetch per this many seconds for tokens with an unknown `kid` and after a
    #: failed fetch, so made-up key ids cannot hammer the identity provider.
    jwks_cooldown_seconds: float = Field(30.0, ge=0)
    issuer: str | None = None
    audience: str | None = None
    #: False accepts tokens issued for any audience; it must be said, never implied.
    verify_audience: bool = True
    principal_claim: str = "sub"
    leeway_seconds: float = Field(0.0, ge=0)

    _secret: str = PrivateAttr("")

    @property
    def secret(self) -> str:
        """The HS256 shared secret, read from `secret_env` when the settings were loaded."""
        return self._secret

    @model_validator(mode="after")
    def _keys_for_algorithms(self, info: ValidationInfo) -> JwtConfig:
        if self.verify_audience and self.audience is None:
            raise refusal(
                "audience",
                "required: the value of `aud` your identity provider puts in tokens for this "
                "gateway (`verify_audience: false` accepts tokens for any audience instead)",
            )
        if not self.verify_audience and self.audience is not None:
            raise refusal("verify_audience", "false, but `audience` is set: remove one of them")
        sources = [
            name
            for name in ("public_key_file", "jwks_file", "jwks_url")
            if getattr(self, name) is not None
        ]
        if "HS256" in self.algorithms:
            if self.secret_env is None:
                raise refusal(
                    "secret_env", "required for HS256: the variable holding the shared secret"
                )
            if sources:
                raise refusal(sources[0], "is for RS256/ES256; HS256 uses `secret_env`")
            self._secret = secret_from_env(info, self.secret_env)
        asymmetric = {"RS256", "ES256"} & set(self.algorithms)
        if asymmetric and len(sources) != 1:
            raise ValueError(
                "RS256/ES256 need exactly one of `public_key_file`, `jwks_file` or `jwks_url`"
            )
        if "HS256" in self.algorithms and asymmetric:
            # A shared secret and a public key side by side invite algorithm confusion.
            raise ValueError("do not mix HS256 with RS256/ES256 on one authenticator")
        if self.jwks_url is not None:
            url = urlsplit(self.jwks_url)
            if url.scheme not in ("http", "https") or not url.hostname:
                raise refusal("jwks_url", "must be an http:// or https:// URL")
        return self


#: RFC 6749 section 3.3's scope-token: no space, no `"` and no `\\`, so a scope can be put in a
#: quoted WWW-Authenticate parameter as it is.
ScopeToken = Annotated[str, Field(pattern=r"^[\x21\x23-\x5b\x5d-\x7e]+$", max_length=200)]
ClaimName = Annotated[str, Field(min_length=1, max_length=200)]


def http_url(value: str, *, canonical: bool = False) -> str:
    """`value`, checked to be an absolute http(s) URL with a host, no query, fragment or
    credentials. `canonical`: the scheme and host lower-cased and a trailing `/` dropped, as
    clients write resource URLs (RFC 8707); otherwise as written (an issuer is compared to
    `iss` as a plain string).

    Raises:
        ValueError: saying what is wrong, never quoting a value that could hold a secret.
    """
    url = urlsplit(value)
    if url.scheme.lower() not in ("http", "https") or not url.hostname:
        raise ValueError("must be an absolute http:// or https:// URL")
    if url.username is not None or url.password is not None:
        raise ValueError("must not hold a user name or password")
    if url.query or url.fragment or "?" in value or "#" in value:
        raise ValueError("must have no query (?...) and no fragment (#...)")
    if not canonical:
        return value
    return urlunsplit((url.scheme.lower(), url.netloc.lower(), url.path.rstrip("/"), "", ""))


class IntrospectionConfig(Section):
    """RFC 7662 token introspection at the identity provider, for access tokens that are not
    JWTs (opaque strings); the gateway authenticates to it as a confidential client."""

    url: str
    client_id: str = Field(min_length=1)
    #: The variable holding the client secret (never written in the file).
    client_secret_env: str = Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")
    auth_method: Literal["client_secret_basic", "client_secret_post"] = "client_secret_basic"
    #: An active answer is used until the token's `exp`, and at most this long (a revoked
    #: token is accepted this long at worst); 0: every request asks.
    cache_seconds_max: float = Field(300.0, ge=0, le=86400)

    _secret: str = PrivateAttr("")

    @property
    def secret(self) -> str:
        """The client secret, read from `client_secret_env` when the settings were loaded."""
        return self._secret

    @field_validator("url")
    @classmethod
    def _url(cls, value: str) -> str:
        return http_url(value)

    @model_validator(mode="after")
    def _read_secret(self, info: ValidationInfo) -> IntrospectionConfig:
        try:
            self._secret = secret_from_env(info, self.client_secret_env)
        except ValueError as exc:
            raise refusal("client_secret_env", str(exc)) from None
        return self


class OAuthConfig(Section):
    """The gateway as an OAuth 2.1 resource server (MCP authorization, RFC 9728, RFC 8707):
    each route is a protected resource at PUBLIC_URL + its path, with its own metadata, and
    accepts only access tokens (JWTs) issued by `issuer` for that resource."""

    issuer: str
    #: The issuer's JWK set; fetched when first needed, cached, fetched again for a new `kid`.
    jwks_url: str
    #: What clients are sent to for tokens (RFC 9728 `authorization_servers`); default [issuer].
    authorization_servers: tuple[str, ...] = ()
    #: Every token must carry these scopes (`scope` or `scp` claim); a route may add more.
    required_scopes: tuple[ScopeToken, ...] = ()
    #: Listed in the metadata as `scopes_supported`; null: every scope the routes require.
    scopes_supported: tuple[ScopeToken, ...] | None = None
    principal_claim: ClaimName = "sub"
    #: A claim naming the caller's tenant: the principal becomes TENANT/PRINCIPAL, so the same
    #: subject in two tenants is two callers.
    tenant_claim: ClaimName | None = None
    #: The gateway's URL as clients reach it (behind a proxy: the proxy's); route resources are
    #: PUBLIC_URL + the route's path, e.g. https://mcp.example.com/reports/mcp.
    public_url: str
    algorithms: tuple[Literal["RS256", "ES256"], ...] = Field(("RS256", "ES256"), min_length=1)
    #: Clock skew allowed on `exp`, `nbf` and `iat`.
    leeway_seconds: float = Field(30.0, ge=0, le=300)
    jwks_cache_seconds: float = Field(300.0, gt=0)
    jwks_cooldown_seconds: float = Field(30.0, ge=0)
    #: The gateway as a whole (PUBLIC_URL) is also a resource: its metadata is at the root
    #: form /.well-known/oauth-protected-resource, and tokens issued for it are accepted on
    #: every route that uses this section (besides tokens for the route itself).
    shared_resource: bool = False
    #: Opaque access tokens (anything but a JWT) are checked at the provider's RFC 7662
    #: introspection endpoint; null: every token must be a JWT.
    introspection: IntrospectionConfig | None = None

    @field_validator("issuer", "jwks_url")
    @classmethod
    def _url(cls, value: str) -> str:
        return http_url(value)

    @field_validator("public_url")
    @classmethod
    def _public_url(cls, value: str) -> str:
        return http_url(value, canonical=True)

    @field_validator("authorization_servers")
    @classmethod
    def _urls(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        return tuple(http_url(url) for url in value)

    @property
    def servers(self) -> tuple[str, ...]:
        """The authorization servers clients are sent to."""
        return self.authorization_servers or (self.issuer,)

    def verification(self) -> JwtConfig:
        """The JWT checks every token gets (the audience, which differs per route, apart)."""
        return JwtConfig(
            algorithms=self.algorithms,
            jwks_url=self.jwks_url,
            jwks_cache_seconds=self.jwks_cache_seconds,
            jwks_cooldown_seconds=self.jwks_cooldown_seconds,
            issuer=self.issuer,
            verify_audience=False,  # the verifier is given each route's resource instead
            principal_claim=self.principal_claim,
            leeway_seconds=self.leeway_seconds,
        )
