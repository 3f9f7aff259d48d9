"""A real OAuth 2.1 authorization server for the journeys in test_oauth_journeys.py, run as its
own process: `python tests/oauth_server.py PORT`.

The endpoints are the MCP Python SDK's authorization server (`mcp.server.auth`: RFC 8414
metadata, RFC 7591 dynamic client registration, authorization code with PKCE, refresh). This
file adds what an identity provider adds around it: a signing key published as a JWK set, JWT
access tokens whose `aud` is the RFC 8707 resource the client asked for, and consent given at
once (the user is `alice`). POST /exchange is RFC 8693 token exchange for one confidential
client, the gateway (`mcp-task-gateway` / `gateway-secret`); the SDK's token endpoint offers
only the authorization code and refresh grants. With `opaque` set, access tokens are random
strings instead, and POST /introspect (RFC 7662, for the same confidential client) answers for
them. POST /control lets a test play the provider's operator: rotate the key, grant fewer
scopes, sign with a clock that is off, issue opaque tokens, spoil introspection answers, mint a
token without the browser steps; its answer counts the introspections so far.
"""

from __future__ import annotations

import base64
import secrets
import sys
import time
from dataclasses import dataclass, field
from typing import Any

import jwt
import uvicorn
from cryptography.hazmat.primitives.asymmetric import rsa
from jwt.algorithms import RSAAlgorithm
from mcp.server.auth.provider import (
    AccessToken,
    AuthorizationCode,
    AuthorizationParams,
    RefreshToken,
    construct_redirect_uri,
)
from mcp.server.auth.routes import create_auth_routes
from mcp.server.auth.settings import ClientRegistrationOptions
from mcp.shared.auth import OAuthClientInformationFull, OAuthToken
from pydantic import AnyHttpUrl
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

#: What a client may ask for; the operator may grant less (`grant` below).
SCOPES = ["mcp", "tools", "reports:write"]
#: The one client allowed to exchange tokens, as HTTP Basic credentials.
EXCHANGER = "Basic " + base64.b64encode(b"mcp-task-gateway:gateway-secret").decode()
#: The same client's credentials in the form (client_secret_post), which /introspect takes too.
EXCHANGER_FORM = ("mcp-task-gateway", "gateway-secret")


@dataclass
class Keys:
    kid: str
    key: rsa.RSAPrivateKey

    @classmethod
    def new(cls, n: int) -> Keys:
        return cls(f"k{n}", rsa.generate_private_key(public_exponent=65537, key_size=2048))

    def jwk(self) -> dict[str, Any]:
        return {**RSAAlgorithm.to_jwk(self.key.public_key(), as_dict=True), "kid": self.kid}


@dataclass
class Operator:
    """What the test may change through /control."""

    lifetime: int = 600
    #: Scopes granted at most (None: whatever is asked).
    grant: list[str] | None = None
    #: Seconds added to `iat` and `exp` in tokens, as a provider with a wrong clock would.
    clock_skew: int = 0
    subject: str = "alice"
    #: Issue opaque access tokens (answered for at /introspect) instead of JWTs.
    opaque: bool = False
    #: Fields written over every active introspection answer, as a faulty provider would.
    answer: dict[str, Any] = field(default_factory=dict)


@dataclass
class Provider:
    issuer: str
    keys: list[Keys] = field(default_factory=lambda: [Keys.new(1)])
    operator: Operator = field(default_factory=Operator)
    clients: dict[str, OAuthClientInformationFull] = field(default_factory=dict)
    codes: dict[str, AuthorizationCode] = field(default_factory=dict)
    refresh: dict[str, RefreshToken] = field(default_factory=dict)
    #: Opaque access tokens and what introspection says of them.
    opaque: dict[str, dict[str, Any]] = field(default_factory=dict)
    introspections: int = 0

    async def get_client(self, client_id: str) -> OAuthClientInformationFull | None:
        return self.clients.get(client_id)

    async def register_client(self, client_info: OAuthClientInformationFull) -> None:
        # This provider's policy: a registered client may ask for any scope it offers, so a
        # client can step up to a scope it did not register with.
        assert client_info.client_id is not None
        self.clients[client_info.client_id] = client_info.model_copy(
            update={"scope": " ".join(SCOPES)}
        )

    async def authorize(
        self, client: OAuthClientInformationFull, params: AuthorizationParams
    ) -> str:
        assert client.client_id is not None
        code = secrets.token_urlsafe(32)
        self.codes[code] = AuthorizationCode(
            code=code,
            scopes=params.scopes or [],
            expires_at=time.time() + 300,
            client_id=client.client_id,
            code_challenge=params.code_challenge,
            redirect_uri=params.redirect_uri,
            redirect_uri_provided_explicitly=params.redirect_uri_provided_explicitly,
            resource=params.resource,
            subject=self.operator.subject,
        )
        return construct_redirect_uri(str(params.redirect_uri), code=code, state=params.state)

    async def load_authorization_code(
        self, client: OAuthClientInformationFull, authorization_code: str
    ) -> AuthorizationCode | None:
        return self.codes.get(authorization_code)

    async def exchange_authorization_code(
        self, client: OAuthClientInformationFull, authorization_code: AuthorizationCode
    ) -> OAuthToken:
        self.codes.pop(authorization_code.code, None)
        return self._issue(
            authorization_code.client_id,
            authorization_code.scopes,
            authorization_code.resource,
            authorization_code.subject or self.operator.subject,
        )

    async def load_refresh_token(
        self, client: OAuthClientInformationFull, refresh_token: str
    ) -> RefreshToken | None:
        return self.refresh.get(refresh_token)

    async def exchange_refresh_token(
        self, client: OAuthClientInformationFull, refresh_token: RefreshToken, scopes: list[str]
    ) -> OAuthToken:
        self.refresh.pop(refresh_token.token, None)
        subject = refresh_token.subject or self.operator.subject
        return self._issue(refresh_token.client_id, scopes, refresh_token.resource, subject)

    async def load_access_token(self, token: str) -> AccessToken | None:
        return None  # the gateway verifies tokens itself, with the JWK set

    async def revoke_token(self, token: AccessToken | RefreshToken) -> None:
        self.refresh.pop(token.token, None)

    def _issue(
        self, client_id: str, scopes: list[str], resource: str | None, subject: str
    ) -> OAuthToken:
        granted = [s for s in scopes if self.operator.grant is None or s in self.operator.grant]
        now = int(time.time()) + self.operator.clock_skew
        claims: dict[str, Any] = {
            "iss": self.issuer,
            "sub": subject,
            "client_id": client_id,
            "iat": now,
            "exp": now + self.operator.lifetime,
            "scope": " ".join(granted),
            "jti": secrets.token_urlsafe(8),
        }
        if resource is not None:
            claims["aud"] = resource
        if self.operator.opaque:
            access = secrets.token_urlsafe(32)
            self.opaque[access] = claims
        else:
            signer = self.keys[-1]
            headers = {"kid": signer.kid}
            access = jwt.encode(claims, signer.key, algorithm="RS256", headers=headers)
        refresh = secrets.token_urlsafe(32)
        self.refresh[refresh] = RefreshToken(
            token=refresh, client_id=client_id, scopes=granted, resource=resource, subject=subject
        )
        return OAuthToken(
            access_token=access,
            token_type="Bearer",
            expires_in=self.operator.lifetime,
            scope=" ".join(granted),
            refresh_token=refresh,
        )


def app(port: int) -> Starlette:
    issuer = AnyHttpUrl(f"http://127.0.0.1:{port}")
    provider = Provider(issuer=str(issuer))
    options = ClientRegistrationOptions(enabled=True, valid_scopes=SCOPES)

    async def jwks(request: Request) -> JSONResponse:
        return JSONResponse({"keys": [k.jwk() for k in provider.keys]})

    async def control(request: Request) -> JSONResponse:
        change: dict[str, Any] = await request.json()
        if change.pop("rotate", False):
            fresh = Keys.new(len(provider.keys) + 1)
            provider.keys = [*provider.keys, fresh] if change.pop("keep_old", True) else [fresh]
        mint = change.pop("mint", None)
        for key, value in change.items():
            setattr(provider.operator, key, value)
        done: dict[str, Any] = {
            "kid": provider.keys[-1].kid,
            "issuer": provider.issuer,
            "introspections": provider.introspections,
        }
        if mint is not None:  # {scopes, resource}: what the token endpoint would issue
            issued = provider._issue(
                "minted", mint["scopes"], mint["resource"], provider.operator.subject
            )
            done["access_token"] = issued.access_token
        return JSONResponse(done)

    async def introspect(request: Request) -> JSONResponse:
        provider.introspections += 1
        form = await request.form()
        posted = (form.get("client_id"), form.get("client_secret"))
        if request.headers.get("Authorization") != EXCHANGER and posted != EXCHANGER_FORM:
            return JSONResponse({"error": "invalid_client"}, status_code=401)
        claims = provider.opaque.get(str(form.get("token", "")))
        now = time.time() + provider.operator.clock_skew
        if claims is None or claims["exp"] <= now:
            return JSONResponse({"active": False})
        answer = {"active": True, "token_type": "Bearer", **claims}
        return JSONResponse({**answer, **provider.operator.answer})

    async def exchange(request: Request) -> JSONResponse:
        form = await request.form()
        if request.headers.get("Authorization") != EXCHANGER:
            return JSONResponse({"error": "invalid_client"}, status_code=401)
        if form.get("grant_type") != "urn:ietf:params:oauth:grant-type:token-exchange":
            return JSONResponse({"error": "unsupported_grant_type"}, status_code=400)
        keys = {k.kid: k.key.public_key() for k in provider.keys}
        subject_token = str(form.get("subject_token", ""))
        try:
            kid = str(jwt.get_unverified_header(subject_token).get("kid"))
            subject = jwt.decode(
                subject_token,
                keys[kid],
                algorithms=["RS256"],
                issuer=provider.issuer,
                options={"verify_aud": False},
            )
        except (jwt.PyJWTError, KeyError):
            return JSONResponse({"error": "invalid_grant"}, status_code=400)
        now = int(time.time())
        claims = {
            "iss": provider.issuer,
            "sub": subject["sub"],
            "aud": form.get("audience") or form.get("resource"),
            "act": {"sub": "mcp-task-gateway"},
            "scope": form.get("scope", ""),
            "iat": now,
            "exp": now + provider.operator.lifetime,
        }
        signer = provider.keys[-1]
        token = jwt.encode(claims, signer.key, algorithm="RS256", headers={"kid": signer.kid})
        return JSONResponse(
            {
                "access_token": token,
                "issued_token_type": "urn:ietf:params:oauth:token-type:access_token",
                "token_type": "Bearer",
                "expires_in": provider.operator.lifetime,
            }
        )

    routes = create_auth_routes(provider, issuer, client_registration_options=options)
    routes += [
        Route("/jwks.json", jwks),
        Route("/control", control, methods=["POST"]),
        Route("/exchange", exchange, methods=["POST"]),
        Route("/introspect", introspect, methods=["POST"]),
    ]
    return Starlette(routes=routes)


if __name__ == "__main__":
    port = int(sys.argv[1])
    uvicorn.run(app(port), host="127.0.0.1", port=port, log_level="warning")
