"""The operators' console over real HTTP (the browser's part is in test_console_browser.py):
where it answers, the headers of every answer, sign-in into a strict cookie, CSRF, and what a
caller makes up answered with a 4xx page, never a 500.

DESIGN, "The operators' console": "Served at `/admin/console/` on the admin listener (so only
where `admin:` is configured; 404 on the main port). Sign-in with the admin token in a form;
the session is an `HttpOnly`, `SameSite=Strict` cookie (`Secure` when the request came over
HTTPS or a trusted proxy says so), idle-expiring; every state-changing request carries a CSRF
token; sign-out; the refusal rate limit of the admin API applies."
"""

from __future__ import annotations

import asyncio
import logging
import tomllib
from collections.abc import AsyncIterator
from fnmatch import fnmatch

import aiohttp
import pytest
from yarl import URL

from gateway.console import signin
from gateway.console.pages import HEADERS
from gateway.console.signin import COOKIE, IDLE_SECONDS, MAX_SESSIONS, Sessions
from gateway.http import admin, admin_guard

from .conftest import DEMO, ROOT, StartGateway, free_port
from .console import CONSOLE, TOKEN, Console, console_gateway, csrf_in
from .helpers import answer_to, audit_events, expecting, headers, open_session


@pytest.fixture
async def console(
    start_gateway: StartGateway, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[Console]:
    async with console_gateway(start_gateway, monkeypatch) as started:
        yield started


def browser() -> aiohttp.ClientSession:
    """A client that keeps cookies for 127.0.0.1, as a browser does."""
    return aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True))


def assert_console_headers(resp: aiohttp.ClientResponse) -> None:
    for name, value in HEADERS.items():
        assert resp.headers[name] == value, name
    policy = resp.headers["Content-Security-Policy"]
    assert "default-src 'none'" in policy and "frame-ancestors 'none'" in policy


async def test_the_console_answers_on_the_admin_listener_only_with_strict_headers(
    console: Console,
) -> None:
    async with browser() as http:
        async with http.get(f"{console.main}{CONSOLE}") as on_main:
            assert on_main.status == 404
        async with http.get(console.url, allow_redirects=False) as anonymous:
            assert anonymous.status == 303
            assert anonymous.headers["Location"] == f"{CONSOLE}sign-in"
            assert_console_headers(anonymous)
        async with http.get(f"{console.url}sign-in") as form:
            assert form.status == 200 and form.content_type == "text/html"
            assert_console_headers(form)
            html = await form.text()
            assert 'name="token"' in html and "http://" not in html and "https://" not in html
        for name, kind in (("console.css", "text/css"), ("console.js", "text/javascript")):
            async with http.get(f"{console.url}static/{name}") as static:
                assert static.status == 200 and static.content_type == kind
                assert_console_headers(static)
        async with http.get(f"{console.url}static/../../tasks") as outside:
            assert outside.status in (401, 404)
        # The API keeps its Bearer token, and a console cookie opens none of it.
        await console.signed_in(http)
        async with http.get(f"{console.admin}/admin/tasks") as api:
            assert api.status == 401
        bearer = {"Authorization": f"Bearer {TOKEN}"}
        async with http.get(f"{console.admin}/admin/tasks", headers=bearer) as api:
            assert api.status == 200


async def test_sign_in_sets_a_strict_http_only_cookie_and_sign_out_ends_the_session(
    console: Console, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, "gateway.audit")
    async with browser() as http:
        async with http.post(f"{console.url}sign-in", data={"token": TOKEN + "x"}) as wrong:
            assert wrong.status == 401
            assert "not the admin token" in await wrong.text()
        assert len(http.cookie_jar) == 0
        form = {"token": TOKEN}
        async with http.post(f"{console.url}sign-in", data=form, allow_redirects=False) as right:
            assert right.status == 303 and right.headers["Location"] == f"{CONSOLE}tasks"
            cookie = right.headers["Set-Cookie"]
        attributes = {part.strip().split("=")[0].lower() for part in cookie.split(";")}
        assert {"httponly", "samesite", "path"} <= attributes and "secure" not in attributes
        assert "SameSite=Strict" in cookie and f"Path={CONSOLE}" in cookie
        assert TOKEN not in cookie
        async with http.get(f"{console.url}tasks") as page:
            assert page.status == 200
            csrf = csrf_in(await page.text())
        async with http.post(f"{console.url}sign-out", data={"csrf": csrf}) as out:
            assert out.status == 200 and out.url.path == f"{CONSOLE}sign-in"
        # The cookie, kept and sent again, opens nothing now.
        raw = cookie.split(";")[0]
        async with aiohttp.ClientSession() as replay:
            async with replay.get(
                f"{console.url}tasks", headers={"Cookie": raw}, allow_redirects=False
            ) as after:
                assert after.status == 303 and after.headers["Location"] == f"{CONSOLE}sign-in"
    assert len(audit_events(caplog, "admin_auth_failed")) == 1
    assert [e["actor"] for e in audit_events(caplog, "console_signed_in")] == ["operator"]
    assert len(audit_events(caplog, "console_signed_out")) == 1
    assert TOKEN not in caplog.text and csrf not in caplog.text


async def test_a_trusted_proxy_saying_https_makes_the_cookie_secure(
    start_gateway: StartGateway, monkeypatch: pytest.MonkeyPatch
) -> None:
    http_section = {"trusted_proxies": ["127.0.0.1/32"]}
    async with console_gateway(start_gateway, monkeypatch, http=http_section) as console:
        async with aiohttp.ClientSession() as http:
            for proto, secure in (("https", True), ("http", False)):
                async with http.post(
                    f"{console.url}sign-in",
                    data={"token": TOKEN},
                    headers={"X-Forwarded-Proto": proto},
                    allow_redirects=False,
                ) as resp:
                    assert resp.status == 303
                    assert ("; Secure" in resp.headers["Set-Cookie"]) is secure, proto


async def test_refused_sign_ins_share_the_admin_apis_limit_and_the_right_token_still_works(
    console: Console, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, "gateway.audit")
    statuses = []
    async with browser() as http:
        for guess in range(admin_guard.FAILURE_BURST + 3):
            form = {"token": f"guess-{guess}"}
            async with http.post(f"{console.url}sign-in", data=form) as resp:
                statuses.append(resp.status)
                assert_console_headers(resp)
        bearer = {"Authorization": "Bearer another-guess"}
        async with http.get(f"{console.admin}/admin/tasks", headers=bearer) as api:
            assert api.status == 429
        async with http.post(f"{console.url}sign-in", data={"token": "again"}) as limited:
            assert limited.status == 429 and int(limited.headers["Retry-After"]) >= 1
            assert "too many refused sign-ins" in await limited.text()
        await console.signed_in(http)
    assert statuses == [401] * admin_guard.FAILURE_BURST + [429] * 3
    assert len(audit_events(caplog, "admin_auth_failed")) == admin_guard.FAILURE_BURST


async def test_a_post_without_its_csrf_token_or_from_another_site_is_403_and_does_nothing(
    console: Console, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, "gateway.audit")
    slow = await console.task("alice", "slow", {"seconds": 60})
    cancel = f"{console.url}tasks/{slow}/cancel"
    async with browser() as http:
        csrf = await console.signed_in(http)
        refusals = [
            ({}, {}),
            ({"csrf": "forged"}, {}),
            ({"csrf": csrf + "x"}, {}),
            ({"csrf": csrf}, {"Origin": "https://evil.example"}),
            ({"csrf": csrf}, {"Origin": "null"}),
            ({"csrf": csrf}, {"Sec-Fetch-Site": "cross-site"}),
            ({"csrf": csrf}, {"Origin": "null", "Sec-Fetch-Site": "same-site"}),
        ]
        for form, extra in refusals:
            async with http.post(cancel, data=form, headers=extra) as refused:
                assert refused.status == 403, (form, extra)
                assert_console_headers(refused)
        async with http.get(f"{console.url}tasks/{slow}") as page:
            assert 'class="status working"' in await page.text()
        async with http.get(cancel) as confirm:
            assert confirm.status == 200
            assert "Cancel task" in await confirm.text()
        # A browser's own form post under Referrer-Policy: no-referrer.
        own = {"Origin": "null", "Sec-Fetch-Site": "same-origin"}
        async with http.post(cancel, data={"csrf": csrf}, headers=own) as done:
            assert done.status == 200 and done.url.path == f"{CONSOLE}tasks/{slow}"
            assert "cancelled" in await done.text()
        async with http.post(cancel, data={"csrf": csrf}) as again:
            assert again.status == 409 and "is cancelled already" in await again.text()
    assert len(audit_events(caplog, "admin_csrf_refused")) == len(refusals)
    (cancelled,) = audit_events(caplog, "task_cancelled")
    assert cancelled["actor"] == "operator" and cancelled["principal"] == "alice"


@pytest.mark.parametrize(
    ("path", "says"),
    [
        ("tasks?status=done", "status: one of working"),
        ("tasks?principal=a%00b", "without NUL"),
        ("tasks?route=a&route=b", "route: given twice"),
        ("tasks?older_than=1w", "not an age such as"),
        ("tasks?a[b][c][d][e][f]=1", "unknown parameter"),
        ("tasks?limit=" + "9" * 5000, "limit: must be 1 to 1000 characters"),
        ("tasks?limit=0", "limit: a whole number"),
        ("sessions?status=working", "unknown parameter"),
        ("purge?status=working", "finished tasks only"),
        ("tasks/a%00b", "without NUL"),
        ("tasks/" + "x" * 1001, "1 to 1000 characters"),
        ("tasks/nope", "no task nope"),
        ("tasks/nope/cancel", "no task nope"),
        ("nothing", "Not Found"),
    ],
)
async def test_what_an_operator_makes_up_is_a_4xx_page_that_says_why(
    console: Console, path: str, says: str
) -> None:
    async with browser() as http:
        await console.signed_in(http)
        async with http.get(f"{console.url}{path}") as resp:
            assert 400 <= resp.status < 500 and resp.content_type == "text/html"
            assert says in await resp.text()
            assert_console_headers(resp)


async def test_huge_forms_long_ids_wrong_methods_and_markup_never_make_a_500(
    console: Console, caplog: pytest.LogCaptureFixture
) -> None:
    async with browser() as http:
        csrf = await console.signed_in(http)
        huge = {"csrf": csrf, "route": "r" * 100_000}
        async with http.post(f"{console.url}purge", data=huge) as too_large:
            assert too_large.status == 413
        async with http.get(f"{console.url}tasks/{'x' * 10_000}") as long_id:
            assert 400 <= long_id.status < 500
        async with http.put(f"{console.url}tasks") as wrong_method:
            assert wrong_method.status == 405
        markup = "<script>alert(1)</script>"
        async with http.get(f"{console.url}tasks", params={"principal": markup}) as escaped:
            html = await escaped.text()
            assert escaped.status == 200 and markup not in html
            assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
        async with http.post(f"{console.url}purge", data={"csrf": csrf, "route": "a\x00"}) as nul:
            assert nul.status == 400
    assert "Traceback" not in caplog.text and "x" * 1000 not in caplog.text


FORMS = "application/x-www-form-urlencoded"


@pytest.mark.parametrize(
    ("content_type", "body"),
    [
        (FORMS, b"token=\xff"),  # not UTF-8
        (f"{FORMS}; charset=bogus", b"token=x"),  # no such charset
        ("multipart/form-data", b"xx"),  # no boundary
    ],
    ids=["not-utf8", "bogus-charset", "no-boundary"],
)
async def test_a_form_aiohttp_cannot_read_is_a_400_for_anyone_and_after_sign_in(
    console: Console, caplog: pytest.LogCaptureFixture, content_type: str, body: bytes
) -> None:
    """The sign-in form takes a post from anyone: one aiohttp could not decode was a 500
    and a traceback, for each such request."""
    async with browser() as http:
        kind = {"Content-Type": content_type}
        async with http.post(f"{console.url}sign-in", data=body, headers=kind) as anonymous:
            assert anonymous.status == 400
            assert "the form cannot be read" in await anonymous.text()
        await console.signed_in(http)
        for action in ("purge", "sign-out"):
            async with http.post(f"{console.url}{action}", data=body, headers=kind) as signed:
                assert signed.status == 400, action
    assert "Traceback" not in caplog.text and "internal error" not in caplog.text


FORM = b"Content-Type: application/x-www-form-urlencoded"
FOREIGN = b"Origin: https://evil.example"


async def operator(console: Console) -> tuple[bytes, str]:
    """A signed-in session's Cookie line and its CSRF token."""
    async with browser() as http:
        csrf = await console.signed_in(http)
        cookie = http.cookie_jar.filter_cookies(URL(console.url))[COOKIE].value
    return f"Cookie: {COOKIE}={cookie}".encode(), csrf


@pytest.mark.parametrize(
    ("method", "path", "signed_in", "lines", "status"),
    [
        ("POST", "sign-in", False, [FOREIGN], 401),
        ("POST", "sign-in", False, [b"Sec-Fetch-Site: cross-site"], 401),
        ("POST", "purge", False, [], 303),
        ("POST", "purge", True, [FOREIGN], 403),
        ("POST", "purge", True, [b"Origin: null"], 403),
        ("PUT", "tasks", False, [], 303),  # no route for the method: the router's own answer
        ("PUT", "tasks", True, [], 405),
        ("POST", "nothing", False, [], 303),  # nor for the path
        ("POST", "/admin/console", False, [], 303),  # the prefix alone
    ],
    ids=[
        "sign-in-origin", "sign-in-fetch-site", "no-session", "origin", "null-origin",
        "method", "method-signed-in", "path", "prefix",
    ],
)  # fmt: skip
async def test_a_console_request_refused_before_its_form_is_read_gets_no_100_continue(
    console: Console,
    method: str,
    path: str,
    signed_in: bool,
    lines: list[bytes],
    status: int,
) -> None:
    """aiohttp sent `100 Continue` before the console's checks: a form from another site, or
    from nobody signed in, was asked for, and only then refused."""
    cookie, csrf = await operator(console) if signed_in else (b"X-Not-Signed-In: 1", "")
    url = f"{console.admin}{path}" if path.startswith("/") else f"{console.url}{path}"
    body = f"csrf={csrf}&token={TOKEN}".encode()
    answer, _, writer = await expecting(url, [FORM, cookie, *lines], body, method=method)
    writer.close()
    assert answer.startswith(f"HTTP/1.1 {status} ".encode()), answer


async def test_a_form_over_the_limit_is_413_before_any_100_continue(console: Console) -> None:
    cookie, csrf = await operator(console)
    body = f"csrf={csrf}&route={'r' * admin.MAX_FORM_BYTES}".encode()
    answer, _, writer = await expecting(f"{console.url}purge", [FORM, cookie], body)
    writer.close()
    assert answer.startswith(b"HTTP/1.1 413 "), answer


async def test_a_console_form_that_passes_its_checks_gets_100_continue_then_its_answer(
    console: Console,
) -> None:
    sign_in = f"token={TOKEN}".encode()
    go_ahead, reader, writer = await expecting(f"{console.url}sign-in", [FORM], sign_in)
    try:
        assert go_ahead == b"HTTP/1.1 100 Continue\r\n\r\n"
        writer.write(sign_in)
        head, _ = await answer_to(reader)
    finally:
        writer.close()
    assert head.startswith(b"HTTP/1.1 303 ") and f"Set-Cookie: {COOKIE}=".encode() in head
    cookie, csrf = await operator(console)
    purge = f"csrf={csrf}&status=completed".encode()
    go_ahead, reader, writer = await expecting(f"{console.url}purge", [FORM, cookie], purge)
    try:
        assert go_ahead == b"HTTP/1.1 100 Continue\r\n\r\n"
        writer.write(purge)
        head, page = await answer_to(reader)
    finally:
        writer.close()
    assert head.startswith(b"HTTP/1.1 200 ") and b"0 finished tasks purged." in page


async def test_a_client_gone_before_its_form_came_leaves_no_error_in_the_log(
    console: Console, caplog: pytest.LogCaptureFixture
) -> None:
    """The sign-in form takes a post from anyone: one whose sender left halfway through the
    form (or once told `100 Continue`) was an ERROR with a traceback, each time."""
    for sent in (b"token=", b""):
        _, _, writer = await expecting(f"{console.url}sign-in", [FORM], b"token=" + b"x" * 90)
        writer.write(sent)
        await writer.drain()
        writer.transport.abort()
    await asyncio.sleep(0.3)  # the handler notices once the loop reads the reset
    async with browser() as http:
        await console.signed_in(http)
    assert "ERROR" not in caplog.text and "Traceback" not in caplog.text


def test_every_template_and_static_file_ships_in_an_installed_package() -> None:
    # The image and a pip install read the pages from the package, not from this checkout.
    setuptools = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    patterns = setuptools["package-data"]["gateway.console"]
    package = ROOT / "gateway" / "console"
    files = [
        path.relative_to(package).as_posix()
        for path in package.rglob("*")
        if path.is_file() and path.suffix not in (".py", ".pyc")
    ]
    assert len(files) > 10
    assert [f for f in files if not any(fnmatch(f, pattern) for pattern in patterns)] == []


def test_a_session_ends_when_idle_and_the_oldest_makes_room_at_the_cap() -> None:
    now = [0.0]
    sessions = Sessions(clock=lambda: now[0])
    cookie, session = sessions.open()
    now[0] += IDLE_SECONDS - 1
    assert sessions.find(cookie) is session  # seen again: its idle time starts over
    now[0] += IDLE_SECONDS - 1
    assert sessions.find(cookie) is session
    now[0] += IDLE_SECONDS + 1
    assert sessions.find(cookie) is None
    assert sessions.find("forged") is None and sessions.find("x" * 10_000) is None
    cookies = [sessions.open()[0] for _ in range(MAX_SESSIONS + 1)]
    assert len(sessions) == MAX_SESSIONS
    assert sessions.find(cookies[0]) is None and sessions.find(cookies[-1]) is not None
    sessions.close(cookies[-1])
    assert sessions.find(cookies[-1]) is None


async def test_an_operator_ends_a_session_after_a_confirmation_and_its_client_gets_404(
    console: Console, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, "gateway.audit")
    async with console.client("alice") as alice, browser() as http:
        session = await open_session(alice, console.mcp)
        csrf = await console.signed_in(http)
        async with http.get(f"{console.url}sessions", params={"principal": "alice"}) as page:
            html = await page.text()
            assert session in html and f"sessions/{session}/end" in html
        async with http.get(f"{console.url}sessions/{session}/end") as confirm:
            assert session in await confirm.text()
        end = f"{console.url}sessions/{session}/end"
        async with http.post(end, data={"csrf": csrf}, headers={"Origin": console.admin}) as done:
            assert done.status == 200 and done.url.path == f"{CONSOLE}sessions"
            assert session not in await done.text()
        ping = {"jsonrpc": "2.0", "id": 5, "method": "ping"}
        async with alice.post(console.mcp, json=ping, headers=headers(session)) as after:
            assert after.status == 404
        async with http.post(end, data={"csrf": csrf}) as again:
            assert again.status == 404
    (ended,) = audit_events(caplog, "session_ended")
    assert ended["actor"] == "operator"


async def test_the_routes_page_shows_each_upstream_its_running_tasks_and_policy(
    console: Console,
) -> None:
    async with browser() as http:
        await console.signed_in(http)
        async with http.get(f"{console.url}routes") as before:
            html = await before.text()
        assert 'class="unknown">not called yet' in html
        await console.task("alice", "slow", {"seconds": 60})
        await console.task("bob", "slow", {"seconds": 60})
        async with http.get(f"{console.url}routes") as after:
            html = await after.text()
    assert 'demo: <span class="up">up</span>' in html
    assert '<td class="running">2</td>' in html
    for key in ("sync_window_ms", "default_ttl_ms", "time_limit_seconds", "requests_per_second"):
        assert f"<dt>{key}</dt>" in html


async def test_a_purge_is_confirmed_with_the_count_its_filters_match(
    console: Console, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, "gateway.audit")
    for who in ("alice", "bob", "bob"):
        await console.finished(await console.task(who, "echo", {"text": "hi"}))
    await console.task("bob", "slow", {"seconds": 60})
    async with browser() as http:
        csrf = await console.signed_in(http)
        async with http.get(f"{console.url}purge", params={"principal": "bob"}) as confirm:
            html = await confirm.text()
        assert "2 finished tasks match" in html and "principal bob" in html
        form = {"csrf": csrf, "principal": "bob", "route": ""}
        async with http.post(f"{console.url}purge", data=form) as done:
            assert "2 finished tasks purged." in await done.text()
        async with http.get(f"{console.url}purge") as left:
            assert "1 finished task matches" in await left.text()
    (purged,) = audit_events(caplog, "tasks_purged")
    assert purged == {**purged, "actor": "operator", "count": 2, "principal": "bob"}


async def test_any_replicas_console_shows_and_cancels_every_replicas_tasks(
    pg_url: str, start_gateway: StartGateway, monkeypatch: pytest.MonkeyPatch
) -> None:
    # DESIGN: "With replicas, any replica's console shows every replica's tasks (it reads
    # the store)." The task runs on A; B's console lists it and cancels it.
    store = {"backend": "postgres", "url": pg_url}
    async with (
        console_gateway(start_gateway, monkeypatch, store=store) as a,
        console_gateway(start_gateway, monkeypatch, store=store) as b,
        browser() as http,
    ):
        on_a = await a.task("alice", "slow", {"seconds": 60})
        csrf = await b.signed_in(http)
        async with http.get(f"{b.url}tasks") as listed:
            assert on_a in await listed.text()
        cancel = f"{b.url}tasks/{on_a}/cancel"
        async with http.post(cancel, data={"csrf": csrf}) as done:
            assert done.status == 200
        assert await a.finished(on_a) == "cancelled"


async def test_a_forged_or_expired_cookie_is_sent_back_to_sign_in_and_nothing_is_done(
    console: Console, monkeypatch: pytest.MonkeyPatch
) -> None:
    slow = await console.task("alice", "slow", {"seconds": 60})
    forged = {"Cookie": f"{COOKIE}=" + "A" * 43}
    async with aiohttp.ClientSession() as http:
        for path in ("tasks", f"tasks/{slow}"):
            async with http.get(f"{console.url}{path}", headers=forged) as resp:
                assert resp.status == 200 and resp.url.path == f"{CONSOLE}sign-in"
    async with browser() as http:
        csrf = await console.signed_in(http)
        monkeypatch.setattr(signin, "IDLE_SECONDS", -1)
        cancel = f"{console.url}tasks/{slow}/cancel"
        async with http.post(cancel, data={"csrf": csrf}, allow_redirects=False) as expired:
            assert expired.status == 303 and expired.headers["Location"] == f"{CONSOLE}sign-in"
        monkeypatch.undo()
        async with http.get(f"{console.url}tasks", allow_redirects=False) as still:
            assert still.status == 303  # an ended session stays ended
    assert await console.status(slow) == "working"


async def test_a_route_of_members_shows_each_members_state_and_which_one_runs_a_task(
    start_gateway: StartGateway, monkeypatch: pytest.MonkeyPatch
) -> None:
    # DESIGN: tasks show their "member upstream"; routes, "each upstream's state from
    # `upstream_up`". Member b listens nowhere: it is down once the route has tried it.
    nowhere = {"transport": "streamable_http", "url": f"http://127.0.0.1:{free_port()}/mcp"}
    work = {"name": "work", "upstreams": [{"name": "a", **DEMO}, {"name": "b", **nowhere}]}
    async with console_gateway(start_gateway, monkeypatch, [work]) as console:
        task = await console.task("alice", "a__slow", {"seconds": 60}, route="work")
        async with browser() as http:
            await console.signed_in(http)
            async with http.get(f"{console.url}tasks") as page:
                html = await page.text()
            async with http.get(f"{console.url}routes") as routes:
                shown = await routes.text()
    row = html[html.index(task) :]
    assert row.index("<td>a</td>") < row.index("<td>a__slow</td>")
    assert 'a: <span class="up">up</span>' in shown
    assert 'b: <span class="down">down</span>' in shown
