"""Settings: the YAML file, validated once at start-up.

`load_settings(path)` reads YAML, replaces `${VAR}` references with environment values, and
validates the result; every failure names the file and the key path. Components receive
their slice of the settings, never `os.environ`.
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

# The gateway's own protocol revisions, newest last. Upstreams may speak any of them.
SUPPORTED_PROTOCOL_VERSIONS = ("2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25")
LATEST_PROTOCOL_VERSION = SUPPORTED_PROTOCOL_VERSIONS[-1]

_ENV_REF = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


class ConfigError(Exception):
    """The configuration cannot be used; the message names the file and the key."""


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ListenConfig(_Section):
    host: str = "127.0.0.1"
    port: int = Field(8080, ge=0, le=65535)


class StoreConfig(_Section):
    path: str = "data/gateway.db"
    sweep_interval_seconds: float = Field(30.0, gt=0)


class HttpConfig(_Section):
    max_body_bytes: int = Field(4 * 1024 * 1024, ge=1024)
    allowed_origins: tuple[str, ...] = (
        "http://localhost:*",
        "http://127.0.0.1:*",
        "http://[::1]:*",
    )
    keepalive_seconds: float = Field(15.0, gt=0)
    replay_buffer_events: int = Field(256, ge=1)
    json_window_seconds: float = Field(0.5, ge=0)
    sse_retry_ms: int = Field(1000, ge=0)


class SessionsConfig(_Section):
    max_sessions: int = Field(1000, ge=1)
    idle_timeout_seconds: float = Field(3600.0, gt=0)


class UpstreamConfig(_Section):
    transport: Literal["stdio", "streamable_http", "sse"]
    command: tuple[str, ...] | None = None
    env: dict[str, str] = Field(default_factory=dict)
    cwd: str | None = None
    max_children: int = Field(32, ge=1)
    url: str | None = None
    headers: dict[str, str] = Field(default_factory=dict)
    connect_timeout_seconds: float = Field(10.0, gt=0)
    request_timeout_seconds: float | None = Field(300.0, gt=0)

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
    routes: tuple[RouteConfig, ...] = Field(default_factory=lambda: (_demo_route(),), min_length=1)

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
        data = _substitute_env(data, "", dict(os.environ) if env is None else env)
        return Settings.model_validate(data)
    except ConfigError as exc:
        raise ConfigError(f"{source}: {exc}") from None
    except ValidationError as exc:
        errors = exc.errors()
        # A route that fails validation also makes `routes` look empty; report only the cause.
        if any(e["type"] != "too_short" for e in errors):
            errors = [e for e in errors if e["type"] != "too_short"]
        lines = []
        for err in errors:
            # Model-level validators report at the model's path with a "Value error, " prefix.
            msg = err["msg"].removeprefix("Value error, ")
            if err["type"] == "extra_forbidden":
                msg = "unknown key"
            lines.append(f"{source}: {_key_path(err['loc'])}: {msg}")
        raise ConfigError("\n".join(lines)) from None


def load_settings(path: str | Path | None) -> Settings:
    """Load settings from a YAML file, or the built-in defaults when `path` is None.

    Raises:
        ConfigError: unreadable file, bad YAML or invalid settings.
    """
    if path is None:
        return Settings()
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read the configuration: {exc.strerror}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML: {exc}") from None
    return parse_settings(data, str(path))
