"""The guard around every handler: Host and Origin validation, the one place exceptions
become responses, and the request metrics."""

from __future__ import annotations

import asyncio
import functools
import ipaddress
import logging
import time
from collections.abc import Awaitable, Callable

from aiohttp import hdrs, web

from gateway.config import HttpConfig
from gateway.http import forwarded
from gateway.http.keys import ALLOWED_HOSTS, METRICS, SETTINGS, TRUSTED_PROXIES
from gateway.http.request_body import close_unread
from gateway.http.sse import STARTED as STREAMING
from gateway.observability.logs import printable
from gateway.observability.outcomes import request_outcome
from gateway.protocol import jsonrpc
from gateway.protocol.errors import (
    INTERNAL_ERROR,
    ForbiddenOrigin,
    GatewayError,
    MisdirectedRequest,
)
from gateway.protocol.versions import LEGACY_GENERATION

log = logging.getLogger(__name__)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def origin_allowed(origin: str, allowed: tuple[str, ...]) -> bool:
    """Exact origins, or patterns such as `http://localhost:*` (port wildcard)."""
    origin = origin.lower().rstrip("/")
    for pattern in allowed:
        pattern = pattern.lower().rstrip("/")
        if origin == pattern:
            return True
        if pattern.endswith(":*"):
            host = pattern[:-2]
            port = origin.removeprefix(host + ":") if origin.startswith(host + ":") else None
            if origin == host or (port is not None and port.isdigit()):
                return True
    return False


#: The id of the JSON-RPC request being handled, once its body is parsed, so an error
#: answer can carry it.
REQUEST_ID: web.RequestKey[int | str] = web.RequestKey("request_id")


def _error_response(request: web.Request, exc: Exception) -> web.Response:
    """The one place an exception becomes an answer: a JSON-RPC error with the request's id."""
    if isinstance(exc, GatewayError):
        if exc.http_status >= 500:
            log.warning("%s %s: %s", request.method, printable(request.path), exc.message)
        status, code, message, data, headers = (
            exc.http_status,
            exc.code,
            exc.message,
            exc.data,
            exc.headers,
        )
    else:
        # A defect of ours: the client learns only that it happened, the log gets the
        # traceback once (the client's text in it is escaped by the log formatter).
        log.error("%s %s: internal error", request.method, printable(request.path), exc_info=exc)
        status, code, message, data, headers = 500, INTERNAL_ERROR, "Internal error", None, {}
    if request.get(STREAMING):
        # The answer had begun as a stream: no second response can follow; end the connection.
        raise ConnectionResetError("internal error after the response began") from exc
    body = jsonrpc.error_response(request.get(REQUEST_ID), code, message, data)
    return web.Response(
        text=jsonrpc.dump(body), status=status, content_type="application/json", headers=headers
    )


LOOPBACK_HOSTS = ("localhost", "127.0.0.1", "::1")


def allowed_hosts(http: HttpConfig, listen_host: str) -> tuple[str, ...] | None:
    """The Host names to accept: configured, or the loopback names on a loopback listener."""
    if http.allowed_hosts is not None:
        return tuple(pattern.lower().rstrip(".") for pattern in http.allowed_hosts)
    try:
        loopback = ipaddress.ip_address(listen_host.strip("[]")).is_loopback
    except ValueError:
        loopback = listen_host.lower().rstrip(".") == "localhost"
    return LOOPBACK_HOSTS if loopback else None


# Every request asks this of its Host header, which hardly ever changes between requests:
# the verdicts for a few hundred values are kept (bounded against varied made-up hosts).
@functools.lru_cache(maxsize=256)
def host_allowed(host: str, allowed: tuple[str, ...]) -> bool:
    """Whether a Host header value (any port) is one of `allowed`, or `*.domain` of one."""
    host = host.strip().lower()
    if host.startswith("["):
        name = host[1 : host.find("]")] if "]" in host else ""
    else:
        name, colon, port = host.rpartition(":")
        if not colon or not port.isdigit():
            name = host
    name = name.rstrip(".")
    for pattern in allowed:
        if pattern == "*" or name == pattern:
            return True
        if pattern.startswith("*.") and name.endswith(pattern[1:]) and name != pattern[2:]:
            return True
    return False


def _check_origin(
    request: web.Request, hosts: tuple[str, ...] | None, origins: tuple[str, ...]
) -> None:
    # Browsers send Origin; a page on another site reaching a loopback gateway through DNS
    # rebinding is exactly what the transports spec's MUST on Origin validation stops.
    # After a rebinding the page is same-origin and may send no Origin at all, but its Host
    # is still the attacker's name: hence the Host check.
    if hosts is not None and not host_allowed(request.headers.get("Host", ""), hosts):
        raise MisdirectedRequest(
            f"Misdirected Request: Host {printable(request.headers.get('Host', ''), 80)!r} "
            "is not served here (http.allowed_hosts)"
        )
    origin = request.headers.get("Origin")
    if origin is not None and not origin_allowed(origin, origins):
        raise ForbiddenOrigin(
            f"Forbidden: Origin {printable(origin, 80)!r} is not allowed (http.allowed_origins)"
        )


#: Where handlers note which route, MCP method and protocol generation a request was, for
#: the metrics (the generation: "2025-11-25" for the session-based one, else "2026-07-28").
ROUTE = web.RequestKey("route", str)
METHOD = web.RequestKey("method", str)
GENERATION = web.RequestKey("generation", str)


def guarded(app: web.Application, handler: Handler) -> Handler:
    """`handler` behind the guard, which every request passes: the Host and Origin checks,
    exceptions turned into answers, and the metrics, which see the status an error became.

    Each handler the app serves is wrapped in it (`http.urls`), rather than the guard being an
    aiohttp middleware: aiohttp runs an app that has any middleware through a layer of its own
    too (`_fix_request_current_app`), with a partial called per request, which was 2 % of a
    poll's instructions. One guard rather than three checks: each layer costs a call and a
    coroutine on every request. What it reads of `app` is read once: the `http` section and
    the metrics stay as they are for the app's life (a reload does not change them)."""
    hosts, proxies = app[ALLOWED_HOSTS], app[TRUSTED_PROXIES]
    origins, metrics = app[SETTINGS].http.allowed_origins, app[METRICS]

    async def guard(request: web.Request) -> web.StreamResponse:
        started = time.perf_counter()
        status = 500
        request = forwarded.apply(request, proxies)
        try:
            try:
                _check_origin(request, hosts, origins)
                response = await handler(request)
            except web.HTTPException as answer:  # aiohttp's (the URL table's 404 and 405)
                if hdrs.EXPECT in request.headers:
                    close_unread(request, answer)
                raise
            except (asyncio.CancelledError, ConnectionError):
                raise  # the client went away: there is nobody to answer
            except Exception as exc:
                response = _error_response(request, exc)
            if hdrs.EXPECT in request.headers:  # a refusal may come before the go-ahead
                close_unread(request, response)
            status = response.status
            return response
        except asyncio.CancelledError:
            status = 0  # the client went away mid-answer (a closed stream): not a server error
            raise
        finally:
            route = request.get(ROUTE)
            if route is not None:
                method = metrics.method(request.get(METHOD, request.method))
                outcome = request_outcome(status)
                generation = request.get(GENERATION, LEGACY_GENERATION)
                seconds = time.perf_counter() - started
                metrics.request_done(route, generation, method, outcome, seconds)

    return guard
