"""Who may call: API keys, JWT (a secret, a PEM key, a JWK set file or URL), OAuth access
tokens (the gateway as an OAuth 2.1 resource server), or nobody. The JWT and OAuth sections
are in `tokens`.

Secrets named by `key_env` are read when the settings are loaded (from the environment the
loader is given); of an API key only its SHA-256 is kept.
"""

from __future__ import annotations

import hashlib
from typing import Any, Literal

from pydantic import Field, PrivateAttr, ValidationInfo, model_validator

from gateway.config.base import Section, refusal, secret_from_env
from gateway.config.tokens import JwtConfig, OAuthConfig


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


_CREDENTIALS = ("api_keys", "jwt", "oauth")


class AuthConfig(Section):
    """Who may call. Without `mode`, the credentials written decide it: `api_keys` means
    api_keys, `jwt` means jwt, `oauth` means oauth. Turning authentication off takes
    `mode: none` and no credentials."""

    mode: Literal["none", "api_keys", "jwt", "oauth"] = "none"
    api_keys: tuple[ApiKey, ...] = ()
    jwt: JwtConfig | None = None
    oauth: OAuthConfig | None = None
    #: Without authentication callers cannot be told apart, so the spec says tasks/list
    #: SHOULD NOT be offered; an operator may still opt in.
    list_tasks_without_auth: bool = False

    @model_validator(mode="before")
    @classmethod
    def _infer_mode(cls, data: Any) -> Any:
        # Credentials written without `mode` must never mean "no authentication".
        if isinstance(data, dict) and "mode" not in data:
            written = [
                key
                for key in _CREDENTIALS
                if (data.get(key) if key == "api_keys" else data.get(key) is not None)
            ]
            if len(written) == 1:  # several written is refused below, naming them
                return {**data, "mode": written[0]}
        return data

    def _written(self) -> list[str]:
        return [key for key in _CREDENTIALS if getattr(self, key)]

    @model_validator(mode="after")
    def _mode_settings(self) -> AuthConfig:
        written = self._written()
        if len(written) > 1:
            both = " and ".join(f"`{key}`" for key in written)
            raise ValueError(
                f"{both} are both written: an auth section uses one method "
                "(a route's own `auth` may use another)"
            )
        if self.mode == "none":
            if written:
                raise refusal(
                    written[0],
                    "written, but `mode: none` turns authentication off: remove the "
                    "credentials to run without authentication, or remove `mode: none`",
                )
        if self.mode == "api_keys" and not self.api_keys:
            raise refusal("api_keys", "mode api_keys needs at least one entry here")
        owners: dict[bytes, str] = {}
        for key in self.api_keys:
            if owners.setdefault(key.digest, key.principal) != key.principal:
                raise refusal(
                    "api_keys",
                    f"one key is listed for both {owners[key.digest]!r} and {key.principal!r}: "
                    "a key names one caller",
                )
        if self.mode == "jwt" and self.jwt is None:
            raise refusal("jwt", "mode jwt needs this section")
        if self.mode == "oauth" and self.oauth is None:
            raise refusal(
                "oauth",
                "mode oauth needs this section: {issuer: URL, jwks_url: URL, public_url: URL}",
            )
        if written and written[0] != self.mode:
            raise refusal(written[0], f"written, but the mode is {self.mode}")
        return self

    @property
    def inherits(self) -> bool:
        """True for a section with neither `mode` nor credentials: on a route, it keeps the
        gateway's authentication (opening a route takes `mode: none`)."""
        return "mode" not in self.model_fields_set
