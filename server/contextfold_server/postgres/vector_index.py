"""Vector indexes of each namespace's own: one tenant's volume never slows another's searches.

One table holds every tenant's entries, of every dimension. A namespace's entries of one
dimension get an HNSW index of their own once they number `OWN_INDEX_ENTRIES` (partial:
`WHERE dimension = D AND namespace = '…'`, over the dimension's cast); below that, its
searches weigh every entry, exactly, from the namespace's btree index: a few milliseconds
at most, whoever else the table holds. So a small tenant's search reads its own entries
only, never a graph grown with a neighbour's; a large tenant walks a graph of its own
entries, none of it wasted on another's; and a write keeps up only its own namespace's
index, or none (searches repeat the index's cast and predicate, the namespace a value the
planner sees, which is what lets it pick the index: `SEARCH_SETTINGS` plans every search
for its values).

Measured against one index per dimension shared by every tenant (bench/large_tenant.py):
there, a small tenant's search slowed as a neighbour grew, and a bulk add kept up a graph
of every tenant's entries.

An index is built with `CREATE INDEX CONCURRENTLY` (no lock on anyone's writes), on a
connection of the login role's own (requests run as a role that owns nothing), in the
background: one at a time across every worker and replica (an advisory lock), after the
write that took the namespace past the size, and at start-up for any namespace past it
without a valid one (a build cut off by a crash leaves an invalid index, dropped and built
again). Until its index is ready, a namespace's searches are exact: right, only slower.
Each namespace past the size adds an index to the table: a write evaluates every partial
index's predicate (a comparison each), and planning a search considers them all, so this
suits up to a few thousand large tenants; more would want the table partitioned.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import re
from collections.abc import Awaitable, Callable

import psycopg
from psycopg import sql

from .priority import own_session
from .schema import SCHEMA

logger = logging.getLogger(__name__)

# A namespace's entries of one dimension get their own index from this many: below it, an exact search
# weighs them all in about a millisecond a thousand (bench/large_tenant.py), about what a walk of the
# graph costs at this size.
OWN_INDEX_ENTRIES = 5_000
# A write tells of its growth before it commits: its namespace is counted this much later, once it has.
COUNT_AFTER_SECONDS = 1.0
# A namespace that grew without reaching the size is counted again no sooner than this.
RECOUNT_SECONDS = 5.0
# One build at a time across every worker and replica: concurrent builds on one table wait on each other.
_BUILD_LOCK = 0x76696478  # "vidx"
# One index per dimension for every namespace, as releases before own indexes built them.
_SHARED_INDEX = re.compile(r"memories_hnsw_\d+")
# The start-up pass, queued as a namespace and dimension are.
_START_UP = ("", 0)


def index_name(namespace: str, dimension: int) -> str:
    """The name of the namespace's index for the dimension: short enough for any namespace."""
    digest = hashlib.sha256(namespace.encode()).hexdigest()[:16]
    return f"memories_hnsw_{int(dimension)}_{digest}"


class VectorIndexes:
    def __init__(
        self,
        conninfo: str,
        own_index_entries: int = OWN_INDEX_ENTRIES,
        prepare: Callable[[psycopg.AsyncConnection], Awaitable[None]] | None = None,
    ) -> None:
        self._conninfo = conninfo
        # What makes each session ready before it counts or builds (a bulk worker lowers its priority).
        self._prepare = prepare
        self._size = own_index_entries
        # (namespace, dimension) known to have a valid index: told of their growth, nothing is done.
        self._ready: set[tuple[str, int]] = set()
        # What to count (and build if past the size), in order, and when each was last counted.
        self._due: dict[tuple[str, int], bool] = {}
        self._counted: dict[tuple[str, int], float] = {}
        self._wake = asyncio.Event()
        self._worker: asyncio.Task[None] | None = None
        self._built: dict[tuple[str, int], asyncio.Future[None]] = {}

    def grew(self, namespace: str, dimension: int, entries: int) -> None:
        """A write added entries of `dimension` to `namespace`, which now holds `entries` in all: once its
        entries of the dimension number the size, its index is built in the background."""
        key = (namespace, int(dimension))
        if entries < self._size or key in self._ready or key in self._due:
            return
        loop = asyncio.get_running_loop()
        if loop.time() - self._counted.get(key, float("-inf")) >= RECOUNT_SECONDS:
            self._queue(key, forced=False)

    async def built(self, namespace: str, dimension: int) -> None:
        """Build the namespace's index for the dimension whatever its size, and wait until it is ready."""
        key = (namespace, int(dimension))
        if key in self._ready:
            return
        done = self._built.setdefault(key, asyncio.get_running_loop().create_future())
        self._queue(key, forced=True)
        await asyncio.shield(done)

    async def start(self) -> None:
        """At start-up, in the background: the index of every namespace past the size that has none (or
        an invalid one); then the indexes shared by every namespace, as earlier releases kept, dropped."""
        self._ensure_worker()
        self._due[_START_UP] = False  # first in line
        self._wake.set()

    async def close(self) -> None:
        if self._worker is not None:
            self._worker.cancel()
            await asyncio.gather(self._worker, return_exceptions=True)
        for waiting in self._built.values():
            waiting.cancel()

    def _queue(self, key: tuple[str, int], forced: bool) -> None:
        self._due[key] = forced or self._due.get(key, False)
        self._ensure_worker()
        self._wake.set()

    def _ensure_worker(self) -> None:
        if self._worker is None or self._worker.done():
            self._worker = asyncio.get_running_loop().create_task(self._work())

    async def _work(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            while self._due:
                key = next(iter(self._due))
                forced = self._due.pop(key)
                try:
                    if key == _START_UP:
                        await self._start_up()
                        continue
                    if not forced:
                        # A write tells of its growth before it commits: counted once it has.
                        await asyncio.sleep(COUNT_AFTER_SECONDS)
                    async with await self._connect() as conn:
                        ready = await self._settle(conn, key, forced)
                    if forced and not ready:
                        # Another worker or replica holds the build lock: whoever waits for this index waits on.
                        await asyncio.sleep(1.0)
                        self._queue(key, forced=True)
                except (psycopg.Error, OSError) as error:
                    # Searches stay exact, and right; the next write past the size, or the next start, tries again.
                    logger.warning("namespace=<%s>, dimension=<%d>, reason=<%s> | no vector index", *key, error)
                    self._finish(key, error)

    async def _settle(self, conn: psycopg.AsyncConnection, key: tuple[str, int], forced: bool) -> bool:
        """Count the namespace's entries of the dimension and build its index if they reach the size (with
        `forced`, whatever their number), on `conn`: whether the index is ready (not when the entries are
        fewer, or another build holds the lock)."""
        namespace, dimension = key
        self._counted[key] = asyncio.get_running_loop().time()
        if await _valid(conn, index_name(namespace, dimension)) or (
            (forced or await _entries(conn, namespace, dimension, self._size) >= self._size)
            and await self._build(conn, namespace, dimension)
        ):
            self._ready.add(key)
            self._finish(key)
            return True
        return False

    def _finish(self, key: tuple[str, int], error: BaseException | None = None) -> None:
        waiting = self._built.pop(key, None)
        if waiting is not None and not waiting.done():
            waiting.set_exception(error) if error is not None else waiting.set_result(None)

    async def _build(self, conn: psycopg.AsyncConnection, namespace: str, dimension: int) -> bool:
        """Build the index, unless another build holds the lock (False). An invalid one is built again."""
        cursor = await conn.execute("SELECT pg_try_advisory_lock(%s)", (_BUILD_LOCK,))
        if not (await cursor.fetchone() or (False,))[0]:
            return False
        try:
            name = index_name(namespace, dimension)
            if await _valid(conn, name):
                return True
            await conn.execute(_drop(name))
            logger.info("namespace=<%s>, dimension=<%d> | building the namespace's vector index", namespace, dimension)
            await conn.execute(
                sql.SQL(
                    "CREATE INDEX CONCURRENTLY {name} ON {memories} USING hnsw ((embedding::vector({dim}))"
                    " vector_cosine_ops) WHERE dimension = {dim} AND namespace = {namespace}"
                ).format(
                    name=sql.Identifier(name),
                    memories=sql.Identifier(SCHEMA, "memories"),
                    dim=sql.Literal(int(dimension)),
                    namespace=sql.Literal(namespace),
                )
            )
            # The planner picks the index for a namespace it knows to be large: tell it now, not at autovacuum's turn.
            await conn.execute(sql.SQL("ANALYZE {}").format(sql.Identifier(SCHEMA, "memories")))
            logger.info("namespace=<%s>, dimension=<%d> | the namespace's vector index is ready", namespace, dimension)
            return True
        finally:
            await conn.execute("SELECT pg_advisory_unlock(%s)", (_BUILD_LOCK,))

    async def _connect(self) -> psycopg.AsyncConnection:
        return await own_session(self._conninfo, self._prepare)

    async def _start_up(self) -> None:
        async with await self._connect() as conn:
            cursor = await conn.execute(
                f"SELECT namespace FROM {SCHEMA}.tenant_usage GROUP BY namespace HAVING sum(entries) >= %s",
                (self._size,),
            )
            large = [row[0] for row in await cursor.fetchall()]
            for namespace in large:
                async with conn.transaction():
                    await conn.execute("SELECT set_config('contextfold.namespace', %s, true)", (namespace,))
                    cursor = await conn.execute(f"SELECT DISTINCT dimension FROM {SCHEMA}.stores")
                    dimensions = [row[0] for row in await cursor.fetchall()]
                for dimension in dimensions:
                    await self._settle(conn, (namespace, dimension), forced=False)
            cursor = await conn.execute(
                "SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
                " WHERE n.nspname = %s AND c.relkind = 'i' AND c.relname LIKE 'memories\\_hnsw\\_%%'",
                (SCHEMA,),
            )
            for (name,) in await cursor.fetchall():
                if _SHARED_INDEX.fullmatch(name):
                    logger.info("index=<%s> | dropping the vector index every namespace shared", name)
                    await conn.execute(_drop(name))


def _drop(name: str) -> sql.Composed:
    return sql.SQL("DROP INDEX CONCURRENTLY IF EXISTS {}").format(sql.Identifier(SCHEMA, name))


async def _valid(conn: psycopg.AsyncConnection, name: str) -> bool:
    cursor = await conn.execute(
        "SELECT i.indisvalid FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid"
        " JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = %s AND c.relname = %s",
        (SCHEMA, name),
    )
    row = await cursor.fetchone()
    return bool(row and row[0])


async def _entries(conn: psycopg.AsyncConnection, namespace: str, dimension: int, up_to: int) -> int:
    """The namespace's entries of the dimension, counted up to `up_to` (a bounded read)."""
    async with conn.transaction():
        # Row-level security binds the login role too: it reads as the namespace.
        await conn.execute("SELECT set_config('contextfold.namespace', %s, true)", (namespace,))
        cursor = await conn.execute(
            f"SELECT count(*) FROM (SELECT 1 FROM {SCHEMA}.memories WHERE namespace = %s AND dimension = %s"
            " LIMIT %s) AS counted",
            (namespace, dimension, up_to),
        )
        return int((await cursor.fetchone() or (0,))[0])
