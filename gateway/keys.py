"""Typed keys for what the application holds (no module-level state anywhere else)."""

from __future__ import annotations

from aiohttp import web

from .config import Settings
from .health import Health
from .metrics import Metrics
from .registry import SessionRegistry
from .route import Route
from .runner import TaskRunner
from .store import TaskStore
from .task_api import TaskApi

SETTINGS = web.AppKey("settings", Settings)
SESSIONS = web.AppKey("sessions", SessionRegistry)
ROUTES = web.AppKey("routes", dict[str, Route])
STORE = web.AppKey("store", TaskStore)
RUNNER = web.AppKey("runner", TaskRunner)
TASK_API = web.AppKey("task_api", TaskApi)
METRICS = web.AppKey("metrics", Metrics)
HEALTH = web.AppKey("health", Health)
#: Host header names served (None: any), from http.allowed_hosts and the listen address.
ALLOWED_HOSTS: web.AppKey[tuple[str, ...] | None] = web.AppKey("allowed_hosts")
