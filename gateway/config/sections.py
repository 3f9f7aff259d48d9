"""The gateway-wide sections: where it listens, its store, HTTP behaviour, how it stops, limits,
sessions, audit, metrics, traces and the operators' admin API."""

from __future__ import annotations

import ipaddress
from typing import Literal
from urllib.parse import parse_qs, urlsplit

from pydantic import (
    Field,
    PrivateAttr,
    ValidationInfo,
    field_validator,
    model_validator,
)

from gateway.config.base import CENTURY_MS, MOST_COUNTED, Section, refusal, secret_from_env

#: `store.pool_size`'s default, also that of a PostgreSQL store opened without the config.
POOL_SIZE = 10


class ListenConfig(Section):
    host: str = "127.0.0.1"
    port: int = Field(8080, ge=0, le=65535)

    @field_validator("host")
    @classmethod
    def _printable(cls, host: str) -> str:
        # A NUL (or a pasted newline) would pass here and fail the bind with a traceback.
        if not host.isprintable():
            raise ValueError("holds a control character: a host name or IP address is expected")
        return host


class StoreConfig(Section):
    """Where tasks, results and sessions are kept: one SQLite file (the default, one process),
    or a PostgreSQL database that several replicas share (DESIGN.md, "Several replicas")."""

    backend: Literal["sqlite", "postgres"] = "sqlite"
    path: str = "data/gateway.db"
    #: postgres only: `postgresql://USER@HOST:PORT/DB`. The password comes from PGPASSWORD
    #: (or ~/.pgpass), never from this file.
    url: str | None = None
    #: postgres only: a replica that has not renewed its lease for this long is taken for
    #: dead, and a survivor settles its tasks (fails them, or runs the repeatable ones again).
    lease_seconds: float = Field(15.0, ge=2, le=3600)
    #: postgres only: the most connections this replica's pool opens (its listener takes one
    #: more). Every replica's, summed, must fit the server's `max_connections` (100 by default).
    pool_size: int = Field(POOL_SIZE, ge=1, le=1000)
    sweep_interval_seconds: float = Field(30.0, gt=0)

    @property
    def shared(self) -> bool:
        """Whether other processes (replicas) use the same store."""
        return self.backend == "postgres"

    @model_validator(mode="after")
    def _backend(self) -> StoreConfig:
        if self.backend == "sqlite":
            if self.url is not None:
                raise refusal("url", "is read only with store.backend: postgres")
            return self
        if self.url is None:
            raise refusal("url", "is required with store.backend: postgres")
        parts = urlsplit(self.url)
        if parts.scheme not in ("postgresql", "postgres") or not parts.hostname:
            raise refusal("url", "must be postgresql://USER@HOST:PORT/DATABASE")
        if parts.password is not None:
            raise refusal(
                "url", "must not hold a password: set it in the PGPASSWORD environment variable"
            )
        if "password" in parse_qs(parts.query):
            raise refusal(
                "url", "must not hold a password: set it in the PGPASSWORD environment variable"
            )
        return self


class HttpConfig(Section):
    allowed_origins: tuple[str, ...] = (
        "http://localhost:*",
        "http://127.0.0.1:*",
        "http://[::1]:*",
    )
    keepalive_seconds: float = Field(15.0, gt=0)
    #: Kept per stream for a client that resumes, in a deque whose length is a C size.
    replay_buffer_events: int = Field(256, ge=1, le=100_000)
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
    #: Reverse proxies (addresses or networks) whose Forwarded / X-Forwarded-For, -Proto and
    #: -Host headers are believed: the client address, scheme and host they name are the
    #: request's for limits, the audit log and the Host check. Nobody else's are.
    trusted_proxies: tuple[str, ...] = ()

    @model_validator(mode="after")
    def _proxies(self) -> HttpConfig:
        for index, value in enumerate(self.trusted_proxies):
            try:
                ipaddress.ip_network(value, strict=False)
            except ValueError:
                raise refusal(
                    f"trusted_proxies[{index}]",
                    f"{value!r} is not an IP address or network (e.g. 10.0.0.0/8 or 127.0.0.1)",
                ) from None
        return self

    @property
    def proxy_networks(self) -> tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...]:
        return tuple(ipaddress.ip_network(v, strict=False) for v in self.trusted_proxies)


class ShutdownConfig(Section):
    """How the gateway stops: the first SIGTERM or SIGINT drains, the second stops now."""

    #: Running tasks get this long to end while new sessions and tasks are refused (503);
    #: those still running then fail as interrupted. 0: fail them at once.
    drain_seconds: float = Field(30.0, ge=0)


class Limits(Section):
    """Abuse limits per principal (per session when no authentication is configured)."""

    active_tasks_per_principal: int | None = Field(1000, ge=1, le=MOST_COUNTED)
    requests_per_second: float | None = Field(100.0, gt=0)
    #: Bounded: the token bucket is a float, and floats end near 10**308.
    burst: int = Field(200, ge=1, le=MOST_COUNTED)
    #: Each session can keep one stdio child busy, and only busy children hold a route's
    #: cap: half of the default upstream.max_children leaves the other half to other callers.
    sessions_per_principal: int | None = Field(16, ge=1, le=MOST_COUNTED)
    max_ttl_ms: int | None = Field(None, gt=0, le=CENTURY_MS)
    max_body_bytes: int = Field(4 * 1024 * 1024, ge=1024)
    #: What a caller's tasks may keep in the store (results, and the requests of tools safe
    #: to repeat); past it new tasks are refused until some expire. Null: no quota.
    stored_bytes_per_principal: int | None = Field(None, ge=1024)


class LimitsOverride(Section):
    """A route's changes to the global limits; null keys keep the global value."""

    active_tasks_per_principal: int | None = Field(None, ge=1, le=MOST_COUNTED)
    requests_per_second: float | None = Field(None, gt=0)
    burst: int | None = Field(None, ge=1, le=MOST_COUNTED)
    sessions_per_principal: int | None = Field(None, ge=1, le=MOST_COUNTED)
    max_ttl_ms: int | None = Field(None, gt=0, le=CENTURY_MS)
    max_body_bytes: int | None = Field(None, ge=1024)
    stored_bytes_per_principal: int | None = Field(None, ge=1024)


class AuditConfig(Section):
    #: JSON lines go to this file (rotated), or when null to `stream`.
    file: str | None = None
    #: Without a file: stdout, apart from the human log on stderr; `stderr` puts both on
    #: one stream, which must be asked for.
    stream: Literal["stdout", "stderr"] = "stdout"
    max_bytes: int = Field(10 * 1024 * 1024, ge=1024)
    #: Each rotation renames its way through every backup number, so a huge one never ends.
    backups: int = Field(5, ge=0, le=1000)
    #: Tool arguments in task_created events: off, as they may hold personal data.
    include_arguments: bool = False

    @model_validator(mode="after")
    def _one_place(self) -> AuditConfig:
        # `stdout` written out beside a file (as config/gateway.yaml has it) is harmless.
        if self.file is not None and self.stream != "stdout":
            raise refusal("stream", "is where the lines go without `file`; remove one of them")
        return self


class MetricsConfig(Section):
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
            self._token = secret_from_env(info, self.bearer_token_env)
        return self


class SessionsConfig(Section):
    #: Bounded: its metric is a float, and floats end near 10**308.
    max_sessions: int = Field(1000, ge=1, le=MOST_COUNTED)
    idle_timeout_seconds: float = Field(3600.0, gt=0)


class TracingConfig(Section):
    """OpenTelemetry traces, sent over OTLP/HTTP (the optional extra `otel`); off when the
    section is absent."""

    #: The collector's base URL (e.g. http://otel-collector:4318); spans go to
    #: ENDPOINT/v1/traces. Credentials the collector wants go in OTEL_EXPORTER_OTLP_HEADERS.
    otlp_endpoint: str
    service_name: str = Field("mcp-task-gateway", min_length=1, max_length=200)
    #: Task ids on task spans: off, as a task id is a bearer handle on its result.
    include_task_ids: bool = False
    #: Share of new traces recorded (those a client continues follow its sampled flag).
    sample_ratio: float = Field(1.0, ge=0, le=1)

    @model_validator(mode="after")
    def _endpoint(self) -> TracingConfig:
        try:
            parts = urlsplit(self.otlp_endpoint)
            parts.port  # noqa: B018 - raises ValueError for a port out of range
        except ValueError:
            parts = None
        if parts is None or parts.scheme not in ("http", "https") or not parts.hostname:
            raise refusal(
                "otlp_endpoint", "must be an http:// or https:// URL, e.g. http://collector:4318"
            )
        if parts.username is not None or parts.password is not None:
            raise refusal(
                "otlp_endpoint",
                "must not hold credentials: set them in OTEL_EXPORTER_OTLP_HEADERS",
            )
        if parts.query or parts.fragment:
            raise refusal("otlp_endpoint", "takes no query or fragment")
        if parts.path.rstrip("/").endswith("/v1/traces"):
            raise refusal("otlp_endpoint", "is the collector's base URL: /v1/traces is added to it")
        return self

    @property
    def traces_url(self) -> str:
        return self.otlp_endpoint.rstrip("/") + "/v1/traces"


#: Shorter admin tokens are refused: the token alone stands between a caller and every task.
ADMIN_TOKEN_MIN_CHARS = 16


class AdminConfig(Section):
    """The operators' HTTP API under /admin/ (what `mcp-task-gateway tasks` and `sessions`
    talk to): on an address of its own, never the gateway's, and only with the token read
    from `token_env`. Off when the section is absent."""

    #: Loopback by default: only this machine reaches it. Another address (a management
    #: network) is allowed, and the start-up log warns, as the token alone guards it there.
    listen: ListenConfig = ListenConfig(port=8081)
    token_env: str = Field("ADMIN_TOKEN", pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")
    #: Whether a task's detail (`tasks show`, the console) carries its result's content: a
    #: caller's data, which an operator otherwise sees only by kind and size.
    console_shows_results: bool = False
    _token: str = PrivateAttr("")

    @property
    def token(self) -> str:
        return self._token

    @model_validator(mode="after")
    def _read_token(self, info: ValidationInfo) -> AdminConfig:
        if self.listen.port == 0:
            raise refusal("listen.port", "must be a fixed port: the command line reads it here")
        try:
            token = secret_from_env(info, self.token_env)
        except ValueError as exc:
            raise refusal("token_env", str(exc)) from None
        if not all("!" <= c <= "~" for c in token):
            # A trailing newline (a token written with `echo` to a file) is the usual one:
            # no request could carry it, and the command would fail on every call.
            raise refusal(
                "token_env",
                f"the token in {self.token_env} holds whitespace or a character an HTTP header "
                "cannot carry (a trailing newline?): use printable ASCII only",
            )
        if len(token) < ADMIN_TOKEN_MIN_CHARS:
            raise refusal(
                "token_env",
                f"the token in {self.token_env} is shorter than {ADMIN_TOKEN_MIN_CHARS} "
                "characters: use a long random one (e.g. `openssl rand -hex 32`)",
            )
        self._token = token
        return self
