"""A route: its upstream, or its members (`gateway.config.upstream`), its task policy, and its
own auth and limits where they differ from the gateway's."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import date
from typing import Annotated, Literal

from pydantic import Field, field_validator, model_validator

from gateway.config.auth import AuthConfig
from gateway.config.base import CENTURY_MS, CENTURY_SECONDS, Section, refusal
from gateway.config.sections import LimitsOverride
from gateway.config.tokens import ScopeToken
from gateway.config.tools import ToolsConfig
from gateway.config.upstream import MemberConfig, UpstreamConfig

#: Members a route may have: each holds an upstream session per client session.
MAX_MEMBERS = 16

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
    default_ttl_ms: int = Field(3_600_000, gt=0, le=CENTURY_MS)
    max_ttl_ms: int = Field(86_400_000, gt=0, le=CENTURY_MS)
    poll_interval_ms: int = Field(1000, gt=0, le=CENTURY_MS)
    time_limit_seconds: float | None = Field(3600.0, gt=0, le=CENTURY_SECONDS)
    input_timeout_seconds: float | None = Field(600.0, gt=0, le=CENTURY_SECONDS)
    immediate_response: str | None = None
    #: 2026-07-28 only: how long a call that may become a task runs first. An answer within
    #: it comes back directly (a `required` tool's as a finished task), a question within it
    #: is an MRTR round before the task; after it, the call becomes a task.
    sync_window_ms: int = Field(250, ge=0, le=60_000)
    #: The owner's tasks/get or tasks/result within this long of its task's start, while the
    #: call runs here, answers when the call ends, the task changes or the window closes: a
    #: quick tool's task is done at the first poll.
    poll_window_ms: int = Field(100, ge=0, le=10_000)
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
            raise refusal("default_ttl_ms", f"must not exceed max_ttl_ms ({self.max_ttl_ms})")
        return self


RouteName = Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$", max_length=64)]


class RouteConfig(Section):
    name: RouteName
    path: str | None = Field(None, pattern=r"^/[^?#]*$")
    #: The one upstream; or else `upstreams`, the members whose tools clients see as one
    #: server's, each named MEMBER__TOOL.
    upstream: UpstreamConfig | None = None
    upstreams: tuple[MemberConfig, ...] | None = Field(None, min_length=1, max_length=MAX_MEMBERS)
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

    @property
    def members(self) -> tuple[UpstreamConfig, ...]:
        """Every upstream of the route: `upstream`, or each of `upstreams`."""
        if self.upstreams is not None:
            return self.upstreams
        assert self.upstream is not None  # (`_one_upstream_key`)
        return (self.upstream,)

    @property
    def single(self) -> UpstreamConfig:
        """The upstream of a route that has one; a route of members has none."""
        if self.upstream is None:
            raise ValueError(f"route {self.name} has several upstreams")
        return self.upstream

    @model_validator(mode="after")
    def _one_upstream_key(self) -> RouteConfig:
        if self.upstream is None and self.upstreams is None:
            raise refusal(
                "upstream", "required: the server this route fronts (or `upstreams`, its members)"
            )
        if self.upstream is not None and self.upstreams is not None:
            raise ValueError("a route has `upstream` (one) or `upstreams` (members), not both")
        seen: set[str] = set()
        for member in self.upstreams or ():
            if member.name.lower() in seen:
                raise refusal("upstreams", f"two members are named {member.name!r}")
            seen.add(member.name.lower())
        return self

    @model_validator(mode="after")
    def _bridged_members(self) -> RouteConfig:
        # A client of a route of several members talks to the gateway's merged server, which
        # only a session the gateway holds for each member can make; no member's own
        # 2026-07-28 wire can answer for the others. A route of one member has no others: it
        # reaches its member as a route of one upstream does.
        members = self.upstreams or ()
        for i, member in enumerate(members):
            if len(members) > 1 and member.modern == "native":
                raise refusal(
                    f"upstreams[{i}].modern",
                    "native is for a route with one upstream (or one member): a route of "
                    "several members serves 2026-07-28 callers over sessions it holds with "
                    "each (bridge)",
                )
        return self

    @model_validator(mode="after")
    def _repeats_without_credentials(self) -> RouteConfig:
        # The client's token is never stored, so a re-run after a restart would call the
        # upstream without it: refused here rather than failing at the worst moment.
        if not self.tasks.repeatable:
            return self
        for upstream in self.members:
            if upstream.identity.mode == "passthrough":
                how = "upstream.identity.mode is passthrough"
                break
            if upstream.forwards_authorization:
                how = "upstream.forward_headers lists Authorization"
                break
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
