"""Authenticator: API keys and JWTs with real crypto. The reasons are our API, so tests pin them."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import re
import time
from pathlib import Path
from typing import Any

import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat
from jwt.algorithms import ECAlgorithm, RSAAlgorithm

from gateway.app import create_app
from gateway.config import Settings, parse_settings
from gateway.security.auth import Authenticator, Principal, bearer_token, visible_ascii
from gateway.security.errors import AuthError

SECRET = "a-test-secret-that-is-at-least-32-bytes-long"
ROUTES = [{"name": "r", "upstream": {"transport": "sse", "url": "http://127.0.0.1:9/sse"}}]
ISSUER = "https://issuer.test"
AUDIENCE = "gateway"
OPS_KEY_AUTH: dict[str, Any] = {
    "mode": "api_keys",
    "api_keys": [{"principal": "ops", "key_env": "OPS_KEY"}],
}
HS256_AUTH: dict[str, Any] = {
    "mode": "jwt",
    "jwt": {
        "algorithms": ["HS256"],
        "secret_env": "JWT_SECRET",
        "issuer": ISSUER,
        "audience": AUDIENCE,
    },
}


def _settings(auth: dict[str, Any], env: dict[str, str] | None = None) -> Settings:
    return parse_settings(
        {"auth": auth, "routes": ROUTES},
        "test",
        env={"JWT_SECRET": SECRET, "OPS_KEY": "key", **(env or {})},
    )


def _authenticator(auth: dict[str, Any], env: dict[str, str] | None = None) -> Authenticator:
    return Authenticator(_settings(auth, env).auth)


def _claims(**changes: Any) -> dict[str, Any]:
    """Valid claims for an hour, with `changes` applied (None removes a claim)."""
    claims: dict[str, Any] = {
        "sub": "alice",
        "iss": ISSUER,
        "aud": AUDIENCE,
        "exp": int(time.time()) + 3600,
    }
    claims.update(changes)
    return {name: value for name, value in claims.items() if value is not None}


async def _reason(authenticator: Authenticator, authorization: str | None) -> str:
    with pytest.raises(AuthError) as info:
        await authenticator.authenticate(authorization)
    return info.value.reason


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _rsa_key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


def _pem(key: rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey, path: Path) -> str:
    path.write_bytes(key.public_key().public_bytes(Encoding.PEM, PublicFormat.SubjectPublicKeyInfo))
    return str(path)


def _asymmetric_auth(algorithms: list[str], **files: str) -> Authenticator:
    return _authenticator(
        {"mode": "jwt", "jwt": {"algorithms": algorithms, "audience": AUDIENCE, **files}}
    )


# API keys


async def test_api_key_configured_as_sha256_is_accepted() -> None:
    digest = hashlib.sha256(b"key-one").hexdigest()
    auth = _authenticator({"mode": "api_keys", "api_keys": [{"principal": "ci", "sha256": digest}]})

    assert auth.required
    assert await auth.authenticate("Bearer key-one") == Principal(name="ci", method="api_key")


async def test_api_key_configured_through_env_is_accepted() -> None:
    auth = _authenticator(
        {
            "mode": "api_keys",
            "api_keys": [
                {"principal": "ci", "sha256": hashlib.sha256(b"key-one").hexdigest()},
                {"principal": "ops", "key_env": "OPS_KEY"},
            ],
        },
        env={"OPS_KEY": "key-two"},
    )

    assert await auth.authenticate("Bearer key-two") == Principal(name="ops", method="api_key")


async def test_unknown_api_key_is_rejected() -> None:
    auth = _authenticator(OPS_KEY_AUTH)

    assert await _reason(auth, "Bearer not-the-key") == "unknown API key"


async def test_bearer_scheme_is_case_insensitive() -> None:
    auth = _authenticator(OPS_KEY_AUTH)

    assert await auth.authenticate("bearer key") == Principal(name="ops", method="api_key")
    assert await auth.authenticate("BEARER  key") == Principal(name="ops", method="api_key")


@pytest.mark.parametrize("header", [None, "", "   "])
async def test_missing_header_is_rejected(header: str | None) -> None:
    auth = _authenticator(OPS_KEY_AUTH)

    assert await _reason(auth, header) == "missing bearer token"


@pytest.mark.parametrize(
    "header",
    ["key", "Basic a2V5", "Bearer", "Bearer ", "Bearerkey", "Bearer key extra", "Bearer kéy"],
)
async def test_header_that_is_not_bearer_token_is_rejected(header: str) -> None:
    auth = _authenticator(OPS_KEY_AUTH)

    assert await _reason(auth, header) == "expected Authorization: Bearer <token>"


@pytest.mark.parametrize("header", [None, "Bearer anything", "garbage"])
async def test_mode_none_returns_no_principal_whatever_the_header(header: str | None) -> None:
    auth = _authenticator({"mode": "none"})

    assert not auth.required
    assert await auth.authenticate(header) is None


# HS256


async def test_hs256_token_with_right_claims_is_accepted() -> None:
    auth = _authenticator(HS256_AUTH)
    token = jwt.encode(_claims(), SECRET, algorithm="HS256")

    assert await auth.authenticate(f"Bearer {token}") == Principal(name="alice", method="jwt")


@pytest.mark.parametrize(
    ("claims", "secret", "reason"),
    [
        (_claims(exp=int(time.time()) - 3600), SECRET, "token expired"),
        (_claims(nbf=int(time.time()) + 3600), SECRET, "token not yet valid"),
        (_claims(aud="someone-else"), SECRET, "wrong audience"),
        (_claims(iss="https://evil.test"), SECRET, "wrong issuer"),
        (_claims(), "another-secret-that-is-also-32-bytes-long", "invalid signature"),
        (_claims(exp=None), SECRET, "token is missing claim exp"),
        (_claims(sub=None), SECRET, "token is missing claim sub"),
        (_claims(aud=None), SECRET, "token is missing claim aud"),
        (_claims(sub=""), SECRET, "claim sub must be a non-empty string"),
        (_claims(sub="al\u0000ice"), SECRET, "claim sub must not hold a NUL character"),
    ],
    ids=[
        "expired",
        "not-yet-valid",
        "wrong-audience",
        "wrong-issuer",
        "other-secret",
        "no-exp",
        "no-principal",
        "no-audience",
        "empty-principal",
        "nul-in-principal",
    ],
)
async def test_hs256_token_is_rejected(claims: dict[str, Any], secret: str, reason: str) -> None:
    auth = _authenticator(HS256_AUTH)
    token = jwt.encode(claims, secret, algorithm="HS256")

    assert await _reason(auth, f"Bearer {token}") == reason


async def test_expiry_within_leeway_is_accepted() -> None:
    auth = _authenticator({**HS256_AUTH, "jwt": {**HS256_AUTH["jwt"], "leeway_seconds": 600}})
    token = jwt.encode(_claims(exp=int(time.time()) - 60), SECRET, algorithm="HS256")

    assert await auth.authenticate(f"Bearer {token}") == Principal(name="alice", method="jwt")


async def test_unsigned_alg_none_token_is_rejected() -> None:
    auth = _authenticator(HS256_AUTH)
    header = _b64(json.dumps({"alg": "none", "typ": "JWT"}).encode())
    payload = _b64(json.dumps(_claims()).encode())

    assert await _reason(auth, f"Bearer {header}.{payload}.") == "algorithm not allowed"


async def test_garbage_token_is_rejected_as_malformed() -> None:
    auth = _authenticator(HS256_AUTH)

    assert await _reason(auth, "Bearer not.a.jwt") == "malformed token"
    assert await _reason(auth, "Bearer nodots") == "malformed token"


async def test_custom_principal_claim_names_the_caller() -> None:
    auth = _authenticator({**HS256_AUTH, "jwt": {**HS256_AUTH["jwt"], "principal_claim": "email"}})
    with_email = jwt.encode(_claims(email="alice@example.com"), SECRET, algorithm="HS256")
    without_email = jwt.encode(_claims(), SECRET, algorithm="HS256")

    assert await auth.authenticate(f"Bearer {with_email}") == Principal(
        name="alice@example.com", method="jwt"
    )
    assert await _reason(auth, f"Bearer {without_email}") == "token is missing claim email"


async def test_with_verify_audience_false_a_token_for_any_audience_is_accepted() -> None:
    auth = _authenticator({"jwt": {"secret_env": "JWT_SECRET", "verify_audience": False}})

    for audience in ("someone-else", None):
        token = jwt.encode(_claims(aud=audience), SECRET, algorithm="HS256")
        assert await auth.authenticate(f"Bearer {token}") == Principal(name="alice", method="jwt")


@pytest.mark.parametrize(
    "auth",
    [{"api_keys": OPS_KEY_AUTH["api_keys"]}, {"jwt": HS256_AUTH["jwt"]}],
    ids=["keys", "jwt"],
)
async def test_credentials_written_without_mode_are_required(auth: dict[str, Any]) -> None:
    authenticator = _authenticator(auth)

    assert authenticator.required
    assert await _reason(authenticator, None) == "missing bearer token"


def test_short_hs256_secret_is_refused_at_start() -> None:
    settings = _settings(HS256_AUTH, env={"JWT_SECRET": "short"})

    with pytest.raises(ValueError, match=r"^auth\.jwt\.secret_env: .*JWT_SECRET"):
        Authenticator(settings.auth)


# RS256 / ES256


async def test_rs256_token_is_accepted_with_pem_public_key(tmp_path: Path) -> None:
    key = _rsa_key()
    auth = _asymmetric_auth(["RS256"], public_key_file=_pem(key, tmp_path / "rsa.pem"))
    token = jwt.encode(_claims(), key, algorithm="RS256", headers={"kid": "ignored"})

    assert await auth.authenticate(f"Bearer {token}") == Principal(name="alice", method="jwt")


async def test_es256_token_is_accepted_with_pem_public_key(tmp_path: Path) -> None:
    key = ec.generate_private_key(ec.SECP256R1())
    auth = _asymmetric_auth(["ES256"], public_key_file=_pem(key, tmp_path / "ec.pem"))
    token = jwt.encode(_claims(), key, algorithm="ES256")

    assert await auth.authenticate(f"Bearer {token}") == Principal(name="alice", method="jwt")


async def test_rs256_token_signed_with_another_key_is_rejected(tmp_path: Path) -> None:
    auth = _asymmetric_auth(["RS256"], public_key_file=_pem(_rsa_key(), tmp_path / "rsa.pem"))
    token = jwt.encode(_claims(), _rsa_key(), algorithm="RS256")

    assert await _reason(auth, f"Bearer {token}") == "invalid signature"


async def test_hs256_token_signed_with_the_public_key_is_rejected(tmp_path: Path) -> None:
    key = _rsa_key()
    auth = _asymmetric_auth(["RS256"], public_key_file=_pem(key, tmp_path / "rsa.pem"))
    pem = key.public_key().public_bytes(Encoding.PEM, PublicFormat.SubjectPublicKeyInfo)
    # PyJWT refuses to sign with a PEM as HMAC secret, so the attacker's token is built by hand.
    signing_input = (
        f"{_b64(json.dumps({'alg': 'HS256', 'typ': 'JWT'}).encode())}."
        f"{_b64(json.dumps(_claims()).encode())}"
    )
    mac = hmac.new(pem, signing_input.encode(), hashlib.sha256)
    token = f"{signing_input}.{_b64(mac.digest())}"

    assert await _reason(auth, f"Bearer {token}") == "algorithm not allowed"


async def test_es256_token_is_rejected_when_the_pem_key_is_rsa(tmp_path: Path) -> None:
    auth = _asymmetric_auth(
        ["RS256", "ES256"], public_key_file=_pem(_rsa_key(), tmp_path / "rsa.pem")
    )
    token = jwt.encode(_claims(), ec.generate_private_key(ec.SECP256R1()), algorithm="ES256")

    assert await _reason(auth, f"Bearer {token}") == "algorithm not allowed"


async def test_jwks_key_is_chosen_by_the_token_kid(tmp_path: Path) -> None:
    old, new = _rsa_key(), _rsa_key()
    keys = [
        {**RSAAlgorithm.to_jwk(old.public_key(), as_dict=True), "kid": "old"},
        {**RSAAlgorithm.to_jwk(new.public_key(), as_dict=True), "kid": "new"},
    ]
    (tmp_path / "jwks.json").write_text(json.dumps({"keys": keys}))
    auth = _asymmetric_auth(["RS256"], jwks_file=str(tmp_path / "jwks.json"))

    for kid, key in (("old", old), ("new", new)):
        token = jwt.encode(_claims(), key, algorithm="RS256", headers={"kid": kid})
        assert await auth.authenticate(f"Bearer {token}") == Principal(name="alice", method="jwt")
    wrong_kid = jwt.encode(_claims(), new, algorithm="RS256", headers={"kid": "old"})
    unknown_kid = jwt.encode(_claims(), new, algorithm="RS256", headers={"kid": "gone"})
    no_kid = jwt.encode(_claims(), new, algorithm="RS256")
    assert await _reason(auth, f"Bearer {wrong_kid}") == "invalid signature"
    assert await _reason(auth, f"Bearer {unknown_kid}") == "unknown key id"
    assert await _reason(auth, f"Bearer {no_kid}") == "token has no key id"


async def test_token_without_kid_is_accepted_when_the_jwks_has_one_key(tmp_path: Path) -> None:
    key = ec.generate_private_key(ec.SECP256R1())
    jwk = {**ECAlgorithm.to_jwk(key.public_key(), as_dict=True), "kid": "only"}
    (tmp_path / "jwks.json").write_text(json.dumps({"keys": [jwk]}))
    auth = _asymmetric_auth(["ES256"], jwks_file=str(tmp_path / "jwks.json"))
    token = jwt.encode(_claims(), key, algorithm="ES256")

    assert await auth.authenticate(f"Bearer {token}") == Principal(name="alice", method="jwt")


def test_missing_key_files_are_refused_at_start_naming_key_and_file(tmp_path: Path) -> None:
    missing = str(tmp_path / "nope.pem")

    with pytest.raises(ValueError, match=r"^auth\.jwt\.public_key_file: cannot read .*nope\.pem"):
        _asymmetric_auth(["RS256"], public_key_file=missing)
    with pytest.raises(ValueError, match=r"^auth\.jwt\.jwks_file: cannot read .*nope\.pem"):
        _asymmetric_auth(["RS256"], jwks_file=missing)


MISSING_PEM: dict[str, Any] = {
    "algorithms": ["RS256"],
    "audience": AUDIENCE,
    "public_key_file": "/nonexistent/key.pem",
}


@pytest.mark.parametrize(
    ("auth", "key"),
    [
        ({"jwt": MISSING_PEM}, "routes[1].auth.jwt.public_key_file"),
        ({"list_tasks_without_auth": True}, "auth.jwt.public_key_file"),
        (None, "auth.jwt.public_key_file"),
    ],
    ids=["its own", "the gateway's, with a key of its own", "the gateway's"],
)
def test_a_routes_key_file_is_named_where_the_file_writes_it(
    auth: dict[str, Any] | None, key: str
) -> None:
    """Named `jwt.public_key_file`: neither the `auth` section it is in, nor the route."""
    opened = {**ROUTES[0], "name": "open", "auth": {"mode": "none"}}
    data = {"auth": {"jwt": MISSING_PEM}, "routes": [opened, {**ROUTES[0], "auth": auth}]}

    with pytest.raises(ValueError) as raised:
        create_app(parse_settings(data, "test", env={}))

    assert (
        str(raised.value) == f"{key}: cannot read /nonexistent/key.pem: No such file or directory"
    )


def test_unusable_key_files_are_refused_at_start(tmp_path: Path) -> None:
    (tmp_path / "junk.pem").write_text("not a key")
    (tmp_path / "junk.json").write_text("[]")
    private = {**RSAAlgorithm.to_jwk(_rsa_key(), as_dict=True), "kid": "k"}
    (tmp_path / "private.json").write_text(json.dumps({"keys": [private]}))

    with pytest.raises(ValueError, match=r"^auth\.jwt\.public_key_file: .*not a PEM public key"):
        _asymmetric_auth(["RS256"], public_key_file=str(tmp_path / "junk.pem"))
    with pytest.raises(ValueError, match=r"^auth\.jwt\.public_key_file: .*a RS256 key"):
        _asymmetric_auth(["ES256"], public_key_file=_pem(_rsa_key(), tmp_path / "rsa.pem"))
    with pytest.raises(ValueError, match=r"^auth\.jwt\.jwks_file: .*not a JWK set"):
        _asymmetric_auth(["RS256"], jwks_file=str(tmp_path / "junk.json"))
    with pytest.raises(ValueError, match=r"^auth\.jwt\.jwks_file: .*private key"):
        _asymmetric_auth(["RS256"], jwks_file=str(tmp_path / "private.json"))


# Reasons are logged and sent to the client


async def test_no_reason_contains_the_credential() -> None:
    api = _authenticator(OPS_KEY_AUTH)
    hs = _authenticator(HS256_AUTH)
    expired = jwt.encode(_claims(exp=int(time.time()) - 3600), SECRET, algorithm="HS256")
    forged = jwt.encode(_claims(), "x" * 40, algorithm="HS256")
    cases = [
        (api, "sk-live-0123456789abcdef", "Bearer sk-live-0123456789abcdef"),
        (api, "sk-live-0123456789abcdef", "Token sk-live-0123456789abcdef"),
        (hs, expired, f"Bearer {expired}"),
        (hs, forged, f"Bearer {forged}"),
        (hs, "eyJhbGciOiJIUzI1NiJ9.garbage.sig", "Bearer eyJhbGciOiJIUzI1NiJ9.garbage.sig"),
    ]

    for auth, token, header in cases:
        with pytest.raises(AuthError) as info:
            await auth.authenticate(header)
        assert token not in info.value.reason
        assert token not in str(info.value)
        assert info.value.__cause__ is None


def _odd_strings() -> list[str]:
    """Every character up to U+02FF alone, and set among visible ones, at each end and in
    the middle, with the kinds of whitespace a header can carry."""
    out = ["", " ", "key", "a b", "\t", "k\x7f", "k\x80"]
    for code in range(0x300):
        c = chr(code)
        out += [c, f"{c}ab", f"a{c}b", f"ab{c}"]
    return out


def test_bearer_parsing_takes_exactly_what_rfc_6750s_ascii_grammar_allows() -> None:
    """The credentials are read with string methods (the regex engine cost 3,000 instructions
    per request); this holds them to the expression they replaced."""
    grammar = re.compile(r"Bearer +([\x21-\x7e]+)", re.IGNORECASE | re.ASCII)
    headers = [f"{scheme}{gap}{token}" for scheme in ("Bearer", "bEaReR", "Bearerx", "Bearér", "")
               for gap in (" ", "  ", "\t", "") for token in _odd_strings()]  # fmt: skip
    assert len(headers) > 10_000
    for header in headers:
        match = grammar.fullmatch(header.strip()) if header.strip() else None
        try:
            token: str | None = bearer_token(header)
        except AuthError:
            token = None
        assert token == (match.group(1) if match else None), repr(header)


def test_a_visible_ascii_string_is_what_the_session_id_pattern_matched() -> None:
    pattern = re.compile(r"[\x21-\x7e]+")
    for text in _odd_strings():
        assert visible_ascii(text) == (pattern.fullmatch(text) is not None), repr(text)
