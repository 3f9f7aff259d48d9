"""A real PostgreSQL server for the shared store's tests: the one `.ci/postgres.sh` runs (it
starts it when it is not running), and a database of its own for each test."""

from __future__ import annotations

import os
import secrets
import subprocess
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import asyncpg

ROOT = Path(__file__).resolve().parent.parent


def server_url() -> str:
    """The maintenance database's URL; PGPASSWORD is set in this process's environment, as
    an operator sets it for the gateway (the URL carries no password)."""
    env_file = subprocess.run(
        ["bash", str(ROOT / ".ci" / "postgres.sh")],
        check=True,
        capture_output=True,
        text=True,
        timeout=300,
    ).stdout.strip()
    settings = dict(
        line.split("=", 1) for line in Path(env_file).read_text().splitlines() if "=" in line
    )
    os.environ["PGPASSWORD"] = settings["PGPASSWORD"]
    return settings["MCPGW_PG_URL"]


def with_database(url: str, name: str) -> str:
    parts = urlsplit(url)
    return urlunsplit(parts._replace(path=f"/{name}"))


async def create_database(server: str) -> str:
    """A new empty database on `server`; its URL."""
    name = f"t_{secrets.token_hex(6)}"
    conn = await asyncpg.connect(server)
    try:
        await conn.execute(f'CREATE DATABASE "{name}"')
    finally:
        await conn.close()
    return with_database(server, name)


async def drop_database(server: str, url: str) -> None:
    name = urlsplit(url).path.lstrip("/")
    conn = await asyncpg.connect(server)
    try:
        await conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    finally:
        await conn.close()
