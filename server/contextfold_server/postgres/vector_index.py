"""The HNSW index of each vector dimension: built at start-up or in the background, never in a request.

One table holds stores of every dimension, so each dimension gets a partial index
over its own cast (searches repeat the same cast and predicate, with the dimension as
a literal, which is what lets the planner use it). Building one takes a while and,
done plainly, a lock on every tenant's rows: so it is built with `CREATE INDEX
CONCURRENTLY` on a connection of the login role's own (requests run as a role that
owns nothing), from a background task when a store brings a new dimension, and at
start-up for any dimension still without a valid index (a build cut off by a crash
leaves an invalid one, which is dropped and built again). Until its index is ready,
a dimension's searches are exact scans: right, only slower. An advisory lock per
dimension keeps replicas from building the same index twice.
"""

from __future__ import annotations

import asyncio
import logging

import psycopg

from .schema import SCHEMA

logger = logging.getLogger(__name__)

# Advisory-lock keys: one per dimension, above this base ("vidx").
_LOCK_BASE = 0x76696478 << 12


def index_name(dimension: int) -> str:
    return f"memories_hnsw_{int(dimension)}"


class VectorIndexes:
    def __init__(self, conninfo: str) -> None:
        self._conninfo = conninfo
        self._building: dict[int, asyncio.Task[None]] = {}

    def request(self, dimension: int) -> None:
        """Have the dimension's index built in the background, if it is not there yet."""
        dimension = int(dimension)
        task = self._building.get(dimension)
        if task is None or task.done():
            self._building[dimension] = asyncio.get_running_loop().create_task(self._build_logged(dimension))

    async def built(self, dimension: int) -> None:
        """Wait for the dimension's index, building it if no one is."""
        self.request(dimension)
        await asyncio.shield(self._building[int(dimension)])

    async def build_missing(self) -> None:
        """At start-up: the index of every dimension some store has, where it is missing or invalid."""
        async with await psycopg.AsyncConnection.connect(self._conninfo, autocommit=True) as conn:
            cursor = await conn.execute(f"SELECT DISTINCT dimension FROM {SCHEMA}.stores")
            dimensions = [row[0] for row in await cursor.fetchall()]
        for dimension in dimensions:
            self.request(dimension)

    async def close(self) -> None:
        for task in self._building.values():
            task.cancel()
        await asyncio.gather(*self._building.values(), return_exceptions=True)

    async def _build_logged(self, dimension: int) -> None:
        try:
            await self._build(dimension)
        except (psycopg.Error, OSError) as error:
            # Searches stay exact, and right; the next start, or the next store of this dimension, tries again.
            logger.warning("dimension=<%d>, reason=<%s> | the vector index was not built", dimension, error)

    async def _build(self, dimension: int) -> None:
        name = index_name(dimension)
        async with await psycopg.AsyncConnection.connect(self._conninfo, autocommit=True) as conn:
            cursor = await conn.execute("SELECT pg_try_advisory_lock(%s)", (_LOCK_BASE + dimension,))
            locked = (await cursor.fetchone() or (False,))[0]
            if not locked:
                # Another replica builds it; it is there when that one is done.
                return
            try:
                cursor = await conn.execute(
                    "SELECT i.indisvalid FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid"
                    " JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = %s AND c.relname = %s",
                    (SCHEMA, name),
                )
                row = await cursor.fetchone()
                if row is not None and row[0]:
                    return
                if row is not None:
                    await conn.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {SCHEMA}.{name}")
                logger.info("dimension=<%d> | building the vector index", dimension)
                await conn.execute(
                    f"CREATE INDEX CONCURRENTLY IF NOT EXISTS {name} ON {SCHEMA}.memories"
                    f" USING hnsw ((embedding::vector({dimension})) vector_cosine_ops) WHERE dimension = {dimension}"
                )
                logger.info("dimension=<%d> | the vector index is ready", dimension)
            finally:
                await conn.execute("SELECT pg_advisory_unlock(%s)", (_LOCK_BASE + dimension,))
