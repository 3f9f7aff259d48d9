"""Typed keys for what the application holds (no module-level state anywhere else)."""

from __future__ import annotations

from aiohttp import web

from .config import Settings
from .session import SessionRegistry
from .upstream import UpstreamRoute

SETTINGS = web.AppKey("settings", Settings)
SESSIONS = web.AppKey("sessions", SessionRegistry)
UPSTREAMS = web.AppKey("upstreams", dict[str, UpstreamRoute])
