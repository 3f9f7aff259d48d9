"""Who may use the console, and for what: sign-in, the session cookie, CSRF and Origin checks,
and the answer for whatever goes wrong.

Every page but the sign-in form and the static files needs a live session: without one (no
cookie, a forged one, one idle too long) a request is sent back to sign in, and nothing is
done. Every POST but the sign-in's also carries the session's CSRF token in its form, and comes
from the console's own origin as far as the browser says (`Origin`, `Sec-Fetch-Site`): a form
replayed without the token, or posted from another site, is refused with 403. A refused
sign-in counts against the admin API's limit per address (`admin.Refusals`), so the form is
no faster way to guess the token than the API. Errors are pages with the status the API would
answer: 400 for what a caller sends, 404, 409, 413, never a 500 for input.
"""

from __future__ import annotations

import hmac
from collections.abc import Sequence

from aiohttp import web
from aiohttp.typedefs import Handler, Middleware
from aiohttp.web_request import FileField
from multidict import MultiDictProxy

from gateway.console.pages import Pages, secured
from gateway.console.signin import COOKIE, Session, Sessions
from gateway.http import forwarded
from gateway.http.admin import OPERATOR
from gateway.http.admin_guard import Refusals, failure
from gateway.http.admin_query import BadQuery
from gateway.http.request_body import go_ahead
from gateway.observability.audit import audit
from gateway.observability.logs import printable
from gateway.protocol.errors import LimitExceeded, TaskError

#: Where the session of a signed-in request is kept on it.
SESSION = web.RequestKey("console.session", Session)
#: Paths (below the console's) that need no session.
_OPEN = frozenset({"sign-in", "static"})


def session_of(request: web.Request) -> Session:
    """The signed-in session `access` found for `request`."""
    return request[SESSION]


class Access:
    """Sign-in, sign-out and the console's middleware."""

    def __init__(
        self,
        token: str,
        pages: Pages,
        sessions: Sessions,
        refusals: Refusals,
        proxies: Sequence[forwarded.Network],
    ) -> None:
        self._token = token.encode()
        self._pages = pages
        self._sessions = sessions
        self._refusals = refusals
        self._proxies = proxies

    def middleware(self) -> Middleware:
        @web.middleware
        async def access(request: web.Request, handler: Handler) -> web.StreamResponse:
            # The client's address, scheme and host, as a trusted proxy says: the refusals
            # count per client, the cookie is Secure over HTTPS, Origin is checked against it.
            seen = forwarded.apply(request, self._proxies)
            return secured(await self._answer(seen, handler))

        return access

    async def _answer(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        pages = self._pages
        try:
            first = request.rel_url.path[len(pages.base) :].split("/", 1)[0]
            if first not in _OPEN:
                session = self._sessions.find(request.cookies.get(COOKIE))
                if session is None:
                    raise web.HTTPSeeOther(f"{pages.base}sign-in")
                request[SESSION] = session
                if request.method == "POST":
                    await self._check_form(request, session)
            return await handler(request)
        except web.HTTPSeeOther as exc:
            return web.Response(status=exc.status, headers={"Location": str(exc.location)})
        except TaskError as exc:
            return pages.error(409, str(exc))
        except Exception as exc:
            return pages.error(*failure(exc, request, "console"))

    async def _check_form(self, request: web.Request, session: Session) -> None:
        # Another site's post is refused unread: its sender is never told to send the form.
        given = (await posted(request)).get("csrf") if self._same_origin(request) else None
        if not isinstance(given, str) or not session.carries(given):
            path = printable(request.path, 200)
            audit("admin_csrf_refused", actor=OPERATOR, remote=request.remote, path=path)
            raise web.HTTPForbidden(
                reason="the form lacks this session's token or comes from another site; "
                "open the page again and resend it"
            )

    def _same_origin(self, request: web.Request) -> bool:
        """Whether the browser says the request comes from the console's own origin (a
        client that says nothing, a script, is judged by its token alone)."""
        site = request.headers.get("Sec-Fetch-Site")
        if site is not None and site != "same-origin":
            return False
        origin = request.headers.get("Origin")
        # Under Referrer-Policy: no-referrer, browsers send `Origin: null` with the console's
        # own form posts; Sec-Fetch-Site, which a page cannot forge, says where they came from.
        if origin is None or (origin == "null" and site == "same-origin"):
            return True
        return origin == f"{request.scheme}://{request.host}"

    async def sign_in_form(self, request: web.Request) -> web.StreamResponse:
        if self._sessions.find(request.cookies.get(COOKIE)) is not None:
            raise web.HTTPSeeOther(f"{self._pages.base}tasks")
        return self._pages.render("sign_in.html", title="Sign in")

    async def sign_in(self, request: web.Request) -> web.StreamResponse:
        # Another site's sign-in is refused unread, as in `_check_form`.
        given = (await posted(request)).get("token") if self._same_origin(request) else None
        token = given.encode("utf-8", "replace") if isinstance(given, str) else None
        if token is None or not hmac.compare_digest(token, self._token):
            try:
                self._refusals.count(request)
            except LimitExceeded as exc:
                wait = exc.headers["Retry-After"]
                message = f"too many refused sign-ins from this address; retry after {wait} s"
                return self._pages.error(429, message, exc.headers)
            return self._pages.render(
                "sign_in.html", 401, title="Sign in", refused="That is not the admin token."
            )
        self._sessions.close(request.cookies.get(COOKIE))  # a session signed in again is new
        cookie, _ = self._sessions.open()
        audit("console_signed_in", actor=OPERATOR, remote=request.remote)
        answer = web.Response(status=303, headers={"Location": f"{self._pages.base}tasks"})
        answer.set_cookie(
            COOKIE,
            cookie,
            path=self._pages.base,
            httponly=True,
            samesite="Strict",
            secure=request.secure,
        )
        return answer

    async def sign_out(self, request: web.Request) -> web.StreamResponse:
        self._sessions.close(request.cookies.get(COOKIE))
        audit("console_signed_out", actor=OPERATOR, remote=request.remote)
        answer = web.Response(status=303, headers={"Location": f"{self._pages.base}sign-in"})
        answer.del_cookie(COOKIE, path=self._pages.base)
        return answer


async def posted(request: web.Request) -> MultiDictProxy[str | bytes | bytearray | FileField]:
    """The request's form, read by aiohttp once its sender has its `100 Continue` (if it waits
    for one: `request_body.go_ahead`), unless it announces more than the listener takes.

    Raises:
        web.HTTPRequestEntityTooLarge: a form over `admin.MAX_FORM_BYTES` (413).
        BadQuery: a form aiohttp cannot read (bytes that are not its charset, a charset
            that does not exist, multipart without a boundary), which anyone may send
            the sign-in page: a 400, not a 500 and a traceback.
    """
    if request.content_length is not None and request.content_length > request.client_max_size:
        raise web.HTTPRequestEntityTooLarge(request.client_max_size, request.content_length)
    await go_ahead(request)
    try:
        return await request.post()
    except (UnicodeDecodeError, LookupError, ValueError) as exc:
        raise BadQuery(f"the form cannot be read: {printable(str(exc), 120)}") from None
