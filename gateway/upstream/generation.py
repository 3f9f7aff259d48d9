"""Which wire a route's 2026-07-28 callers reach its upstream on (`upstream.modern`).

`native` relays them on the 2026-07-28 wire, `bridge` over 2025-11-25 sessions the gateway
holds for them. `auto`, the default, asks a Streamable HTTP upstream `server/discover` (2026-07-28)
and speaks natively to one whose answer lists 2026-07-28 among its versions, bridging any
other (any other transport is always bridged). What it learned holds for `RELEARN_SECONDS`,
then the next 2026-07-28 request asks again, so an upstream upgraded or rolled back in place is
followed. Hostile or broken upstreams bridge: a `server/discover` that errors, answers
nonsense or hangs (`DISCOVER_SECONDS`); and one that claimed 2026-07-28 and then refuses a
session-less request as a 2025-11-25 server does (`UpstreamNotModern`, `refused`) is bridged
until the next look.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable

import aiohttp

from gateway import __version__
from gateway.config import UpstreamConfig
from gateway.protocol import jsonrpc
from gateway.protocol.errors import UpstreamError
from gateway.protocol.versions import MODERN_PROTOCOL_VERSION
from gateway.upstream import native

log = logging.getLogger(__name__)

#: How long a `server/discover` may take before the upstream is bridged (until the next look).
DISCOVER_SECONDS = 5.0
#: How long what `auto` learned holds.
RELEARN_SECONDS = 60.0

_CLIENT_INFO = {"name": "mcp-task-gateway", "version": __version__}


class Bridged:
    """The wire of a route of several members: always bridged (`RouteConfig` refuses native)."""

    auto = False
    why = "a route of several members"

    async def native(self) -> bool:
        return False

    def refused(self) -> None:
        pass

    def describe(self) -> tuple[str, str | None]:
        return "bridge", None


class ModernWire:
    """What one route's upstream is spoken to in, for 2026-07-28 callers."""

    def __init__(
        self,
        route: str,
        config: UpstreamConfig,
        http: Callable[[], aiohttp.ClientSession],
        headers: Callable[[], Awaitable[dict[str, str]]],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._route = route
        self._url = config.url
        self._mode = config.modern if config.transport == "streamable_http" else "bridge"
        self._http = http
        self._headers = headers
        self._clock = clock
        self._known: bool | None = None
        self._until = float("-inf")
        #: Why the last look decided as it did (for the log and `config check`).
        self.why = "configured" if self._mode != "auto" else "not asked yet"
        self._lock = asyncio.Lock()

    @property
    def auto(self) -> bool:
        return self._mode == "auto"

    async def native(self) -> bool:
        """Whether to speak 2026-07-28 to the upstream now (with `auto`, asked when not known)."""
        if self._mode != "auto":
            return self._mode == "native"
        if self._known is not None and self._clock() < self._until:
            return self._known
        async with self._lock:  # one look at a time: a burst of callers waits for it
            if self._known is None or self._clock() >= self._until:
                self._known, self.why = await self._discover()
                self._until = self._clock() + RELEARN_SECONDS
                log.info(
                    "route %s: 2026-07-28 callers are %s: %s",
                    self._route,
                    "spoken to natively" if self._known else "bridged",
                    self.why,
                )
            return self._known

    def refused(self) -> None:
        """The upstream refused a 2026-07-28 request as a 2025-11-25 server does (it asked for
        a session, or named the version unsupported): bridged until the next look."""
        if self._mode == "auto" and self._known is not False:
            log.warning(
                "route %s: the upstream refused a 2026-07-28 request as an older server does; "
                "its 2026-07-28 callers are bridged from now on",
                self._route,
            )
            self._known, self.why = False, "it refused a 2026-07-28 request"
            self._until = self._clock() + RELEARN_SECONDS

    def describe(self) -> tuple[str, str | None]:
        """`native` or `bridge`, and with `auto` how it was learned (else None)."""
        chosen = "native" if self._known or self._mode == "native" else "bridge"
        return chosen, (self.why if self._mode == "auto" else None)

    async def _discover(self) -> tuple[bool, str]:
        assert self._url is not None  # streamable_http has one
        params: jsonrpc.JsonObject = {
            "_meta": {
                "io.modelcontextprotocol/protocolVersion": MODERN_PROTOCOL_VERSION,
                "io.modelcontextprotocol/clientCapabilities": {},
                "io.modelcontextprotocol/clientInfo": _CLIENT_INFO,
            }
        }
        request = jsonrpc.Request(
            jsonrpc="2.0", id="gateway-discover", method="server/discover", params=params
        )
        try:
            async with asyncio.timeout(DISCOVER_SECONDS):
                headers = {
                    **await self._headers(),
                    "MCP-Protocol-Version": MODERN_PROTOCOL_VERSION,
                    "Mcp-Method": "server/discover",
                }
                answer = await native.exchange(
                    self._http(), self._url, request, headers, lambda _note: None
                )
        except TimeoutError:
            return False, f"server/discover gave no answer within {DISCOVER_SECONDS:g} s"
        except UpstreamError as exc:
            return False, f"server/discover failed: {exc.message}"
        if isinstance(answer, jsonrpc.ErrorResponse):
            return False, "server/discover is not served"
        versions = answer.result.get("supportedVersions")
        if isinstance(versions, list) and MODERN_PROTOCOL_VERSION in versions:
            return True, "server/discover lists 2026-07-28"
        return False, "server/discover does not list 2026-07-28"
