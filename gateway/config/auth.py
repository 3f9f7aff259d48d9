"""Who may call: API keys, JWT (a secret, a PEM key, a JWK set file or URL), or nobody.

Secrets named by `key_env` and `secret_env` are read when the settings are loaded (from the
environment the loader is given); of an API key only its SHA-256 is kept.
"""

from __future__ import annotations

import hashlib
from typing import Any, Literal
from urllib.parse import urlsplit

from pydantic import (
    Field,
    PrivateAttr,
    ValidationInfo,
    model_validator,
)

from gateway.config.base import Section, refusal, secret_from_env


class ApiKey(Section):
    """One client key: its SHA-256 (hex) in the file, or the key itself in an env variable."""

    principal: str = Field(min_length=1)
    sha256: str | None = Field(None, pattern=r"^[0-9a-fA-F]{64}$")
    key_env: str | None = Field(None, pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")

    _digest: bytes = PrivateAttr(b"")

    @model_validator(mode="after")
    def _one_source(self, info: ValidationInfo) -> ApiKey:
        if (self.sha256 is None) == (self.key_env is None):
            raise ValueError("give exactly one of `sha256` or `key_env`")
        if self.sha256 is not None:
            self._digest = bytes.fromhex(self.sha256)
        else:
            assert self.key_env is not None
            key = secret_from_env(info, self.key_env)
            self._digest = hashlib.sha256(key.encode()).digest()
        return self

    @property
    def digest(self) -> bytes:
        """SHA-256 of the key: all the gateway keeps of it."""
        return self._digest


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
                raise ValueError(
                    "HS256 needs `secret_env` (the variable holding the shared secret)"
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


class AuthConfig(Section):
    """Who may call. Without `mode`, the credentials written decide it: `api_keys` means
    api_keys, `jwt` means jwt. Turning authentication off takes `mode: none` and no credentials."""

    mode: Literal["none", "api_keys", "jwt"] = "none"
    api_keys: tuple[ApiKey, ...] = ()
    jwt: JwtConfig | None = None
    #: Without authentication callers cannot be told apart, so the spec says tasks/list
    #: SHOULD NOT be offered; an operator may still opt in.
    list_tasks_without_auth: bool = False

    @model_validator(mode="before")
    @classmethod
    def _infer_mode(cls, data: Any) -> Any:
        # Credentials written without `mode` must never mean "no authentication".
        if isinstance(data, dict) and "mode" not in data:
            keys, token = bool(data.get("api_keys")), data.get("jwt") is not None
            if keys != token:  # both written is refused below, naming both
                return {**data, "mode": "api_keys" if keys else "jwt"}
        return data

    @model_validator(mode="after")
    def _mode_settings(self) -> AuthConfig:
        if self.api_keys and self.jwt is not None:
            raise ValueError(
                "`api_keys` and `jwt` are both written: an auth section uses one method "
                "(a route's own `auth` may use the other)"
            )
        if self.mode == "none":
            written = "api_keys" if self.api_keys else "jwt" if self.jwt is not None else None
            if written is not None:
                raise refusal(
                    written,
                    "written, but `mode: none` turns authentication off: remove the "
                    "credentials to run without authentication, or remove `mode: none`",
                )
        if self.mode == "api_keys" and not self.api_keys:
            raise refusal("api_keys", "mode api_keys needs at least one entry here")
        if self.mode == "jwt" and self.jwt is None:
            raise refusal("jwt", "mode jwt needs this section")
        return self

    @property
    def inherits(self) -> bool:
        """True for a section with neither `mode` nor credentials: on a route, it keeps the
        gateway's authentication (opening a route takes `mode: none`)."""
        return "mode" not in self.model_fields_set
