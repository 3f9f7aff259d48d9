"""How the console answers: pages from its templates, and the headers every answer carries.

Templates are Jinja2 with autoescaping on for every one, so whatever a task or a session holds
(a principal, a tool's name, a status message) reaches the page as text, never as markup. The
stylesheet and the one script are files of this package, served from the console's own path:
the Content-Security-Policy allows nothing else, from anywhere.
"""

from __future__ import annotations

from collections.abc import Mapping
from importlib import resources
from typing import Any

import jinja2
from aiohttp import web

#: Every answer of the console: nothing from another origin, no framing, no referrer, no
#: caching of pages that name principals and tasks.
HEADERS: Mapping[str, str] = {
    "Content-Security-Policy": (
        "default-src 'none'; style-src 'self'; script-src 'self'; img-src 'self'; "
        "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
    "X-Frame-Options": "DENY",
}

_STATIC = {"console.css": "text/css", "console.js": "text/javascript"}


class Pages:
    """The console's templates and static files, read once from the package."""

    def __init__(self, base: str) -> None:
        """`base` is the console's path, ending in `/`; every link starts with it."""
        self.base = base
        self._env = jinja2.Environment(
            loader=jinja2.PackageLoader("gateway.console", "templates"),
            autoescape=True,
            undefined=jinja2.StrictUndefined,
            trim_blocks=True,
            lstrip_blocks=True,
        )
        self._env.filters["columns"] = columns
        files = resources.files("gateway.console") / "static"
        self._static = {name: (files / name).read_bytes() for name in _STATIC}

    def render(
        self,
        name: str,
        status: int = 200,
        headers: Mapping[str, str] | None = None,
        **context: Any,
    ) -> web.Response:
        """The template `name` filled with `context` (and `base`), as an HTML answer."""
        context.setdefault("csrf", None)
        html = self._env.get_template(name).render(base=self.base, **context)
        return web.Response(
            text=html, status=status, content_type="text/html", charset="utf-8", headers=headers
        )

    def error(
        self, status: int, message: str, headers: Mapping[str, str] | None = None
    ) -> web.Response:
        """A page saying what went wrong and what to change."""
        return self.render(
            "error.html", status, headers, title=str(status), code=status, message=message
        )

    async def static(self, request: web.Request) -> web.Response:
        name = request.match_info["name"]
        if name not in self._static:
            raise web.HTTPNotFound()
        return web.Response(body=self._static[name], content_type=_STATIC[name])


def columns(rows: Any) -> list[str] | None:
    """The keys of `rows` in the order they first appear, when it is a list of mappings (a
    task's history, its questions): shown as a table. None for anything else."""
    if not isinstance(rows, list) or not rows or not all(isinstance(r, Mapping) for r in rows):
        return None
    return list(dict.fromkeys(key for row in rows for key in row))


def secured(response: web.StreamResponse) -> web.StreamResponse:
    """`response` with the console's `HEADERS`."""
    response.headers.update(HEADERS)
    return response
