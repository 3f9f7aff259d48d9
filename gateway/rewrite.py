"""The few rewrites the gateway makes to what crosses it (DESIGN.md, decision 3)."""

from __future__ import annotations

from .config import LATEST_PROTOCOL_VERSION, SUPPORTED_PROTOCOL_VERSIONS
from .jsonrpc import Request, Response


def negotiate_version(initialize: Request) -> str:
    """The downstream version: the client's if we speak it, else our latest (lifecycle spec)."""
    requested = (initialize.params or {}).get("protocolVersion")
    return requested if requested in SUPPORTED_PROTOCOL_VERSIONS else LATEST_PROTOCOL_VERSION


def initialize_result(upstream: Response, downstream_version: str) -> Response:
    """The upstream's InitializeResult under the version negotiated with the client.

    The upstream may have settled on an older revision; the client and the gateway still
    speak the one they agreed on, and the gateway bridges the difference.
    """
    return upstream.model_copy(
        update={"result": {**upstream.result, "protocolVersion": downstream_version}}
    )
