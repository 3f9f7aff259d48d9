"""Admission: what a request must pass before the endpoint acts on it.

In order: credentials (401 with a Bearer challenge; failures rate-limited per address; with
auth mode oauth the challenge points to the route's resource metadata, and a token without the
route's scopes gets 403 `insufficient_scope`), the caller's request rate (429), the headers
(one read as a single value sent twice 400, Accept 406, Content-Type 415, protocol version
400), the body (`http.request_body`: 413 beyond the limit, 408 when too slow), and the
session the request names (404 for an unknown, ended or foreign one, answered alike). During
the drain before a stop, new sessions and tasks are refused (503 with Retry-After; see
`http.drain`).

A `Caller` says who is asking: `principal` is who authenticated (None without
authentication), `limit_key` whom the per-caller limits count (the principal, else the
client address, or the session once it is known).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from aiohttp import web

from gateway.http.drain import RETRY_AFTER_SECONDS
from gateway.http.keys import DRAIN, SESSIONS
from gateway.http.middleware import GENERATION
from gateway.observability.audit import audit
from gateway.observability.logs import printable
from gateway.protocol import jsonrpc, modern
from gateway.protocol.errors import (
    CapacityExceeded,
    InvalidRequest,
    LimitExceeded,
    SessionNotFound,
    SessionRequired,
    Unauthorized,
    UnsupportedVersion,
)
from gateway.protocol.versions import (
    LEGACY_GENERATION,
    MODERN_PROTOCOL_VERSION,
    SUPPORTED_PROTOCOL_VERSIONS,
    served_versions,
)
from gateway.route import Route
from gateway.security.auth import bearer_token, visible_ascii
from gateway.security.errors import MISSING_TOKEN, AuthError, InsufficientScope
from gateway.session.registry import SessionRegistry
from gateway.session.session import Session

SESSION_HEADER = "Mcp-Session-Id"
#: Ours are 43 characters; no session id is longer than this.
_MAX_SESSION_ID = 256
VERSION_HEADER = "Mcp-Protocol-Version"
#: Headers read as one value, each by several checks: sent twice (by a proxy that merged two
#: requests, or by a client smuggling one value past the checks that read the other), 400.
#: (The 2026-07-28 path's `Mcp-Method` and `Mcp-Name` are asked the same where it reads them.)
_SINGLE_HEADERS = (SESSION_HEADER, VERSION_HEADER)


def accepts(request: web.Request, *media_types: str) -> bool:
    """Whether the Accept header lists every one of `media_types` (or a wildcard for it)."""
    return _accepts(request.headers.get("Accept", ""), media_types)


# A client sends the same Accept header on every request, and parsing it was 2 % of a
# tasks/get's instructions; the verdicts for a few hundred values are kept (bounded, so
# varied headers cost their sender a parse each, not the gateway memory).
@functools.lru_cache(maxsize=256)
def _accepts(header: str, media_types: tuple[str, ...]) -> bool:
    accepted = {part.split(";")[0].strip().lower() for part in header.split(",")}
    return "*/*" in accepted or all(
        media in accepted or f"{media.split('/')[0]}/*" in accepted for media in media_types
    )


def refuse_repeated(request: web.Request, names: tuple[str, ...] = _SINGLE_HEADERS) -> None:
    """Each header of `names` at most once (the values stay out of the answer and the log:
    one may be a session id).

    Raises:
        InvalidRequest: one came more than once (400).
    """
    for name in names:
        if len(request.headers.getall(name, ())) > 1:
            raise InvalidRequest(
                f"Bad Request: the {name} header is sent more than once; send it once",
                {"header": name},
            )


def check_version(request: web.Request) -> None:
    version = request.headers.get(VERSION_HEADER)
    if version is not None and version not in SUPPORTED_PROTOCOL_VERSIONS:
        raise InvalidRequest(
            f"Unsupported MCP-Protocol-Version {printable(version, 40)!r}",
            {"requested": printable(version, 40), "supported": list(SUPPORTED_PROTOCOL_VERSIONS)},
        )


def check_modern_version(
    request: web.Request,
    message: jsonrpc.Message | None = None,
    served: list[str] | None = None,
) -> None:
    """A request with no session that pins a version we do not serve (2026-07-28 clients,
    which have no sessions) learns which versions we do, in 2026-07-28's own terms, so a
    client that can fall back to `initialize` does, and one that cannot says why. `served`
    lists the versions the route answers (default: the session-based ones)."""
    supported = list(SUPPORTED_PROTOCOL_VERSIONS) if served is None else served
    version: object = request.headers.get(VERSION_HEADER)
    if version is None and isinstance(message, jsonrpc.Request | jsonrpc.Notification):
        version = (jsonrpc.param(message, "_meta") or {}).get(modern.VERSION_META)
    if version is not None and version not in supported:
        version = printable(str(version), 40)
        raise UnsupportedVersion(
            f"Unsupported protocol version {version!r}: this route serves "
            f"{', '.join(supported)} (send initialize to start a session)",
            {"requested": version, "supported": supported},
        )


def generation(request: web.Request, message: jsonrpc.Message | None = None) -> str:
    """The protocol generation a request speaks, for metrics and audit events: 2026-07-28
    for a session-less request that names it (in its header, or, once parsed, as
    `modern.wants_modern` reads the body), else 2025-11-25."""
    if request.headers.get(SESSION_HEADER):
        return LEGACY_GENERATION
    version = request.headers.get(VERSION_HEADER)
    if message is None:
        speaks_modern = version == MODERN_PROTOCOL_VERSION
    else:
        speaks_modern = modern.wants_modern(message, version)
    return MODERN_PROTOCOL_VERSION if speaks_modern else LEGACY_GENERATION


@dataclass(frozen=True, slots=True)
class Caller:
    principal: str | None
    #: Whom the per-principal limits count: the principal, or without one the client address.
    limit_key: str
    #: What the caller's OAuth access token grants (empty for other methods).
    scopes: frozenset[str] = frozenset()


async def admit(request: web.Request, route: Route) -> Caller:
    """Authenticate and rate-limit one request, before anything else is done for it.

    Failed authentications are rate-limited per client address, so guessing credentials or
    flooding the audit log stops at the burst. Anonymous requests in a session are limited
    per session once the session is known (see `session_for`), the rest per address. The
    request's generation, as its headers tell it, is noted for the metrics.

    Raises:
        Unauthorized: missing or invalid credentials (401, WWW-Authenticate: Bearer).
        LimitExceeded: over the caller's request rate (429, Retry-After).
        InvalidRequest: a header of `_SINGLE_HEADERS` repeated (400).
    """
    address = f"address:{request.remote}"
    request[GENERATION] = generation(request)
    try:
        principal = await route.authenticator.authenticate(request.headers.get("Authorization"))
    except AuthError as exc:
        check_rate(route, address)
        route.metrics.auth_failures.labels(route.name).inc()
        audit(
            "auth_failed",
            route=route.name,
            reason=exc.reason,
            remote=request.remote,
            generation=request[GENERATION],
        )
        raise Unauthorized(
            f"Unauthorized: {exc.reason}",
            headers={"WWW-Authenticate": challenge(exc.reason, route)},
        ) from None
    if principal is not None:
        caller = Caller(principal.name, f"principal:{principal.name}", principal.scopes)
        check_rate(route, caller.limit_key)
        check_scopes(route, caller, generation=request[GENERATION])
        if principal.method != "api_key":
            # The caller's latest token, for an upstream identity that exchanges it (RFC 8693).
            token = bearer_token(request.headers.get("Authorization"))
            route.upstream.identity.observe(principal.name, token)
    else:
        caller = Caller(None, address)
        if not request.headers.get(SESSION_HEADER):
            check_rate(route, address)
    refuse_repeated(request)  # here, so that every endpoint of both generations asks it
    return caller


def refuse_when_draining(request: web.Request, what: str) -> None:
    """New work (`what`: sessions, tasks, tool calls) goes elsewhere once the drain before a
    stop has begun; the work already here goes on.

    Raises:
        CapacityExceeded: draining (503, Retry-After).
    """
    if request.app[DRAIN].draining:
        raise CapacityExceeded(
            f"the gateway is draining before a restart and takes no new {what}; send the "
            "request again (to another instance, or to this one once it is back)",
            headers={"Retry-After": str(RETRY_AFTER_SECONDS)},
        )


def check_rate(route: Route, key: str) -> None:
    try:
        route.rate.check(key)
    except LimitExceeded:
        route.metrics.limited.labels(route.name, "requests").inc()
        raise


def check_scopes(
    route: Route,
    caller: Caller,
    message: jsonrpc.Message | None = None,
    generation: str | None = None,
) -> None:
    """With auth mode oauth: the caller's token grants every scope the route needs, and for a
    `tools/call` (a task's too) every scope that tool needs. `generation` is for the audit.

    Raises:
        InsufficientScope: 403 with the scopes to ask for in WWW-Authenticate.
    """
    if route.resource is None:
        return
    tool = None
    if isinstance(message, jsonrpc.Request) and message.method == "tools/call":
        name = jsonrpc.param(message, "name")
        tool = name if isinstance(name, str) else None
    missing = route.resource.needed(tool) - caller.scopes
    if missing:
        audit(
            "auth_failed",
            route=route.name,
            reason="insufficient scope",
            principal=caller.principal,
            generation=generation,
        )
        description = f"needs scope {' '.join(sorted(missing))}"
        raise InsufficientScope(
            f"Forbidden: insufficient scope: {description}",
            {"missing": sorted(missing)},
            headers={
                "WWW-Authenticate": route.resource.challenge(
                    "insufficient_scope", description, tool
                )
            },
        )


def challenge(reason: str, route: Route | None = None) -> str:
    # RFC 6750 section 3.1: no error code when the request carried no credentials at all;
    # otherwise why the token was refused (reasons never hold credentials). An OAuth route
    # points to its metadata (RFC 9728 section 5.1), where clients find the authorization server.
    if route is not None and route.resource is not None:
        if reason == MISSING_TOKEN:
            return route.resource.challenge()
        return route.resource.challenge("invalid_token", reason)
    if reason == MISSING_TOKEN:
        return 'Bearer realm="mcp-task-gateway"'
    quoted = reason.replace("\\", "/").replace('"', "'")
    return f'Bearer realm="mcp-task-gateway", error="invalid_token", error_description="{quoted}"'


async def session_for(request: web.Request, route: Route, caller: Caller) -> Session:
    session_id = request.headers.get(SESSION_HEADER)
    if not session_id:
        check_modern_version(request, served=served_versions(route.generations))
        raise SessionRequired("Bad Request: missing MCP-Session-Id header; initialize first")
    check_version(request)
    try:
        if len(session_id) > _MAX_SESSION_ID or not visible_ascii(session_id):
            # The spec's session ids are visible ASCII; ours are base64url. Anything else
            # (including bytes that are not UTF-8) names no session, and is answered so.
            raise SessionNotFound(SessionRegistry.NOT_FOUND)
        session = await request.app[SESSIONS].get(
            session_id, route, caller.principal, caller.limit_key
        )
    except SessionNotFound:
        if caller.principal is None:
            check_rate(route, caller.limit_key)  # made-up session ids buy no fresh rate bucket
        raise
    if caller.principal is None:
        check_rate(route, f"session:{session.id}")
    remember_forwarded(request, route, session)
    return session


def remember_forwarded(request: web.Request, route: Route, session: Session) -> None:
    """The latest values of the client headers the route copies upstream (none by default)."""
    for name in route.upstream.copied_headers:
        value = request.headers.get(name)
        if value is not None:
            session.forwarded[name] = value
