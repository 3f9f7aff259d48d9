"""Configuration of the store: `store.backend`, and the PostgreSQL settings `url`,
`lease_seconds` and `pool_size`. Credentials never sit in the file: the password comes from
PGPASSWORD."""

from __future__ import annotations

import pytest

from gateway.config import ConfigError, StoreConfig, parse_settings

PG = {"backend": "postgres", "url": "postgresql://gw@db/g"}
ROUTES = [{"name": "r", "upstream": {"transport": "stdio", "command": ["python", "-m", "x"]}}]


def store(section: object) -> StoreConfig:
    return parse_settings({"store": section, "routes": ROUTES}, "f.yaml", env={}).store


def test_sqlite_is_the_default_and_postgres_is_chosen_with_a_url() -> None:
    assert store({}).backend == "sqlite" and store({}).url is None
    shared = store({"backend": "postgres", "url": "postgresql://gw@db.internal:5432/gateway"})

    assert shared.backend == "postgres" and shared.lease_seconds == 15.0
    assert shared.pool_size == 10
    # TLS settings of libpq's URL syntax are the operator's to pass.
    assert store({"backend": "postgres", "url": "postgres://gw@db/g?sslmode=require"}).url


@pytest.mark.parametrize(
    ("section", "key", "expected"),
    [
        ({"backend": "postgres"}, "url", "is required with store.backend: postgres"),
        # A URL written without the key that turns it on is a mistake, not ignored.
        ({"url": "postgresql://gw@db/g"}, "url", "is read only with store.backend: postgres"),
        ({"backend": "postgres", "url": "postgresql://gw:hunter2@db/g"}, "url", "PGPASSWORD"),
        (
            {"backend": "postgres", "url": "postgresql://gw@db/g?password=hunter2"},
            "url",
            "PGPASSWORD",
        ),
        ({"backend": "postgres", "url": "mysql://gw@db/g"}, "url", "must be postgresql://"),
        ({"backend": "postgres", "url": "postgresql:///g"}, "url", "must be postgresql://"),
        ({"backend": "postgres", "url": 5432}, "url", "valid string"),
        ({"backend": "mongodb"}, "backend", "'sqlite' or 'postgres'"),
        (
            {"backend": "postgres", "url": "postgresql://gw@db/g", "lease_seconds": 1},
            "lease_seconds",
            "greater than or equal to 2",
        ),
        (
            {"backend": "postgres", "url": "postgresql://gw@db/g", "lease_seconds": float("nan")},
            "lease_seconds",
            "",
        ),
        ({**PG, "pool_size": 0}, "pool_size", "greater than or equal to 1"),
        ({**PG, "pool_size": 100000}, "pool_size", "less than or equal to 1000"),
        ({**PG, "pool_size": "ten"}, "pool_size", "valid integer"),
        ({**PG, "pool_size": 2.5}, "pool_size", "valid integer"),
        (
            {"backend": "postgres", "url": "postgresql://gw@db/g", "lease_second": 5},
            "lease_second",
            "unknown key",
        ),
    ],
)
def test_wrong_store_settings_are_refused_naming_the_key_and_never_echo_a_password(
    section: dict[str, object], key: str, expected: str
) -> None:
    with pytest.raises(ConfigError) as raised:
        store(section)

    message = str(raised.value)
    assert message.startswith(f"f.yaml: store.{key}: ")
    assert expected in message and "hunter2" not in message
