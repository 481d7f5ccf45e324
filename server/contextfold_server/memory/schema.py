"""The database schema, migrated forward at start-up.

Postgres holds everything the service keeps, so any replica can serve any call.

Every replica runs the migrations as it starts; an advisory lock makes them run
once, and each applied version is recorded, so running them again changes
nothing. Tables live in their own schema so contextfold can share a database.
"""

from __future__ import annotations

import psycopg

SCHEMA = "contextfold"

# One advisory-lock key for everything that changes the schema (migrations and
# per-dimension indexes), so replicas starting together never race.
_DDL_LOCK = 0x636F6E74  # "cont"

MIGRATIONS: list[tuple[int, str]] = [
    (
        1,
        f"""
        CREATE TABLE {SCHEMA}.stores (
            namespace   text        NOT NULL,
            name        text        NOT NULL,
            description text        NOT NULL DEFAULT '',
            dimension   integer     NOT NULL CHECK (dimension BETWEEN 1 AND 2000),
            create_time timestamptz NOT NULL DEFAULT now(),
            PRIMARY KEY (namespace, name)
        );
        CREATE TABLE {SCHEMA}.memories (
            namespace   text        NOT NULL,
            id          text        NOT NULL,
            store       text        NOT NULL,
            seq         bigint      GENERATED ALWAYS AS IDENTITY,
            content     text        NOT NULL,
            metadata    jsonb       NOT NULL DEFAULT '{{}}',
            user_id     text        NOT NULL DEFAULT '',
            agent_id    text        NOT NULL DEFAULT '',
            session_id  text        NOT NULL DEFAULT '',
            dimension   integer     NOT NULL,
            embedding   vector      NOT NULL,
            create_time timestamptz NOT NULL DEFAULT now(),
            PRIMARY KEY (namespace, id),
            FOREIGN KEY (namespace, store) REFERENCES {SCHEMA}.stores (namespace, name) ON DELETE CASCADE,
            CHECK (vector_dims(embedding) = dimension)
        );
        CREATE INDEX memories_by_store ON {SCHEMA}.memories (namespace, store, seq);
        """,
    ),
    (
        2,
        f"""
        CREATE TABLE {SCHEMA}.providers (
            namespace   text        NOT NULL,
            name        text        NOT NULL,
            target      text        NOT NULL,
            trigger     text        NOT NULL CHECK (trigger IN ('user_turn', 'every_turn')),
            priority    integer     NOT NULL DEFAULT 0,
            timeout_ms  integer     NOT NULL CHECK (timeout_ms BETWEEN 1 AND 30000),
            max_tokens  integer     NOT NULL DEFAULT 0 CHECK (max_tokens >= 0),
            enabled     boolean     NOT NULL DEFAULT true,
            seq         bigint      GENERATED ALWAYS AS IDENTITY,
            create_time timestamptz NOT NULL DEFAULT now(),
            update_time timestamptz NOT NULL DEFAULT now(),
            PRIMARY KEY (namespace, name)
        );
        """,
    ),
    (
        3,
        f"ALTER TABLE {SCHEMA}.providers ADD COLUMN trigger_expression text NOT NULL DEFAULT ''",
    ),
]


async def migrate(conninfo: str) -> None:
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
            for version, statements in MIGRATIONS:
                if version in applied:
                    continue
                async with conn.transaction():
                    await conn.execute(statements)
                    await conn.execute(f"INSERT INTO {SCHEMA}.migrations (version) VALUES (%s)", (version,))
        finally:
            await conn.execute("SELECT pg_advisory_unlock(%s)", (_DDL_LOCK,))


async def ensure_vector_index(conn: psycopg.AsyncConnection, dimension: int) -> None:
    """An HNSW cosine index for the entries of one dimension.

    One table holds stores of every dimension, so each dimension gets a partial
    index over its own cast; searches repeat the same cast and predicate with
    the dimension as a literal, which is what lets the planner use it.
    """
    dimension = int(dimension)
    await conn.execute("SELECT pg_advisory_xact_lock(%s)", (_DDL_LOCK,))
    await conn.execute(
        f"CREATE INDEX IF NOT EXISTS memories_hnsw_{dimension} ON {SCHEMA}.memories"
        f" USING hnsw ((embedding::vector({dimension})) vector_cosine_ops) WHERE dimension = {dimension}"
    )
