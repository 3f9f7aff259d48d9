"""A route: its upstream (stdio, Streamable HTTP or HTTP+SSE), its task policy, and its own
auth and limits where they differ from the gateway's."""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from datetime import date
from typing import Annotated, Literal
from urllib.parse import urlsplit

from pydantic import (
    Field,
    PrivateAttr,
    ValidationInfo,
    field_validator,
    model_validator,
)

from gateway.config.auth import AuthConfig, ScopeToken
from gateway.config.base import Section, refusal
from gateway.config.identity import UpstreamIdentity
from gateway.config.sections import LimitsOverride
from gateway.config.tools import ToolsConfig

#: What a stdio child inherits from the gateway's environment, when set: enough to find
#: programs, a home, a locale, a time zone and a temporary directory; no secret.
CHILD_ENV_ALLOWED = (
    "PATH", "HOME", "USER", "LOGNAME", "SHELL", "TERM", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "TMPDIR"
)  # fmt: skip


class UpstreamConfig(Section):
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
    #: Who the upstream is told calls (HTTP upstreams): see `gateway.config.identity`.
    identity: UpstreamIdentity = UpstreamIdentity()
    #: How 2026-07-28 callers are served: `bridge` over 2025-11-25 sessions the gateway holds
    #: for them (the upstream's mid-call questions become MRTR rounds); `native` on the
    #: 2026-07-28 wire, for a streamable_http upstream that speaks it (its MRTR rounds pass
    #: through); `auto` natively if the upstream's server/discover says it speaks 2026-07-28,
    #: else bridged (`gateway.upstream.generation`). 2025-11-25 callers always get sessions.
    modern: Literal["auto", "bridge", "native"] = "auto"
    _inherited: dict[str, str] = PrivateAttr(default_factory=dict)

    @property
    def copied_headers(self) -> tuple[str, ...]:
        """The client headers copied upstream: `forward_headers`, and `Authorization` in
        identity mode passthrough."""
        if self.identity.mode == "passthrough" and not self.forwards_authorization:
            return (*self.forward_headers, "Authorization")
        return self.forward_headers

    @property
    def forwards_authorization(self) -> bool:
        return any(name.lower() == "authorization" for name in self.forward_headers)

    @model_validator(mode="after")
    def _transport_fields(self) -> UpstreamConfig:
        if self.transport == "stdio":
            if not self.command:
                raise ValueError("transport stdio needs `command` (a list: program and args)")
            if self.url is not None:
                raise ValueError("`url` is for streamable_http and sse, not stdio")
            if self.identity.mode != "static":
                raise refusal("identity", "is for HTTP upstreams; a stdio child takes `env`")
        else:
            if not self.url:
                raise ValueError(f"transport {self.transport} needs `url`")
            _check_url(self.url)
            ident = self.identity
            if ident.mode not in ("static", "passthrough") and any(
                name.lower() == ident.header.lower() for name in self.headers
            ):
                raise refusal("identity", f"sends {ident.header}, and so does `headers`")
            if self.command is not None:
                raise ValueError("`command` is for stdio only")
        if self.modern == "native" and self.transport != "streamable_http":
            raise refusal("modern", "native is for streamable_http: 2026-07-28 has no other")
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

    @property
    def location(self) -> str:
        """Where the upstream is, fit to print: an HTTP URL without credentials, query or
        fragment, or a stdio command's program (its arguments may hold secrets)."""
        if self.transport == "stdio":
            return self.argv()[0]
        parts = urlsplit(self.url or "")
        host = parts.hostname or ""
        host = f"[{host}]" if ":" in host else host
        netloc = f"{host}:{parts.port}" if parts.port else host  # a valid port: see _check_url
        return f"{parts.scheme}://{netloc}{parts.path}"

    def argv(self) -> list[str]:
        """The child's command line; a bare `python` means the interpreter running us."""
        argv = list(self.command or ())
        if argv and argv[0] in ("python", "python3"):
            argv[0] = sys.executable
        return argv


def _check_url(url: str) -> None:
    """Refuses what no HTTP client could connect to; the message never quotes the URL,
    which may hold credentials."""
    parts = urlsplit(url)
    try:
        parts.port  # noqa: B018 - parsed for its refusal
    except ValueError:
        raise refusal("url", "has a port that is not a number from 0 to 65535") from None
    if parts.scheme.lower() not in ("http", "https") or not parts.hostname:
        raise refusal("url", "must be an http:// or https:// URL with a host")


TaskSupport = Literal["optional", "required", "forbidden"]

_REPEATABLE_SHAPE = (
    "must be a list of tool names, or `annotated` (the tools whose upstream annotations say "
    "readOnlyHint or idempotentHint)"
)


class TaskPolicy(Section):
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
    #: 2026-07-28 only: how long a call that may become a task runs first. An answer within
    #: it comes back directly (a `required` tool's as a finished task), a question within it
    #: is an MRTR round before the task; after it, the call becomes a task.
    sync_window_ms: int = Field(250, ge=0, le=60_000)
    list_page_size: int = Field(50, ge=1, le=1000)
    cursor_max_age_seconds: float = Field(3600.0, gt=0)
    #: The tools whose tasks are run again after the gateway stopped while they ran: these
    #: names, or `annotated` for those whose upstream annotations say readOnlyHint: true or
    #: idempotentHint: true. None unless listed: a re-run repeats the call's side effects.
    repeatable: tuple[str, ...] | Literal["annotated"] = ()
    #: Runs of one repeatable task, the first included.
    max_attempts: int = Field(3, ge=1, le=20)

    def support(self, tool: str) -> TaskSupport:
        return self.tools.get(tool, self.default)

    def repeats(self, tool: str, annotations: Mapping[str, object] | None) -> bool:
        """Whether a task of `tool` may be run again after a loss; `annotations` are the
        tool's upstream annotations as known when the task is created (None: unknown)."""
        if self.repeatable == "annotated":
            hints = annotations or {}
            return hints.get("readOnlyHint") is True or hints.get("idempotentHint") is True
        return tool in self.repeatable

    @field_validator("repeatable", mode="before")
    @classmethod
    def _repeatable_shape(cls, value: object) -> object:
        # Checked here, so that a wrong shape gets one message rather than one per union member.
        if value == "annotated":
            return value
        if isinstance(value, str):
            raise ValueError(f"{_REPEATABLE_SHAPE}; a single tool is written [name]")
        if not isinstance(value, list | tuple):
            raise ValueError(_REPEATABLE_SHAPE)
        for index, name in enumerate(value):
            if not isinstance(name, str) or not name:
                raise ValueError(f"{_REPEATABLE_SHAPE}; item {index} is not a tool name")
        return tuple(value)

    def ttl(self, requested: int | None) -> int:
        """The ttl a task gets: the request's, clamped to max_ttl_ms, or the default."""
        return min(requested if requested is not None else self.default_ttl_ms, self.max_ttl_ms)

    @model_validator(mode="after")
    def _ttl_order(self) -> TaskPolicy:
        if self.default_ttl_ms > self.max_ttl_ms:
            raise ValueError("default_ttl_ms must not exceed max_ttl_ms")
        return self


RouteName = Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$", max_length=64)]


class RouteConfig(Section):
    name: RouteName
    path: str | None = Field(None, pattern=r"^/[^?#]*$")
    upstream: UpstreamConfig
    #: Which tools a client sees, under what names (`gateway.config.tools`).
    tools: ToolsConfig = ToolsConfig()
    tasks: TaskPolicy = TaskPolicy()
    #: The protocol generations served: 2025-11-25 (sessions opened by initialize, every
    #: revision since 2024-11-05) and 2026-07-28 (session-less, per-request _meta).
    generations: tuple[Literal["2025-11-25", "2026-07-28"], ...] = Field(
        ("2025-11-25", "2026-07-28"), min_length=1
    )
    #: Replaces the gateway's `auth` for this route when it sets `mode` or credentials.
    auth: AuthConfig | None = None
    limits: LimitsOverride = LimitsOverride()
    #: Auth mode oauth: scopes every token for this route needs, besides auth.oauth's.
    required_scopes: tuple[ScopeToken, ...] = ()
    #: Auth mode oauth: scopes a tools/call of the named tool needs, e.g. {deploy: [ops]}.
    tool_scopes: dict[str, tuple[ScopeToken, ...]] = Field(default_factory=dict)
    #: The largest upstream message taken (an answer, or any other): a larger one fails the
    #: call it answers (a task's too) and is neither relayed nor stored.
    max_result_bytes: int = Field(64 * 1024 * 1024, ge=1024, le=1024 * 1024 * 1024)

    @field_validator("generations", mode="before")
    @classmethod
    def _dates_as_names(cls, value: object) -> object:
        # YAML reads an unquoted 2025-11-25 as a date; the generation is meant.
        if isinstance(value, list | tuple):
            return [item.isoformat() if isinstance(item, date) else item for item in value]
        return value

    @property
    def http_path(self) -> str:
        return self.path or f"/{self.name}/mcp"

    @model_validator(mode="after")
    def _repeats_without_credentials(self) -> RouteConfig:
        # The client's token is never stored, so a re-run after a restart would call the
        # upstream without it: refused here rather than failing at the worst moment.
        if not self.tasks.repeatable:
            return self
        upstream = self.upstream
        if upstream.identity.mode == "passthrough":
            how = "upstream.identity.mode is passthrough"
        elif upstream.forwards_authorization:
            how = "upstream.forward_headers lists Authorization"
        else:
            return self
        raise refusal(
            "tasks.repeatable",
            f"is refused on a route that forwards the client's credentials upstream ({how}): "
            "a re-run after a restart would have none, as tokens are never stored",
        )


def demo_route() -> RouteConfig:
    return RouteConfig(
        name="demo",
        upstream=UpstreamConfig(transport="stdio", command=("python", "-m", "gateway.demo")),
    )
