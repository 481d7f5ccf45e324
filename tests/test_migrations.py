"""The schema is the same however a database got there: built from zero, or upgraded from any
earlier version, the migrations leave the same tables, indexes, functions, policies and grants."""

from __future__ import annotations

import asyncio
import re
import subprocess

import psycopg
import pytest
from contextfold_server.postgres.migrations import latest_version, migrate, migrations

from harness.servers import Postgres, postgres_binary

# What pg_dump prints that is not the schema: its banner, and the token of `\restrict` (random per dump).
_NOT_SCHEMA = re.compile(r"^(--.*|\\(un)?restrict .*)$", re.M)


def schema_of(postgres: Postgres, database: str) -> str:
    """The schema of `database`, as `pg_dump --schema-only` prints it."""
    url = postgres.url_of(database)
    dumped = subprocess.run(
        [str(postgres_binary("pg_dump")), "--schema-only", "--no-owner", "--dbname", url],
        capture_output=True, text=True, check=True, timeout=120,
    )  # fmt: skip
    return _NOT_SCHEMA.sub("", dumped.stdout)


def create_database(postgres: Postgres, name: str) -> str:
    postgres.query(f'CREATE DATABASE "{name}"')
    return postgres.url_of(name)


def test_every_migration_is_a_numbered_sql_file() -> None:
    versions = [version for version, _ in migrations()]
    assert versions == list(range(1, latest_version() + 1))
    assert all(statements.strip() for _, statements in migrations())


def test_a_database_upgraded_from_any_earlier_version_has_the_schema_of_one_built_from_zero(
    postgres: Postgres,
) -> None:
    asyncio.run(migrate(create_database(postgres, "from_zero")))
    expected = schema_of(postgres, "from_zero")
    assert "CREATE FUNCTION contextfold.nearest_per_store" in expected
    for version in range(1, latest_version()):
        name = f"from_{version}"
        url = create_database(postgres, name)
        asyncio.run(migrate(url, up_to=version))
        with psycopg.connect(url, autocommit=True) as conn:
            applied = [row[0] for row in conn.execute("SELECT version FROM contextfold.migrations ORDER BY 1")]
        assert applied == list(range(1, version + 1))
        asyncio.run(migrate(url))
        assert schema_of(postgres, name) == expected, f"upgraded from version {version}"


@pytest.mark.parametrize("twice", [1, 2])
def test_migrating_again_changes_nothing(postgres: Postgres, twice: int) -> None:
    name = f"again_{twice}"
    url = create_database(postgres, name)
    asyncio.run(migrate(url))
    before = schema_of(postgres, name)
    for _ in range(twice):
        asyncio.run(migrate(url))
    assert schema_of(postgres, name) == before
