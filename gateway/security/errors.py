"""Why a caller was refused: safe to log and to show, never holding the credential."""

from __future__ import annotations

from gateway.protocol.errors import INTERNAL_ERROR, INVALID_REQUEST, GatewayError

#: The reason for a request that carried no credentials at all (it gets a bare challenge).
MISSING_TOKEN = "missing bearer token"


class AuthError(Exception):
    """Missing or invalid credentials. `reason` is safe to log and to show the client: it
    never contains the credential."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class IdentityProviderUnavailable(GatewayError):
    """The `jwks_url` key set cannot be fetched, or the introspection endpoint cannot answer,
    now, so the token cannot be checked (503 with Retry-After). The message names neither the
    URL nor the error: those are logged."""

    code = INTERNAL_ERROR
    http_status = 503


class InsufficientScope(GatewayError):
    """A valid token without a scope the route or the tool needs (403, WWW-Authenticate with
    `error="insufficient_scope"` and the scopes to ask for: RFC 6750 section 3.1)."""

    code = INVALID_REQUEST
    http_status = 403
