"""How a route's HTTP upstream learns who calls, without the client's own token (MCP security
best practices forbid passing a token meant for the gateway on).

`static` (the default) sends `upstream.headers` only. `signed_assertion` adds a short-lived
JWT signed by the gateway naming the principal and the route. `client_credentials` adds a token
the gateway obtains for itself (RFC 6749 section 4.4). `token_exchange` adds a token for the
caller that the gateway obtains by exchanging the caller's own (RFC 8693). `passthrough` copies
the client's own `Authorization`, an opt-in the gateway warns about at start-up.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, PrivateAttr, ValidationInfo, field_validator, model_validator

from gateway.config.base import Section, refusal, secret_from_env
from gateway.config.tokens import ScopeToken, http_url

_ENV_NAME = r"^[A-Za-z_][A-Za-z0-9_]*$"
_HEADER_NAME = r"^[!#$%&'*+.^_`|~0-9A-Za-z-]{1,64}$"

#: The keys each mode reads; a key of another mode is refused, so a typo cannot go unnoticed.
_KEYS = {
    "static": set(),
    "passthrough": set(),
    "signed_assertion": {
        "key_env", "algorithm", "key_id", "issuer", "audience", "lifetime_seconds"
    },
    "client_credentials": {
        "token_url", "client_id", "client_secret_env", "scopes", "resource", "auth_method"
    },
    "token_exchange": {
        "token_url", "client_id", "client_secret_env", "scopes", "resource", "auth_method",
        "audience",
    },
}  # fmt: skip
#: The modes that ask a token endpoint.
TOKEN_MODES = ("client_credentials", "token_exchange")


class UpstreamIdentity(Section):
    mode: Literal[
        "static", "signed_assertion", "client_credentials", "token_exchange", "passthrough"
    ] = "static"
    #: The header the assertion or token goes in; as `Authorization` it is `Bearer <token>`.
    header: str = Field("Authorization", pattern=_HEADER_NAME)
    # signed_assertion
    #: The variable holding the signing key: an HS256 secret (32 bytes or more), or for
    #: RS256/ES256 a PEM private key.
    key_env: str | None = Field(None, pattern=_ENV_NAME)
    algorithm: Literal["HS256", "RS256", "ES256"] = "HS256"
    key_id: str | None = Field(None, min_length=1, max_length=200)
    issuer: str = Field("mcp-task-gateway", min_length=1)
    #: signed_assertion: the assertion's `aud` (null: the upstream's URL); token_exchange: the
    #: RFC 8693 `audience` asked for (null: none).
    audience: str | None = Field(None, min_length=1)
    lifetime_seconds: int = Field(300, ge=10, le=3600)
    # client_credentials and token_exchange
    token_url: str | None = None
    client_id: str | None = Field(None, min_length=1)
    client_secret_env: str | None = Field(None, pattern=_ENV_NAME)
    scopes: tuple[ScopeToken, ...] = ()
    #: RFC 8707 `resource` sent with the token request (the upstream's resource URL).
    resource: str | None = None
    auth_method: Literal["client_secret_basic", "client_secret_post"] = "client_secret_basic"

    _secret: str = PrivateAttr("")

    @property
    def secret(self) -> str:
        """The signing key or client secret, read from the environment when loaded."""
        return self._secret

    @field_validator("token_url", "resource")
    @classmethod
    def _url(cls, value: str | None) -> str | None:
        return None if value is None else http_url(value)

    @model_validator(mode="after")
    def _mode_keys(self, info: ValidationInfo) -> UpstreamIdentity:
        # A default written out (as config/gateway.yaml does) is harmless; a value is not.
        fields = type(self).model_fields
        for key in sorted(self.model_fields_set - {"mode", "header"} - _KEYS[self.mode]):
            if getattr(self, key) != fields[key].get_default(call_default_factory=True):
                owners = " or ".join(mode for mode, keys in _KEYS.items() if key in keys)
                raise refusal(key, f"is for mode {owners}, not {self.mode}")
        if self.mode in ("static", "passthrough") and self.header != fields["header"].default:
            raise refusal("header", "is for the modes that add a credential")
        if self.mode == "signed_assertion":
            if self.key_env is None:
                raise refusal("key_env", "mode signed_assertion needs the variable of its key")
            self._secret = secret_from_env(info, self.key_env)
        if self.mode in TOKEN_MODES:
            for key in ("token_url", "client_id", "client_secret_env"):
                if getattr(self, key) is None:
                    raise refusal(key, f"required by mode {self.mode}")
            assert self.client_secret_env is not None
            self._secret = secret_from_env(info, self.client_secret_env)
        return self
