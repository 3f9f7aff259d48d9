"""The keys a JWT verifier is configured with: a PEM public key or a JWK set, read from their
files, and the check every key passes before it verifies a token (one fetched from `jwks_url`
too).

A key file that cannot be used stops the start, with a message naming its config key (at the
path the file writes it, which the caller gives) and the file. The check refuses a private key,
which cannot verify a signature, and a key too short for its algorithm, for which PyJWT would
warn on every request.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

import jwt
from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives.asymmetric.ec import EllipticCurvePublicKey
from cryptography.hazmat.primitives.asymmetric.rsa import RSAPublicKey
from cryptography.hazmat.primitives.serialization import load_pem_public_key
from jwt.algorithms import ECAlgorithm, RSAAlgorithm
from jwt.types import JWKDict

from gateway.config.base import read_regular_file

#: A PEM key is a few kilobytes and an issuer's JWK set a few dozen: a bigger file (or
#: /dev/zero) is no key file, and is refused before it fills the memory.
MAX_KEY_FILE_BYTES = 1024 * 1024


def _read(path: str, config_key: str) -> bytes:
    try:
        return read_regular_file(path, MAX_KEY_FILE_BYTES)
    except OSError as exc:
        raise ValueError(f"{config_key}: cannot read {path}: {exc.strerror}") from None
    except ValueError as exc:
        raise ValueError(f"{config_key}: {path}: {exc}: not a key file") from None


def load_pem(path: str, algorithms: Sequence[str], config_key: str) -> jwt.PyJWK:
    """The public key in the PEM file at `path`, which the settings name at `config_key`
    (`auth.jwt.public_key_file`), bound to its one algorithm.

    Raises:
        ValueError: the file is unreadable, holds no RSA or EC public key, or a key of an
            algorithm not in `algorithms`.
    """
    where = f"{config_key}: {path}"
    data = _read(path, config_key)
    try:
        public_key = load_pem_public_key(data)
    except (ValueError, UnsupportedAlgorithm):
        raise ValueError(f"{where}: not a PEM public key") from None
    jwk: JWKDict
    if isinstance(public_key, RSAPublicKey):
        jwk = RSAAlgorithm.to_jwk(public_key, as_dict=True)
    elif isinstance(public_key, EllipticCurvePublicKey):
        jwk = ECAlgorithm.to_jwk(public_key, as_dict=True)
    else:
        raise ValueError(f"{where}: neither an RSA nor an EC public key")
    # As a PyJWK the key is bound to one algorithm (by type and curve), so PyJWT refuses a
    # token whose header names another one. That refusal stops algorithm confusion.
    key = jwt.PyJWK(jwk)
    if key.algorithm_name not in algorithms:
        raise ValueError(f"{where}: a {key.algorithm_name} key, but algorithms are {algorithms}")
    return checked(key, where)


def load_jwks(path: str, algorithms: Sequence[str], config_key: str) -> list[jwt.PyJWK]:
    """The keys of the JWK set file at `path`, which the settings name at `config_key`
    (`auth.jwt.jwks_file`), for `algorithms`.

    Raises:
        ValueError: the file is unreadable, not a JWK set, or has no key for `algorithms`.
    """
    where = f"{config_key}: {path}"
    text = _read(path, config_key)
    try:
        data = json.loads(text)
        if not isinstance(data, dict):
            raise ValueError("the top level must be an object with `keys`")
        key_set = jwt.PyJWKSet.from_dict(data)
    except (ValueError, jwt.PyJWTError) as exc:
        raise ValueError(f"{where}: not a JWK set: {exc}") from None
    # Issuers often publish keys for several algorithms. Keep those we may verify with.
    keys = [key for key in key_set if key.algorithm_name in algorithms]
    if not keys:
        raise ValueError(f"{where}: no key for the algorithms {algorithms}")
    return [checked(key, where) for key in keys]


def checked(key: jwt.PyJWK, where: str) -> jwt.PyJWK:
    """`key`, once it has passed the check; `where` says whence it came in the message.

    Raises:
        ValueError: it is a private key, or too short for its algorithm.
    """
    # A private key cannot verify a signature. A short key would make PyJWT warn on every request.
    if not isinstance(key.key, RSAPublicKey | EllipticCurvePublicKey):
        raise ValueError(f"{where}: holds a private key; give only the public key")
    too_short = key.Algorithm.check_key_length(key.key)
    if too_short:
        raise ValueError(f"{where}: {too_short}")
    return key
