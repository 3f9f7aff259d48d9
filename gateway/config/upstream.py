"""An upstream: where a route's calls go (stdio, Streamable HTTP or HTTP+SSE), and the
members of a route of several upstreams (`routes[].upstreams`), each an upstream with a name."""

from __future__ import annotations

import os
import re
import sys
from typing import Annotated, Literal
from urllib.parse import urlsplit

from pydantic import AfterValidator, Field, PrivateAttr, ValidationInfo, model_validator

from gateway.config.base import Section, refusal
from gateway.config.identity import UpstreamIdentity

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
                raise refusal("command", "required for transport stdio: a list, program and args")
            if self.url is not None:
                raise refusal("url", "is for streamable_http and sse, not stdio")
            if self.identity.mode != "static":
                raise refusal("identity", "is for HTTP upstreams; a stdio child takes `env`")
        else:
            if not self.url:
                raise refusal("url", f"required for transport {self.transport}")
            _check_url(self.url)
            ident = self.identity
            if ident.mode not in ("static", "passthrough") and any(
                name.lower() == ident.header.lower() for name in self.headers
            ):
                raise refusal("identity", f"sends {ident.header}, and so does `headers`")
            if self.command is not None:
                raise refusal("command", "is for stdio only")
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


#: Between a member's name and its tool's (or prompt's) name, as clients see it: search__web.
SEPARATOR = "__"

#: A member's name: runs of letters and digits joined by single `-`, `.` or `_`, so that the
#: first SEPARATOR in a client's name always ends the member's (a tool's own name may hold one).
_MEMBER_NAME = re.compile(r"[A-Za-z0-9]+(?:[-._][A-Za-z0-9]+)*")


def _member_name(value: str) -> str:
    if not _MEMBER_NAME.fullmatch(value):
        raise ValueError(
            f"{value[:100]!r} is not a member name: runs of letters and digits joined by single "
            f"-, . or _ ({SEPARATOR} separates a member's name from its tools' names)"
        )
    return value


MemberName = Annotated[str, Field(max_length=32), AfterValidator(_member_name)]


class MemberConfig(UpstreamConfig):
    """One of the upstreams of a route that has several (`routes[].upstreams`)."""

    name: MemberName
