"""Settings: the whole validated file, and what each route ends up with.

`Settings` holds the sections; `route_auth` and `route_limits` say which authentication and
limits one route uses (its own where it sets them, else the gateway's).
"""

from __future__ import annotations

from pydantic import (
    Field,
    model_validator,
)

from gateway.config.auth import AuthConfig
from gateway.config.base import Section
from gateway.config.routes import RouteConfig
from gateway.config.sections import (
    AuditConfig,
    HttpConfig,
    Limits,
    ListenConfig,
    MetricsConfig,
    SessionsConfig,
    StoreConfig,
)


class Settings(Section):
    listen: ListenConfig = ListenConfig()
    store: StoreConfig = StoreConfig()
    http: HttpConfig = HttpConfig()
    sessions: SessionsConfig = SessionsConfig()
    auth: AuthConfig = AuthConfig()
    limits: Limits = Limits()
    audit: AuditConfig = AuditConfig()
    metrics: MetricsConfig = MetricsConfig()
    #: Required in a file: only a run without --config serves the demo (see load_settings).
    routes: tuple[RouteConfig, ...] = Field(min_length=1)

    @model_validator(mode="after")
    def _unique_routes(self) -> Settings:
        for attr in ("name", "http_path"):
            seen: set[str] = set()
            for route in self.routes:
                value = getattr(route, attr)
                if value in seen:
                    raise ValueError(f"two routes share the {attr.replace('http_', '')} {value!r}")
                seen.add(value)
        return self


def route_auth(settings: Settings, route: RouteConfig) -> AuthConfig:
    """The route's own section when it sets `mode` or credentials, else the gateway's (with
    any other keys the route's section sets), so a route is open only by `mode: none`."""
    own = route.auth
    if own is None:
        return settings.auth
    if not own.inherits:
        return own
    return settings.auth.model_copy(update={k: getattr(own, k) for k in own.model_fields_set})


def route_limits(settings: Settings, route: RouteConfig) -> Limits:
    # null means "inherit" here, so a route can tighten or loosen a limit but never drops
    # one by accident; a route that needs no limit sets a number beyond reach.
    changes = {k: v for k, v in route.limits.model_dump().items() if v is not None}
    return settings.limits.model_copy(update=changes)
