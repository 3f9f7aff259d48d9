"""Configuration: the YAML file, validated once at start-up, with errors that name the key.

`loading` reads the file and substitutes `${VAR}`s; `settings` is the whole file, built
from `sections` (gateway-wide), `auth` and `routes`; `base` holds what they share. This
package is a leaf: it imports nothing else of the gateway. Components get their slice.
"""

from gateway.config.auth import ApiKey, AuthConfig
from gateway.config.base import ConfigError
from gateway.config.identity import UpstreamIdentity
from gateway.config.loading import load_admin, load_settings, parse_settings
from gateway.config.routes import RouteConfig, TaskPolicy, TaskSupport
from gateway.config.sections import (
    POOL_SIZE,
    AdminConfig,
    AuditConfig,
    HttpConfig,
    Limits,
    LimitsOverride,
    ListenConfig,
    MetricsConfig,
    SessionsConfig,
    ShutdownConfig,
    StoreConfig,
    TracingConfig,
)
from gateway.config.settings import (
    Settings,
    route_auth,
    route_auth_key,
    route_key,
    route_limits,
)
from gateway.config.tokens import JwtConfig, OAuthConfig
from gateway.config.upstream import CHILD_ENV_ALLOWED, SEPARATOR, MemberConfig, UpstreamConfig

__all__ = [
    "CHILD_ENV_ALLOWED",
    "POOL_SIZE",
    "AdminConfig",
    "ApiKey",
    "AuditConfig",
    "AuthConfig",
    "ConfigError",
    "HttpConfig",
    "JwtConfig",
    "Limits",
    "LimitsOverride",
    "ListenConfig",
    "MemberConfig",
    "MetricsConfig",
    "OAuthConfig",
    "RouteConfig",
    "SEPARATOR",
    "SessionsConfig",
    "Settings",
    "ShutdownConfig",
    "StoreConfig",
    "TaskPolicy",
    "TaskSupport",
    "TracingConfig",
    "UpstreamConfig",
    "UpstreamIdentity",
    "load_admin",
    "load_settings",
    "parse_settings",
    "route_auth",
    "route_auth_key",
    "route_key",
    "route_limits",
]
