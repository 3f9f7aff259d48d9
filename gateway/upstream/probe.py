"""A reachability probe: one short upstream session, as the gateway would open it.

`probe(route, seconds)` builds the route's upstream afresh (its own connection pool, child
slot and identity, so nothing a serving gateway holds is touched), then initializes it, lists
its tools (every page) and closes it: a stdio child is started and stopped again. It answers
the question `config check` and the start-up check ask: would the gateway's own clients get an
answer from this upstream? No caller is behind it, so no principal and no client header.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from urllib.parse import urlsplit

from gateway import __version__
from gateway.config import RouteConfig, UpstreamConfig
from gateway.protocol import jsonrpc
from gateway.protocol.errors import (
    UpstreamError,
    UpstreamProtocolError,
    UpstreamRefused,
    UpstreamTimeout,
    UpstreamUnavailable,
)
from gateway.protocol.versions import LATEST_PROTOCOL_VERSION
from gateway.upstream import UpstreamRoute
from gateway.upstream.base import Transport
from gateway.upstream.client import UpstreamClient
from gateway.upstream.stdio import StdioTransport

CLIENT_INFO = {"name": "mcp-task-gateway reachability check", "version": __version__}
#: tools/list pages followed; an upstream handing out cursors for ever is not listed further.
_MAX_PAGES = 100
#: Seconds a stdio child that failed the probe gets to finish writing its stderr.
_LAST_WORDS = 1.0


class ChildFailed(UpstreamUnavailable):
    """A stdio child that exited (or stopped reading) during the probe; `stderr`: the last
    lines it wrote there, fit to print, the route's secrets replaced by `***`."""

    def __init__(self, message: str, stderr: tuple[str, ...]) -> None:
        super().__init__(message)
        self.stderr = stderr


@dataclass(frozen=True)
class Reached:
    """What an upstream that answered said of itself."""

    tools: int
    protocol_version: str | None
    #: How its 2026-07-28 callers are served: `native` or `bridge`.
    modern: str = "bridge"
    #: With `upstream.modern: auto`, what decided it (what server/discover said).
    learned: str | None = None
    #: The names it lists its tools under.
    names: tuple[str, ...] = ()


class _NoCaller:
    """The probe's listener: nothing the upstream sends on its own is wanted."""

    def on_server_message(
        self, message: jsonrpc.Message, related: jsonrpc.RequestId | None
    ) -> None:
        pass

    def on_stream(self, related: jsonrpc.RequestId, interrupted: bool) -> None:
        pass

    @property
    def busy(self) -> bool:
        return True  # a stdio child under probe is never stopped as idle

    @property
    def listening(self) -> bool:
        return False


async def probe(
    route: RouteConfig, place: str, seconds: float, config: UpstreamConfig | None = None
) -> Reached:
    """Initialize `route`'s upstream (or its member `config`) and list its tools, within
    `seconds` in all; the file writes the route at `place` (`routes[2]`).

    Raises:
        UpstreamError: no answer (`UpstreamTimeout` past `seconds`); `UpstreamRefused` when it
            answered with an HTTP error status or an error to initialize.
        ValueError: the route's upstream signing key is unusable (the message names the key).
    """
    config = config or route.single
    upstream = UpstreamRoute(route, place, config)
    made: list[Transport] = []

    def transport(sink: UpstreamClient) -> Transport:
        made.append(upstream.transport(sink, dict, None))
        return made[-1]

    client = UpstreamClient(transport, config, _NoCaller())
    step = "initialize"
    try:
        async with asyncio.timeout(seconds):
            answer = await client.initialize(_request(0, "initialize", _initialize()))
            if isinstance(answer, jsonrpc.ErrorResponse):
                raise UpstreamRefused(f"it refused to initialize: {answer.error.message}")
            await client.initialized(
                jsonrpc.Notification(jsonrpc="2.0", method="notifications/initialized")
            )
            step = "tools/list"
            tools, names = await _list_tools(client)
            step = "server/discover"
            await upstream.wire.native()  # (bounded by its own timeout; never raises)
    except TimeoutError:
        raise UpstreamTimeout(f"no answer to {step} within {seconds:g} s") from None
    except UpstreamError as exc:
        # The reasons quote what the HTTP client said, which may name the whole URL.
        message = _without_secrets(exc.message, config)
        child = made[-1] if made else None
        if isinstance(child, StdioTransport) and type(exc) is UpstreamUnavailable:
            said = await child.last_stderr(_LAST_WORDS)
            if said:
                lines = tuple(_without_secrets(line, config) for line in said)
                raise ChildFailed(message, lines) from None
        raise type(exc)(message) from None
    finally:
        await client.close()  # outside the timeout: a stdio child is always stopped
        await upstream.close()
    return Reached(tools, client.protocol_version, *upstream.wire.describe(), names=names)


def _initialize() -> jsonrpc.JsonObject:
    return {
        "protocolVersion": LATEST_PROTOCOL_VERSION,
        "capabilities": {},
        "clientInfo": CLIENT_INFO,
    }


def _request(
    request_id: jsonrpc.RequestId, method: str, params: jsonrpc.JsonObject
) -> jsonrpc.Request:
    return jsonrpc.Request(jsonrpc="2.0", id=request_id, method=method, params=params)


async def _list_tools(client: UpstreamClient) -> tuple[int, tuple[str, ...]]:
    """How many tools the upstream lists, and the names of those that have one."""
    count = 0
    names: list[str] = []
    cursor: object = None
    for _ in range(_MAX_PAGES):
        params: jsonrpc.JsonObject = {} if cursor is None else {"cursor": cursor}
        answer = await client.call(_request(client.next_id(), "tools/list", params))
        if isinstance(answer, jsonrpc.ErrorResponse):
            raise UpstreamProtocolError(f"tools/list answered error: {answer.error.message}")
        tools = answer.result.get("tools")
        if not isinstance(tools, list):
            raise UpstreamProtocolError("tools/list answered without a list of tools")
        count += len(tools)
        names += [
            t["name"] for t in tools if isinstance(t, dict) and isinstance(t.get("name"), str)
        ]
        cursor = answer.result.get("nextCursor")
        if cursor is None:
            break
    return count, tuple(names)


def _without_secrets(text: str, config: UpstreamConfig) -> str:
    """`text` with every value of `config` that may be a secret replaced by `***`: the URL's
    user, password, query and fragment, header values, a stdio child's `env`, the identity's
    key or client secret (values under 4 characters are left: they would garble the text)."""
    url = urlsplit(config.url or "")
    values = [url.username, url.password, url.query, url.fragment, config.identity.secret]
    values += [*config.headers.values(), *config.env.values()]
    for value in sorted((v for v in values if v and len(v) >= 4), key=len, reverse=True):
        text = text.replace(value, "***")
    return text
