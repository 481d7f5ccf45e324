"""The connection pool every Postgres adapter shares; database failures become UNAVAILABLE."""

from __future__ import annotations

import psycopg
from pgvector.psycopg import register_vector_async
from psycopg.rows import dict_row
from psycopg_pool import AsyncConnectionPool

from .errors import Unavailable

# Enough candidates per probe that filtered searches stay accurate, and pgvector
# 0.8's iterative scan keeps probing when a scope filter discards candidates.
_SEARCH_SETTINGS = "SET hnsw.ef_search = 100; SET hnsw.iterative_scan = relaxed_order"


class Database:
    def __init__(self, conninfo: str, pool: AsyncConnectionPool) -> None:
        self.conninfo = conninfo
        self._pool = pool

    @classmethod
    async def open(cls, conninfo: str, min_size: int = 2, max_size: int = 10) -> Database:
        async def configure(conn: psycopg.AsyncConnection) -> None:
            await register_vector_async(conn)
            await conn.execute(_SEARCH_SETTINGS)
            await conn.commit()

        # A short wait for a connection: when the database is down, callers hear
        # so quickly, and injection fails open well within an agent's deadline.
        pool = AsyncConnectionPool(
            conninfo, min_size=min_size, max_size=max_size, configure=configure, open=False, timeout=2.0
        )
        await pool.open(wait=True, timeout=30.0)
        return cls(conninfo, pool)

    async def close(self) -> None:
        await self._pool.close()

    def connection(self) -> _Connection:
        return _Connection(self._pool)


class _Connection:
    """A pooled connection yielding dict rows."""

    def __init__(self, pool: AsyncConnectionPool) -> None:
        self._context = pool.connection()

    async def __aenter__(self) -> psycopg.AsyncConnection:
        try:
            conn = await self._context.__aenter__()
        except (psycopg.Error, TimeoutError) as error:
            raise Unavailable(f"database unavailable: {error}") from error
        conn.row_factory = dict_row
        return conn

    async def __aexit__(self, exc_type, exc, tb) -> bool:
        await self._context.__aexit__(exc_type, exc, tb)
        if isinstance(exc, psycopg.OperationalError):
            raise Unavailable(f"database unavailable: {exc}") from exc
        return False
