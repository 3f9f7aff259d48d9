"""Who may use the admin listener: the Bearer token on the API, counted refusals per address.

The console (`gateway.console`) signs its operators in itself; its refused sign-ins count
against the same `Refusals`, so the form is no way around the limit. Errors of the API's
handlers become its JSON answers here, in one place: never a 500 for what a caller sends.
"""

from __future__ import annotations

import hmac
import logging
from collections.abc import Mapping

from aiohttp import web
from aiohttp.typedefs import Handler, Middleware

from gateway.http.admin_query import BadQuery
from gateway.observability.audit import audit
from gateway.observability.logs import printable
from gateway.protocol.errors import GatewayError, LimitExceeded
from gateway.security.limits import RateLimiter

log = logging.getLogger("gateway.http.admin")

#: Failed authentications per client address: a burst, then this many a second.
FAILURE_BURST = 10
FAILURE_RATE = 0.2


class Unknown(Exception):
    """The id names no task or session (404); the message says which."""


def error(status: int, message: str, headers: Mapping[str, str] | None = None) -> web.Response:
    return web.json_response({"error": message}, status=status, headers=headers)


class Refusals:
    """Failed authentications per client address, the API's and the console's sign-in alike:
    a burst, then one every `1 / FAILURE_RATE` seconds."""

    def __init__(self) -> None:
        self._limiter = RateLimiter(FAILURE_RATE, FAILURE_BURST)

    def count(self, request: web.Request) -> None:
        """One refusal of `request`, audited as `admin_auth_failed` while within the limit.

        Raises:
            LimitExceeded: past the burst; nothing is audited (its Retry-After says when).
        """
        self._limiter.check(str(request.remote))
        audit("admin_auth_failed", remote=request.remote, path=printable(request.path, 200))


def guard(token: str, refusals: Refusals, console: web.Application | None) -> Middleware:
    expected = f"Bearer {token}".encode()

    @web.middleware
    async def check(request: web.Request, handler: Handler) -> web.StreamResponse:
        if console is not None and console in request.match_info.apps:
            return await handler(request)  # its own sign-in and cookie (gateway.console)
        try:
            given = request.headers.get("Authorization", "").encode("utf-8", "surrogateescape")
        except UnicodeEncodeError:
            given = b""
        if not hmac.compare_digest(given, expected):
            try:
                refusals.count(request)
            except LimitExceeded as exc:
                return error(
                    429,
                    "too many refused requests from this address; retry after "
                    f"{exc.headers['Retry-After']} s",
                    exc.headers,
                )
            return error(
                401,
                "the admin API needs Authorization: Bearer <the token in admin.token_env>",
                {"WWW-Authenticate": "Bearer"},
            )
        try:
            return await handler(request)
        except Exception as exc:
            return error(*failure(exc, request, "admin"))

    return check


def failure(
    exc: Exception, request: web.Request, where: str
) -> tuple[int, str, Mapping[str, str] | None]:
    """The status, message and headers an admin handler's `exc` is answered with, by the API
    and the console alike (`where` names which in the log): never a 500 for what a caller
    sends; anything else is logged with its traceback."""
    if isinstance(exc, BadQuery):
        return 400, str(exc), None
    if isinstance(exc, Unknown):
        return 404, str(exc), None
    if isinstance(exc, web.HTTPException):  # the router's 404 and 405, a form too large
        return exc.status, f"{exc.reason}: {request.method} {printable(request.path, 200)}", None
    if isinstance(exc, ConnectionResetError):  # the client left before its whole form came
        return 400, "the connection closed before the request's body came", None
    if isinstance(exc, GatewayError):  # the store is unreachable just now
        return exc.http_status, exc.message, exc.headers
    log.exception("%s %s %s: internal error", where, request.method, printable(request.path))
    return 500, "internal error (the gateway's log has the details)", None
