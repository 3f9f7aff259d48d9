"""Settings: the YAML file, validated once at start-up.

`load_settings(path)` reads YAML, replaces `${VAR}` references with environment values, and
validates the result; every failure names the file and the key path. Components receive
their slice of the settings, never `os.environ`.
"""

from __future__ import annotations

import hashlib
import os
import re
import sys
from pathlib import Path
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    ValidationError,
    ValidationInfo,
    model_validator,
)
from pydantic_core import ErrorDetails, PydanticCustomError

_ENV_REF = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


class ConfigError(Exception):
    """The configuration cannot be used; the message names the file and the key."""


def _refusal(key: str, message: str) -> PydanticCustomError:
    """A model's refusal that `parse_settings` reports at `key` inside the model's path."""
    return PydanticCustomError("config_key", message, {"key": key})


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ListenConfig(_Section):
    host: str = "127.0.0.1"
    port: int = Field(8080, ge=0, le=65535)


class StoreConfig(_Section):
    path: str = "data/gateway.db"
    sweep_interval_seconds: float = Field(30.0, gt=0)


class HttpConfig(_Section):
    allowed_origins: tuple[str, ...] = (
        "http://localhost:*",
        "http://127.0.0.1:*",
        "http://[::1]:*",
    )
    keepalive_seconds: float = Field(15.0, gt=0)
    replay_buffer_events: int = Field(256, ge=1)
    json_window_seconds: float = Field(0.5, ge=0)
    sse_retry_ms: int = Field(1000, ge=0)
    shutdown_grace_seconds: float = Field(10.0, gt=0)
    #: Host names (any port) a request's Host header may carry; `*.example.com` matches
    #: sub-domains, `*` anything. Null: the loopback names when listening on loopback (DNS
    #: rebinding cannot reach us by another name), otherwise no check.
    allowed_hosts: tuple[str, ...] | None = None
    #: A request's head (request line and headers) must arrive within this many seconds of
    #: the connection opening or going idle; its body within body_timeout_seconds.
    header_timeout_seconds: float = Field(10.0, gt=0)
    body_timeout_seconds: float = Field(30.0, gt=0)
    #: Open connections one client address may hold (null: no cap). Behind a reverse proxy
    #: every client shares the proxy's address: raise it or set null there.
    max_connections_per_address: int | None = Field(256, ge=1)
    #: Open client connections in all (null: half the process's file descriptor limit,
    #: which is raised to its hard limit at start, less room for a burst of accepts). At the
    #: cap, a connection still waiting for its request head is closed to make room, so
    #: /healthz and real clients get in.
    max_connections: int | None = Field(None, ge=16)


def _secret_from_env(info: ValidationInfo, name: str) -> str:
    env: dict[str, str] = (info.context or {}).get("env", {})
    value = env.get(name)
    if not value:
        raise ValueError(f"environment variable {name} is not set (or empty)")
    return value


class ApiKey(_Section):
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
            key = _secret_from_env(info, self.key_env)
            self._digest = hashlib.sha256(key.encode()).digest()
        return self

    @property
    def digest(self) -> bytes:
        """SHA-256 of the key: all the gateway keeps of it."""
        return self._digest


class JwtConfig(_Section):
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
            raise _refusal(
                "audience",
                "required: the value of `aud` your identity provider puts in tokens for this "
                "gateway (`verify_audience: false` accepts tokens for any audience instead)",
            )
        if not self.verify_audience and self.audience is not None:
            raise _refusal("verify_audience", "false, but `audience` is set: remove one of them")
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
                raise _refusal(sources[0], "is for RS256/ES256; HS256 uses `secret_env`")
            self._secret = _secret_from_env(info, self.secret_env)
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
                raise _refusal("jwks_url", "must be an http:// or https:// URL")
        return self


class AuthConfig(_Section):
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
                raise _refusal(
                    written,
                    "written, but `mode: none` turns authentication off: remove the "
                    "credentials to run without authentication, or remove `mode: none`",
                )
        if self.mode == "api_keys" and not self.api_keys:
            raise _refusal("api_keys", "mode api_keys needs at least one entry here")
        if self.mode == "jwt" and self.jwt is None:
            raise _refusal("jwt", "mode jwt needs this section")
        return self

    @property
    def inherits(self) -> bool:
        """True for a section with neither `mode` nor credentials: on a route, it keeps the
        gateway's authentication (opening a route takes `mode: none`)."""
        return "mode" not in self.model_fields_set


class Limits(_Section):
    """Abuse limits per principal (per session when no authentication is configured)."""

    active_tasks_per_principal: int | None = Field(1000, ge=1)
    requests_per_second: float | None = Field(100.0, gt=0)
    burst: int = Field(200, ge=1)
    #: Each session can keep one stdio child busy, and only busy children hold a route's
    #: cap: half of the default upstream.max_children leaves the other half to other callers.
    sessions_per_principal: int | None = Field(16, ge=1)
    max_ttl_ms: int | None = Field(None, gt=0)
    max_body_bytes: int = Field(4 * 1024 * 1024, ge=1024)


class LimitsOverride(_Section):
    """A route's changes to the global limits; null keys keep the global value."""

    active_tasks_per_principal: int | None = Field(None, ge=1)
    requests_per_second: float | None = Field(None, gt=0)
    burst: int | None = Field(None, ge=1)
    sessions_per_principal: int | None = Field(None, ge=1)
    max_ttl_ms: int | None = Field(None, gt=0)
    max_body_bytes: int | None = Field(None, ge=1024)


class AuditConfig(_Section):
    #: JSON lines go to this file (rotated), or to stderr when null.
    file: str | None = None
    max_bytes: int = Field(10 * 1024 * 1024, ge=1024)
    backups: int = Field(5, ge=0)
    #: Tool arguments in task_created events: off, as they may hold personal data.
    include_arguments: bool = False


class MetricsConfig(_Section):
    enabled: bool = True
    #: Serve /metrics on its own address (e.g. {host: 0.0.0.0, port: 9464}) instead of the
    #: gateway's; null keeps it on the gateway's listen address.
    listen: ListenConfig | None = None
    #: Require `Authorization: Bearer <token>` with the token from this variable.
    bearer_token_env: str | None = Field(None, pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")
    _token: str = PrivateAttr("")

    @property
    def bearer_token(self) -> str:
        return self._token

    @model_validator(mode="after")
    def _read_token(self, info: ValidationInfo) -> MetricsConfig:
        if self.bearer_token_env is not None:
            self._token = _secret_from_env(info, self.bearer_token_env)
        return self


class SessionsConfig(_Section):
    max_sessions: int = Field(1000, ge=1)
    idle_timeout_seconds: float = Field(3600.0, gt=0)


#: What a stdio child inherits from the gateway's environment, when set: enough to find
#: programs, a home, a locale, a time zone and a temporary directory; no secret.
CHILD_ENV_ALLOWED = (
    "PATH", "HOME", "USER", "LOGNAME", "SHELL", "TERM", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "TMPDIR"
)  # fmt: skip


class UpstreamConfig(_Section):
    transport: Literal["stdio", "streamable_http", "sse"]
    command: tuple[str, ...] | None = None
    env: dict[str, str] = Field(default_factory=dict)
    #: Further variables a stdio child inherits from the gateway's environment, by name.
    inherit_env: tuple[Annotated[str, Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")], ...] = ()
    cwd: str | None = None
    max_children: int = Field(32, ge=1)
    #: A stdio child with no call, task or question this long is stopped (its session
    #: stays); None: only when the cap needs its slot.
    child_idle_seconds: float | None = Field(300.0, gt=0)
    url: str | None = None
    headers: dict[str, str] = Field(default_factory=dict)
    #: Client request headers copied upstream (e.g. [Authorization]); none unless listed.
    forward_headers: tuple[str, ...] = ()
    connect_timeout_seconds: float = Field(10.0, gt=0)
    request_timeout_seconds: float | None = Field(300.0, gt=0)
    _inherited: dict[str, str] = PrivateAttr(default_factory=dict)

    @model_validator(mode="after")
    def _transport_fields(self) -> UpstreamConfig:
        if self.transport == "stdio":
            if not self.command:
                raise ValueError("transport stdio needs `command` (a list: program and args)")
            if self.url is not None:
                raise ValueError("`url` is for streamable_http and sse, not stdio")
        else:
            if not self.url:
                raise ValueError(f"transport {self.transport} needs `url`")
            if self.command is not None:
                raise ValueError("`command` is for stdio only")
        return self

    @model_validator(mode="after")
    def _read_inherited(self, info: ValidationInfo) -> UpstreamConfig:
        if self.transport == "stdio":
            # Read with the file, like ${VAR}; a section built in code (the default demo
            # route) has no loading context and takes the process's environment.
            env = (info.context or {}).get("env", os.environ)
            names = (*CHILD_ENV_ALLOWED, *self.inherit_env)
            self._inherited = {name: env[name] for name in names if name in env}
        return self

    def child_env(self) -> dict[str, str]:
        """A stdio child's whole environment: the allowed part of the gateway's, then `env`."""
        return {**self._inherited, **self.env}

    def argv(self) -> list[str]:
        """The child's command line; a bare `python` means the interpreter running us."""
        argv = list(self.command or ())
        if argv and argv[0] in ("python", "python3"):
            argv[0] = sys.executable
        return argv


TaskSupport = Literal["optional", "required", "forbidden"]


class TaskPolicy(_Section):
    """How a route's tools may be called as gateway-owned tasks."""

    enabled: bool = True
    default: TaskSupport = "optional"
    tools: dict[str, TaskSupport] = Field(default_factory=dict)
    default_ttl_ms: int = Field(3_600_000, gt=0)
    max_ttl_ms: int = Field(86_400_000, gt=0)
    poll_interval_ms: int = Field(1000, gt=0)
    time_limit_seconds: float | None = Field(3600.0, gt=0)
    input_timeout_seconds: float | None = Field(600.0, gt=0)
    immediate_response: str | None = None
    list_page_size: int = Field(50, ge=1, le=1000)
    cursor_max_age_seconds: float = Field(3600.0, gt=0)

    def support(self, tool: str) -> TaskSupport:
        return self.tools.get(tool, self.default)

    def ttl(self, requested: int | None) -> int:
        """The ttl a task gets: the request's, clamped to max_ttl_ms, or the default."""
        return min(requested if requested is not None else self.default_ttl_ms, self.max_ttl_ms)

    @model_validator(mode="after")
    def _ttl_order(self) -> TaskPolicy:
        if self.default_ttl_ms > self.max_ttl_ms:
            raise ValueError("default_ttl_ms must not exceed max_ttl_ms")
        return self


RouteName = Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$", max_length=64)]


class RouteConfig(_Section):
    name: RouteName
    path: str | None = Field(None, pattern=r"^/[^?#]*$")
    upstream: UpstreamConfig
    tasks: TaskPolicy = TaskPolicy()
    #: Replaces the gateway's `auth` for this route when it sets `mode` or credentials.
    auth: AuthConfig | None = None
    limits: LimitsOverride = LimitsOverride()

    @property
    def http_path(self) -> str:
        return self.path or f"/{self.name}/mcp"


def _demo_route() -> RouteConfig:
    return RouteConfig(
        name="demo",
        upstream=UpstreamConfig(transport="stdio", command=("python", "-m", "gateway.demo")),
    )


class Settings(_Section):
    listen: ListenConfig = ListenConfig()
    store: StoreConfig = StoreConfig()
    http: HttpConfig = HttpConfig()
    sessions: SessionsConfig = SessionsConfig()
    auth: AuthConfig = AuthConfig()
    limits: Limits = Limits()
    audit: AuditConfig = AuditConfig()
    metrics: MetricsConfig = MetricsConfig()
    #: Required in a file: only a run without --config serves the demo (see load_settings).
    routes: tuple[RouteConfig, ...] = Field(min_length=1)

    @model_validator(mode="after")
    def _unique_routes(self) -> Settings:
        for attr in ("name", "http_path"):
            seen: set[str] = set()
            for route in self.routes:
                value = getattr(route, attr)
                if value in seen:
                    raise ValueError(f"two routes share the {attr.replace('http_', '')} {value!r}")
                seen.add(value)
        return self


def route_auth(settings: Settings, route: RouteConfig) -> AuthConfig:
    """The route's own section when it sets `mode` or credentials, else the gateway's (with
    any other keys the route's section sets), so a route is open only by `mode: none`."""
    own = route.auth
    if own is None:
        return settings.auth
    if not own.inherits:
        return own
    return settings.auth.model_copy(update={k: getattr(own, k) for k in own.model_fields_set})


def route_limits(settings: Settings, route: RouteConfig) -> Limits:
    # null means "inherit" here, so a route can tighten or loosen a limit but never drops
    # one by accident; a route that needs no limit sets a number beyond reach.
    changes = {k: v for k, v in route.limits.model_dump().items() if v is not None}
    return settings.limits.model_copy(update=changes)


def _substitute_env(value: Any, where: str, env: dict[str, str]) -> Any:
    if isinstance(value, dict):
        return {
            k: _substitute_env(v, f"{where}.{k}" if where else str(k), env)
            for k, v in value.items()
        }
    if isinstance(value, list):
        return [_substitute_env(v, f"{where}[{i}]", env) for i, v in enumerate(value)]
    if isinstance(value, str):

        def lookup(match: re.Match[str]) -> str:
            name = match.group(1)
            if name not in env:
                raise ConfigError(f"{where}: environment variable {name} is not set")
            return env[name]

        return _ENV_REF.sub(lookup, value)
    return value


def _key_path(loc: tuple[int | str, ...]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "(top level)"


def parse_settings(data: Any, source: str, env: dict[str, str] | None = None) -> Settings:
    """Validate decoded YAML.

    Raises:
        ConfigError: naming `source` and the offending key.
    """
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: the top level must be a mapping of keys")
    try:
        env = dict(os.environ) if env is None else env
        data = _substitute_env(data, "", env)
        return Settings.model_validate(data, context={"env": env})
    except ConfigError as exc:
        raise ConfigError(f"{source}: {exc}") from None
    except ValidationError as exc:
        errors = exc.errors()
        # A route that fails validation also makes `routes` look empty; report only the cause.
        if any(e["type"] != "too_short" for e in errors):
            errors = [e for e in errors if e["type"] != "too_short"]
        lines = []
        lines = [f"{source}: {_key_path(loc)}: {msg}" for loc, msg in map(_explained, errors)]
        raise ConfigError("\n".join(lines)) from None


def _explained(err: ErrorDetails) -> tuple[tuple[int | str, ...], str]:
    """The key path and message of one validation error, in the terms of the YAML file."""
    loc, kind = err["loc"], err["type"]
    # Model-level validators report at the model's path with a "Value error, " prefix.
    msg = err["msg"].removeprefix("Value error, ")
    if kind == "config_key":  # see _refusal
        loc = (*loc, str(err.get("ctx", {})["key"]))
    elif kind == "extra_forbidden":
        msg = "unknown key"
    elif kind == "missing" and loc == ("routes",):
        msg = "required: list at least one route (the demo runs only when no --config is given)"
    elif kind in ("tuple_type", "list_type"):
        # Never the value itself: after ${VAR} substitution it may hold a secret.
        msg = "a list is expected"
        if loc[-1:] == ("command",):
            msg += " (program and arguments, e.g. [python, -m, server])"
        if isinstance(err["input"], str):
            msg += ", not a single string"
    return loc, msg


def load_settings(path: str | Path | None) -> Settings:
    """Load settings from a YAML file, or, when `path` is None, the built-in defaults, which
    serve the bundled demo (the same as config/gateway.yaml).

    Raises:
        ConfigError: unreadable file, bad YAML or invalid settings.
    """
    if path is None:
        return Settings(routes=(_demo_route(),))
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read the configuration: {exc.strerror}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML: {_yaml_problem(exc)}") from None
    return parse_settings(data, str(path))


def _yaml_problem(exc: yaml.YAMLError) -> str:
    # PyYAML's own text quotes the offending line, which may hold a secret: keep the positions.
    if not isinstance(exc, yaml.MarkedYAMLError):
        return type(exc).__name__

    def at(mark: yaml.Mark | None) -> str:
        return "" if mark is None else f"line {mark.line + 1}, column {mark.column + 1}"

    text = ": ".join(p for p in (at(exc.problem_mark), exc.problem or "syntax error") if p)
    if exc.context:
        text += f" ({exc.context}{' at ' + at(exc.context_mark) if exc.context_mark else ''})"
    return text
