"""The database schema, migrated forward at start-up, one SQL file a version.

Postgres holds everything the service keeps, so any replica can serve any call. Each
migration is a file of this folder (`0007_open_namespace.sql`: version 7), kept as it was
written: a database built today runs the same statements one upgraded over the years ran.
Every replica migrates as it starts; an advisory lock makes the migrations run once, and
each applied version is recorded, so running them again changes nothing. Tables live in
their own schema so contextfold can share a database. Roles and grants are `roles.py`'s.
"""

from __future__ import annotations

import functools
import re
import secrets
from importlib import resources

import psycopg

from ..roles import grant_requests
from ..schema import SCHEMA

# One advisory-lock key for the migrations (indexes of new dimensions have their own, in vector_index.py),
# so replicas starting together never race.
_DDL_LOCK = 0x636F6E74  # "cont"
_FILE_NAME = re.compile(r"(\d{4})_[a-z0-9_]+\.sql")


@functools.cache
def migrations() -> tuple[tuple[int, str], ...]:
    """Every migration, (version, its statements), in order."""
    found = []
    for entry in resources.files(__package__).iterdir():
        match = _FILE_NAME.fullmatch(entry.name)
        if match:
            found.append((int(match.group(1)), entry.read_text(encoding="utf-8")))
    found.sort()
    assert [version for version, _ in found] == list(range(1, len(found) + 1)), "migrations are numbered 1, 2, …"
    return tuple(found)


def latest_version() -> int:
    return migrations()[-1][0]


async def migrate(conninfo: str, serving_url: str = "", *, up_to: int | None = None) -> None:
    """Migrate the schema as the role of `conninfo` (its owner), up to version `up_to` (every one by
    default), and grant requests what they need (`roles.grant_requests`; `serving_url` is the role
    requests log in as, when it is not the owner)."""
    async with await psycopg.AsyncConnection.connect(conninfo, autocommit=True) as conn:
        await conn.execute("SELECT pg_advisory_lock(%s)", (_DDL_LOCK,))
        try:
            await conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
            await conn.execute(f"CREATE SCHEMA IF NOT EXISTS {SCHEMA}")
            await conn.execute(
                f"CREATE TABLE IF NOT EXISTS {SCHEMA}.migrations"
                " (version integer PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())"
            )
            cursor = await conn.execute(f"SELECT version FROM {SCHEMA}.migrations")
            applied = {version for (version,) in await cursor.fetchall()}
            for version, statements in migrations():
                if version in applied or (up_to is not None and version > up_to):
                    continue
                async with conn.transaction():
                    await conn.execute(statements)
                    await conn.execute(f"INSERT INTO {SCHEMA}.migrations (version) VALUES (%s)", (version,))
            await grant_requests(conn, serving_url if serving_url != conninfo else "")
        finally:
            await conn.execute("SELECT pg_advisory_unlock(%s)", (_DDL_LOCK,))


async def service_secret(conninfo: str, name: str) -> bytes:
    """The secret `name`, made (32 random bytes) by whichever replica asks first: every replica then
    reads the same one, so what one signs another accepts."""
    async with await psycopg.AsyncConnection.connect(conninfo, autocommit=True) as conn:
        await conn.execute(
            f"INSERT INTO {SCHEMA}.service_secrets (name, value) VALUES (%s, %s) ON CONFLICT DO NOTHING",
            (name, secrets.token_bytes(32)),
        )
        cursor = await conn.execute(f"SELECT value FROM {SCHEMA}.service_secrets WHERE name = %s", (name,))
        row = await cursor.fetchone()
    assert row is not None
    return bytes(row[0])
