"""Settings: the whole validated file, and what each route ends up with.

`Settings` holds the sections; `route_auth` and `route_limits` say which authentication and
limits one route uses (its own where it sets them, else the gateway's), `route_auth_key`
where the file writes that authentication, and `route_key` where it writes the route.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Sequence

from pydantic import (
    Field,
    model_validator,
)

from gateway.config.auth import AuthConfig
from gateway.config.base import Section, refusal
from gateway.config.routes import RouteConfig
from gateway.config.sections import (
    AdminConfig,
    AuditConfig,
    HttpConfig,
    Limits,
    ListenConfig,
    MetricsConfig,
    SessionsConfig,
    ShutdownConfig,
    StoreConfig,
    TracingConfig,
)


class Settings(Section):
    listen: ListenConfig = ListenConfig()
    store: StoreConfig = StoreConfig()
    http: HttpConfig = HttpConfig()
    shutdown: ShutdownConfig = ShutdownConfig()
    sessions: SessionsConfig = SessionsConfig()
    auth: AuthConfig = AuthConfig()
    limits: Limits = Limits()
    audit: AuditConfig = AuditConfig()
    metrics: MetricsConfig = MetricsConfig()
    #: Off (None) unless configured; needs the optional extra `otel`.
    tracing: TracingConfig | None = None
    #: The operators' admin API; off when absent.
    admin: AdminConfig | None = None
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

    @model_validator(mode="after")
    def _route_identities(self) -> Settings:
        shared = None
        for i, route in enumerate(self.routes):
            auth = route_auth(self, route)
            mode = auth.mode
            if auth.oauth is not None and auth.oauth.shared_resource:
                if shared is not None and shared != auth.oauth:
                    # One document at the root form cannot describe two sections.
                    raise refusal(
                        f"routes[{i}].auth.oauth.shared_resource",
                        "routes that share the gateway's resource must share one oauth section",
                    )
                shared = auth.oauth
            for key in ("required_scopes", "tool_scopes"):
                if getattr(route, key) and mode != "oauth":
                    raise refusal(
                        f"routes[{i}].{key}",
                        f"scopes come with auth mode oauth; this route's mode is {mode}",
                    )
            for j, upstream in enumerate(route.members):
                where = "upstream" if route.upstreams is None else f"upstreams[{j}]"
                if mode == "oauth" and upstream.forwards_authorization:
                    if upstream.identity.mode != "passthrough":
                        # The token's audience is this gateway: passing it on is the token
                        # passthrough the MCP security guidance forbids, unless said twice.
                        raise refusal(
                            f"routes[{i}].{where}.forward_headers",
                            "Authorization holds OAuth tokens issued for this gateway; to pass "
                            "them on anyway set upstream.identity.mode: passthrough",
                        )
                if upstream.identity.mode == "signed_assertion" and mode == "none":
                    raise refusal(
                        f"routes[{i}].{where}.identity.mode",
                        "signed_assertion names the caller, but this route has no authentication",
                    )
                if upstream.identity.mode == "token_exchange" and mode not in ("oauth", "jwt"):
                    raise refusal(
                        f"routes[{i}].{where}.identity.mode",
                        f"token_exchange exchanges the caller's token: it needs auth mode oauth or "
                        f"jwt, and this route's is {mode}",
                    )
        return self

    @model_validator(mode="after")
    def _admin_apart(self) -> Settings:
        """The admin API shares neither a port nor a credential with what clients use."""
        admin = self.admin
        if admin is None:
            return self
        taken = [("listen.port", self.listen)]
        if self.metrics.listen is not None:
            taken.append(("metrics.listen.port", self.metrics.listen))
        for key, where in taken:
            if where.port == admin.listen.port:
                raise refusal(
                    "admin.listen.port",
                    f"{where.port} is {key} already: the admin API needs a port of its own",
                )
        digest = hashlib.sha256(admin.token.encode()).digest()
        sections = [self.auth, *(route.auth for route in self.routes if route.auth is not None)]
        if any(hmac.compare_digest(digest, k.digest) for a in sections for k in a.api_keys):
            raise refusal(
                "admin.token_env",
                f"{admin.token_env} holds a client API key: give the admin API a token of its own",
            )
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


def route_auth_key(settings: Settings, route: RouteConfig) -> str:
    """Where the file writes the section of the route's authentication mode, as messages name
    its keys: `auth.jwt`, or `routes[2].auth.jwt` for a route with an auth section of its own."""
    own = route.auth
    if own is None or own.inherits:
        return f"auth.{settings.auth.mode}"
    return f"{route_key(settings.routes, route)}.auth.{own.mode}"


def route_key(routes: Sequence[RouteConfig], route: RouteConfig) -> str:
    """Where a file whose routes are `routes` writes `route`, as messages name the keys below
    it: `routes[2]`."""
    return f"routes[{[r.name for r in routes].index(route.name)}]"


def route_limits(settings: Settings, route: RouteConfig) -> Limits:
    # null means "inherit" here, so a route can tighten or loosen a limit but never drops
    # one by accident; a route that needs no limit sets a number beyond reach.
    changes = {k: v for k, v in route.limits.model_dump().items() if v is not None}
    return settings.limits.model_copy(update=changes)
