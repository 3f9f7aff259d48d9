"""The configured routes' paths, as a reload leaves them (see `gateway.http.reload`).

aiohttp's router is frozen once the app starts, so these paths are not registered with it:
one catch-all resource (`urls.configured`) asks this table about every path the fixed ones
(/healthz, /metrics, ...) do not serve. A path leads to a route's MCP endpoint, to the RFC 9728
metadata of a route with auth mode oauth, or, for a route a reload removed, to that route as it
was, for the sessions still open on it and only until the last of them ends.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from gateway.route import Route
from gateway.security.oauth import shared_metadata


class RouteTable:
    """Path to route and path to metadata document, for the routes in force."""

    def __init__(self, routes: dict[str, Route]) -> None:
        #: The routes served, by name: the app's `ROUTES` itself, which `replace` updates.
        self.routes = routes
        self._paths: dict[str, Route] = {}
        self._documents: dict[str, bytes] = {}
        self._retiring: dict[str, Route] = {}
        self._index()

    def replace(self, routes: Mapping[str, Route], removed: Iterable[Route] = ()) -> None:
        """Serve `routes` from now on. The `removed` ones keep their paths for the sessions
        opened on them, until `retire` (a path a new route takes is the new route's)."""
        for route in removed:
            self._retiring[route.path] = route
        self.routes.clear()
        self.routes.update(routes)
        self._index()

    def _index(self) -> None:
        self._paths = {route.path: route for route in self.routes.values()}
        for path in self._paths:
            self._retiring.pop(path, None)
        protected = [r.resource for r in self.routes.values() if r.resource is not None]
        documents = {entry.metadata_path: entry.metadata for entry in protected}
        if (shared := shared_metadata(protected)) is not None:
            documents[shared[0]] = shared[1]
        self._documents = documents

    def route(self, path: str) -> Route | None:
        """The route served at `path`."""
        return self._paths.get(path)

    def retiring(self, path: str) -> Route | None:
        """The removed route whose sessions may still use `path`."""
        return self._retiring.get(path)

    def retire(self, route: Route) -> None:
        """The last session of a removed `route` has ended: its path answers 404 from now on."""
        if self._retiring.get(route.path) is route:
            del self._retiring[route.path]

    def document(self, path: str) -> bytes | None:
        """The protected-resource metadata served at `path`."""
        return self._documents.get(path)
