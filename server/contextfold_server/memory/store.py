"""Stores and entries in Postgres, searched with pgvector.

Every statement names the caller's namespace, and runs on a connection acting
for it (row-level security): no call reads or changes another namespace's rows.
"""

from __future__ import annotations

import functools
import re
import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import numpy as np
from psycopg import sql
from psycopg.types.json import Jsonb

from ..engine.memory import SearchQuery
from ..errors import AlreadyExists, FailedPrecondition, InvalidArgument, NotFound, ResourceExhausted
from ..postgres.migrations import LEXICAL_CONFIG, SCHEMA
from ..postgres.pool import Connection, Database, NamespaceConnection


@dataclass(frozen=True)
class Scope:
    user_id: str = ""
    agent_id: str = ""
    session_id: str = ""

    def fields(self) -> dict[str, str]:
        """The fields that are set, by column: a statement filters on these, as parameters."""
        return {column: value for column, value in vars(self).items() if value}


_UNSCOPED = Scope()


@dataclass(frozen=True)
class StoreRecord:
    name: str
    description: str
    dimension: int
    create_time: datetime
    memory_count: int = 0


@dataclass(frozen=True)
class NewMemory:
    content: str
    vector: Sequence[float]
    id: str = ""
    metadata: dict[str, Any] = field(default_factory=dict)
    scope: Scope = Scope()


@dataclass(frozen=True)
class MemoryRecord:
    id: str
    store: str
    content: str
    metadata: dict[str, Any]
    scope: Scope
    create_time: datetime
    seq: int


@dataclass(frozen=True)
class ScoredRecord:
    memory: MemoryRecord
    score: float
    # The full-text search's weight, for an entry it found (the lexical candidates); None for the
    # vector search's.
    lexical: float | None = None


# Enough candidates per probe that filtered searches stay accurate, and pgvector
# 0.8's iterative scan keeps probing when a scope filter discards candidates.
# Statements psycopg prepares are planned for their values on every execution: a
# generic plan knows neither the limit nor the scope's values, so it could not pick,
# call by call, a narrow scope's own index or the vector index for a broad one.
SEARCH_SETTINGS = (
    "SET hnsw.ef_search = 100; SET hnsw.iterative_scan = relaxed_order; SET plan_cache_mode = force_custom_plan"
)


_MEMORY_ID = re.compile(r"[\x21-\x7e]{1,128}")


def is_memory_id(value: str) -> bool:
    """Ids are 1 to 128 printable ASCII characters without spaces."""
    return bool(_MEMORY_ID.fullmatch(value))


_MEMORY_COLUMNS = "id, store, content, metadata, user_id, agent_id, session_id, create_time, seq"


def _memory(row: dict[str, Any]) -> MemoryRecord:
    return MemoryRecord(
        id=row["id"],
        store=row["store"],
        content=row["content"],
        metadata=row["metadata"],
        scope=Scope(row["user_id"], row["agent_id"], row["session_id"]),
        create_time=row["create_time"],
        seq=row["seq"],
    )


def _scope_filter(columns: Iterable[str]) -> sql.Composable:
    """` AND user_id = %(user_id)s`, … for each column of a scope's fields."""
    return sql.SQL("").join(
        sql.SQL(" AND {} = {}").format(sql.Identifier(column), sql.Placeholder(column)) for column in columns
    )


_KNOWN_STORES = (
    "WITH known AS MATERIALIZED ("
    " SELECT name, dimension FROM {stores}"
    " WHERE namespace = %(namespace)s AND (cardinality(%(names)s::text[]) = 0 OR name = ANY(%(names)s::text[]))"
    ")"
)


@functools.lru_cache(maxsize=128)
def _search_query(dimension: int, scoped: tuple[str, ...]) -> str:
    """The search statement for a dimension and the scope columns set; composed once, so every
    search of the same shape sends the same text (prepared by psycopg, planned per values)."""
    return (
        sql.SQL(
            _KNOWN_STORES + ", candidates AS MATERIALIZED ("
            # Iterative index scans may return near-ties slightly out of order;
            # the outer sort restores exact order over the few candidates.
            " SELECT {columns}, (embedding::vector({dim})) <=> %(vector)s AS distance FROM {memories}"
            " WHERE namespace = %(namespace)s AND dimension = {dim}"
            " AND store = ANY(ARRAY(SELECT name FROM known WHERE dimension = {dim}))"
            " AND NOT (id = ANY(%(exclude)s)){scope}"
            " ORDER BY distance LIMIT %(limit)s"
            ") SELECT (SELECT coalesce(jsonb_object_agg(name, dimension), '{{}}') FROM known) AS known, found.*"
            " FROM (SELECT 1) AS one LEFT JOIN (SELECT * FROM candidates"
            " WHERE %(max_distance)s::float8 IS NULL OR distance <= %(max_distance)s) AS found ON true"
            " ORDER BY found.distance"
        )
        .format(
            stores=sql.Identifier(SCHEMA, "stores"),
            columns=sql.SQL(_MEMORY_COLUMNS),
            memories=sql.Identifier(SCHEMA, "memories"),
            dim=sql.Literal(dimension),
            scope=_scope_filter(scoped),
        )
        .as_string(None)
    )


# The nearest entries across the stores read first (`nearest_per_store`): a store with enough of them
# among these (the large one a query's near-misses come from) needs no reading of its own.
POOL_CANDIDATES = 40

# A word of the query counts for the lexical search when few entries hold it: at most one in a hundred
# of the stores searched (counted up to RARE_WORD_SAMPLE), and never more than RARE_WORD_ENTRIES.
# Rarer words weigh more (ln((RARE_WORD_ENTRIES + 1) / entries holding it)); commoner ones tell
# little, and ranking every entry holding one would cost a scan of thousands.
RARE_WORD_ENTRIES = 100
RARE_WORD_SAMPLE = 100 * RARE_WORD_ENTRIES


@functools.lru_cache(maxsize=128)
def _per_store_query(dimension: int, scoped: tuple[str, ...], lexical: bool) -> str:
    """The search statement for rankings that read each store's candidates (`nearest_per_store`,
    migration 10), and with `lexical` the full-text search's besides, composed once per shape.

    The lexical search weighs each of the query's words (its lexemes, as the index has them) by how
    rare it is among the namespace's entries, counting at most `RARE_WORD_ENTRIES + 1` through the
    inverted index, and ranks the entries holding rare ones (`RARE_WORD_ENTRIES`) by the sum of their
    words' weights."""
    words = (
        ", searched AS MATERIALIZED ("
        " SELECT greatest(1, least({rare}, count(*) / 100)) AS rare FROM (SELECT FROM {memories}"
        " WHERE namespace = %(namespace)s AND dimension = {dim}"
        " AND store = ANY(ARRAY(SELECT name FROM known WHERE dimension = {dim})) LIMIT {sample}) AS s"
        "), terms AS MATERIALIZED ("
        " SELECT plainto_tsquery('simple', t.lexeme) AS query FROM unnest(to_tsvector({config}, %(words)s)) AS t"
        # Words the table's statistics already know as common (in more than one entry in a hundred) are
        # not counted: counting reads every entry holding them.
        " WHERE NOT EXISTS (SELECT FROM pg_stats AS s,"
        " unnest(s.most_common_elems::text::text[], s.most_common_elem_freqs) AS e(lexeme, frequency)"
        " WHERE s.schemaname = {schema} AND s.tablename = 'memories' AND s.attname = 'lexemes'"
        " AND e.lexeme = t.lexeme AND e.frequency > 0.01)"
        "), counted AS MATERIALIZED ("
        " SELECT t.query, (SELECT count(*) FROM (SELECT FROM {memories} m"
        " WHERE m.namespace = %(namespace)s AND m.lexemes @@ t.query LIMIT {rare_limit}) AS c) AS entries"
        " FROM terms AS t"
        "), words AS MATERIALIZED ("
        " SELECT {m_columns}, ((m.embedding::vector({dim})) <=> %(vector)s)::float8 AS distance,"
        " ranked.weight AS lexical FROM (SELECT hit.id, sum(ln(({rare} + 1.0) / c.entries)) AS weight"
        " FROM counted AS c CROSS JOIN LATERAL (SELECT id FROM {memories}"
        " WHERE namespace = %(namespace)s AND dimension = {dim} AND lexemes @@ c.query"
        " AND store = ANY(ARRAY(SELECT name FROM known WHERE dimension = {dim}))"
        " AND NOT (id = ANY(%(exclude)s)){scope} LIMIT {rare}) AS hit"
        " WHERE c.entries BETWEEN 1 AND (SELECT rare FROM searched)"
        " GROUP BY hit.id ORDER BY weight DESC, hit.id LIMIT %(lexical)s"
        ") AS ranked JOIN {memories} AS m ON m.namespace = %(namespace)s AND m.id = ranked.id"
        ")"
        if lexical
        else ""
    )
    return (
        sql.SQL(
            _KNOWN_STORES + ", near AS MATERIALIZED ("
            " SELECT *, NULL::float8 AS lexical FROM {nearest}(%(namespace)s, {dim}, %(vector)s,"
            " ARRAY(SELECT name FROM known WHERE dimension = {dim} ORDER BY name), %(per_store)s, %(pool)s,"
            " %(exclude)s,"
            " (%(scope)s::text[])[1], (%(scope)s::text[])[2], (%(scope)s::text[])[3])"
            ")" + words + " SELECT (SELECT coalesce(jsonb_object_agg(name, dimension), '{{}}') FROM known) AS known,"
            " found.* FROM (SELECT 1) AS one LEFT JOIN (SELECT * FROM near"
            + (" UNION ALL SELECT * FROM words" if lexical else "")
            + ") AS found ON true"
        )
        .format(
            stores=sql.Identifier(SCHEMA, "stores"),
            nearest=sql.Identifier(SCHEMA, "nearest_per_store"),
            m_columns=sql.SQL(", ").join(sql.Identifier("m", column) for column in _MEMORY_COLUMNS.split(", ")),
            memories=sql.Identifier(SCHEMA, "memories"),
            config=sql.Literal(LEXICAL_CONFIG),
            dim=sql.Literal(dimension),
            rare=sql.Literal(RARE_WORD_ENTRIES),
            rare_limit=sql.Literal(RARE_WORD_ENTRIES + 1),
            sample=sql.Literal(RARE_WORD_SAMPLE),
            schema=sql.Literal(SCHEMA),
            scope=_scope_filter(scoped),
        )
        .as_string(None)
    )


# Stores of a namespace use at most this many vector dimensions: each has an index of its own, which
# every tenant's writes keep up and which takes a while to build.
MAX_DIMENSIONS_PER_NAMESPACE = 8


class PostgresMemoryStore:
    def __init__(self, database: Database, new_dimension: Callable[[int], None] = lambda dimension: None) -> None:
        self._database = database
        # Told each store's dimension as it is created, so its index gets built (`VectorIndexes.request`).
        self._new_dimension = new_dimension

    def _connection(self, namespace: str) -> NamespaceConnection:
        return self._database.connection(namespace)

    # Stores

    async def create_store(self, namespace: str, name: str, description: str, dimension: int) -> StoreRecord:
        """A new store; its dimension's index is built in the background if it has none yet. A
        namespace's stores use at most `MAX_DIMENSIONS_PER_NAMESPACE` dimensions (an index each)."""
        async with self._connection(namespace) as conn:
            # One creation at a time per namespace, so two cannot both pass the cap.
            await conn.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (f"stores of {namespace}",))
            cursor = await conn.execute(
                f"SELECT array_agg(DISTINCT dimension) AS dimensions FROM {SCHEMA}.stores WHERE namespace = %s",
                (namespace,),
            )
            used = set((await cursor.fetchone() or {}).get("dimensions") or ())
            if dimension not in used and len(used) >= MAX_DIMENSIONS_PER_NAMESPACE:
                raise ResourceExhausted(
                    "DIMENSIONS_PER_NAMESPACE",
                    f"store.dimension: this namespace's stores already use {len(used)} dimensions"
                    f" ({', '.join(map(str, sorted(used)))}); the limit is {MAX_DIMENSIONS_PER_NAMESPACE}",
                )
            cursor = await conn.execute(
                f"INSERT INTO {SCHEMA}.stores (namespace, name, description, dimension) VALUES (%s, %s, %s, %s)"
                " ON CONFLICT DO NOTHING RETURNING name, description, dimension, create_time",
                (namespace, name, description, dimension),
            )
            row = await cursor.fetchone()
            if row is None:
                raise AlreadyExists("store", name)
        self._new_dimension(dimension)
        return StoreRecord(**row)

    async def list_stores(self, namespace: str, after: str, limit: int, scope: Scope = _UNSCOPED) -> list[StoreRecord]:
        """A page of stores, each with its count of entries within `scope` (a scope-bound key counts
        its own user's entries, not everyone's)."""
        scoped = scope.fields()
        rows = await self._database.read(
            namespace,
            sql.SQL(
                "SELECT s.name, s.description, s.dimension, s.create_time,"
                " (SELECT count(*) FROM {memories} m WHERE m.namespace = s.namespace AND m.store = s.name{scope})"
                " AS memory_count FROM {stores} s WHERE s.namespace = %(namespace)s AND s.name > %(after)s"
                " ORDER BY s.name LIMIT %(limit)s"
            ).format(
                memories=sql.Identifier(SCHEMA, "memories"),
                stores=sql.Identifier(SCHEMA, "stores"),
                scope=_scope_filter(scoped),
            ),
            {"namespace": namespace, "after": after, "limit": limit, **scoped},
        )
        return [StoreRecord(**row) for row in rows]

    async def get_stores(self, namespace: str, names: Sequence[str]) -> dict[str, StoreRecord]:
        """The named stores that exist; every store of the namespace when `names` is empty."""
        rows = await self._database.read(
            namespace,
            f"SELECT name, description, dimension, create_time FROM {SCHEMA}.stores"
            " WHERE namespace = %s AND (cardinality(%s::text[]) = 0 OR name = ANY(%s::text[]))",
            (namespace, list(names), list(names)),
        )
        return {row["name"]: StoreRecord(**row) for row in rows}

    async def delete_store(self, namespace: str, name: str, force: bool) -> int:
        async with self._connection(namespace) as conn:
            cursor = await conn.execute(
                f"SELECT (SELECT count(*) FROM {SCHEMA}.memories WHERE namespace = %s AND store = %s) AS n"
                f" FROM {SCHEMA}.stores WHERE namespace = %s AND name = %s FOR UPDATE",
                (namespace, name, namespace, name),
            )
            row = await cursor.fetchone()
            if row is None:
                raise NotFound("store", name)
            if row["n"] and not force:
                raise FailedPrecondition(
                    f"store {name!r} holds {row['n']} entries; set force to delete it and its entries"
                )
            await conn.execute(f"DELETE FROM {SCHEMA}.stores WHERE namespace = %s AND name = %s", (namespace, name))
            return int(row["n"])

    # Entries

    async def add_memories(self, namespace: str, store: str, memories: Sequence[NewMemory]) -> list[MemoryRecord]:
        """Add a batch, all or nothing. An id that already holds the same entry is returned as stored."""
        rows = [
            (
                namespace,
                memory.id or str(uuid.uuid4()),
                store,
                memory.content,
                Jsonb(memory.metadata),
                memory.scope.user_id,
                memory.scope.agent_id,
                memory.scope.session_id,
                len(memory.vector),
                np.asarray(memory.vector, dtype=np.float32),
            )
            for memory in memories
        ]
        async with self._connection(namespace) as conn:
            # FOR SHARE holds off a concurrent DeleteStore until the batch is in.
            dimension = await _store_dimension(conn, namespace, store, lock="FOR SHARE")
            for index, memory in enumerate(memories):
                if len(memory.vector) != dimension:
                    raise InvalidArgument.of(
                        f"memories[{index}].vector",
                        f"has {len(memory.vector)} dimensions; store {store!r} has {dimension}",
                    )
            async with conn.cursor() as insert:
                await insert.executemany(
                    f"INSERT INTO {SCHEMA}.memories (namespace, id, store, content, metadata, user_id, agent_id,"
                    " session_id, dimension, embedding) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s)"
                    " ON CONFLICT (namespace, id) DO NOTHING",
                    rows,
                )
            ids = [row[1] for row in rows]
            cursor = await conn.execute(
                f"SELECT {_MEMORY_COLUMNS} FROM {SCHEMA}.memories WHERE namespace = %s AND id = ANY(%s)",
                (namespace, ids),
            )
            stored = {row["id"]: _memory(row) for row in await cursor.fetchall()}
            for index, (memory, row_id) in enumerate(zip(memories, ids, strict=True)):
                existing = stored[row_id]
                if (existing.store, existing.content, existing.metadata, existing.scope) != (
                    store,
                    memory.content,
                    memory.metadata,
                    memory.scope,
                ):
                    raise AlreadyExists(
                        "memory",
                        row_id,
                        f"memories[{index}].id: memory {row_id!r} already exists with different contents",
                    )
            return [stored[row_id] for row_id in ids]

    async def search(
        self, namespace: str, scope: Scope, query: SearchQuery, per_store: int = 0, lexical: int = 0
    ) -> tuple[dict[str, int], list[ScoredRecord]]:
        """In one round trip: the dimension of each store asked for that exists (every store of the
        namespace when `query.stores` is empty), and, among the stores of `query.vector`'s dimension,
        the candidates a ranking needs, each with its similarity to the vector:

        - `per_store` 0: the `query.limit` entries nearest to the vector across the stores, most
          similar first, none below `query.min_score`;
        - `per_store` n: the n nearest in each store (a store's crowd counts the entries below
          `min_score` too: the caller leaves them out once ranked);
        - with `lexical` n besides: up to n entries matching `query.text`'s words, best first by
          full-text weight, each with its `lexical` weight; an entry found both ways comes once from each.
        """
        scoped = scope.fields()
        params = {
            "namespace": namespace,
            **scoped,
            "names": list(query.stores),
            "vector": np.asarray(query.vector, dtype=np.float32),
            "exclude": sorted(query.exclude_ids),
            "limit": query.limit,
            "max_distance": None if query.min_score is None else 1.0 - query.min_score,
        }
        if per_store:
            params |= {
                "per_store": per_store,
                "pool": max(per_store, POOL_CANDIDATES),
                "scope": [scope.user_id, scope.agent_id, scope.session_id],
            }
            if lexical:
                params |= {"words": query.text, "lexical": lexical}
            statement = _per_store_query(len(query.vector), tuple(scoped), bool(lexical))
        else:
            statement = _search_query(len(query.vector), tuple(scoped))
        rows = await self._database.read(namespace, statement, params)
        known = dict(rows[0]["known"])
        results = [
            ScoredRecord(_memory(row), 1.0 - float(row["distance"]), row.get("lexical"))
            for row in rows
            if row["id"] is not None
        ]
        return known, results

    async def get_memory(self, namespace: str, memory_id: str, scope: Scope = _UNSCOPED) -> MemoryRecord:
        """The entry, if it exists within `scope`: outside it, it does not."""
        scoped = scope.fields()
        rows = await self._database.read(
            namespace,
            sql.SQL("SELECT {columns} FROM {table} WHERE namespace = %(namespace)s AND id = %(id)s{scope}").format(
                columns=sql.SQL(_MEMORY_COLUMNS), table=sql.Identifier(SCHEMA, "memories"), scope=_scope_filter(scoped)
            ),
            {"namespace": namespace, "id": memory_id, **scoped},
        )
        if not rows:
            raise NotFound("memory", memory_id)
        return _memory(rows[0])

    async def list_memories(
        self, namespace: str, store: str, scope: Scope, after_seq: int, limit: int
    ) -> list[MemoryRecord]:
        scoped = scope.fields()
        async with self._connection(namespace) as conn:
            await _store_dimension(conn, namespace, store)
            cursor = await conn.execute(
                sql.SQL(
                    "SELECT {columns} FROM {table} WHERE namespace = %(namespace)s AND store = %(store)s"
                    " AND seq > %(after)s{scope} ORDER BY seq LIMIT %(limit)s"
                ).format(
                    columns=sql.SQL(_MEMORY_COLUMNS),
                    table=sql.Identifier(SCHEMA, "memories"),
                    scope=_scope_filter(scoped),
                ),
                {"namespace": namespace, "store": store, "after": after_seq, "limit": limit, **scoped},
            )
            return [_memory(row) for row in await cursor.fetchall()]

    async def delete_memories(
        self, namespace: str, ids: Sequence[str], allow_missing: bool, scope: Scope = _UNSCOPED
    ) -> int:
        """Delete the entries by id, within `scope` (outside it they do not exist)."""
        scoped = scope.fields()
        async with self._connection(namespace) as conn:
            cursor = await conn.execute(
                sql.SQL(
                    "DELETE FROM {table} WHERE namespace = %(namespace)s AND id = ANY(%(ids)s){scope} RETURNING id"
                ).format(table=sql.Identifier(SCHEMA, "memories"), scope=_scope_filter(scoped)),
                {"namespace": namespace, "ids": list(ids), **scoped},
            )
            deleted = {row["id"] for row in await cursor.fetchall()}
            missing = [memory_id for memory_id in ids if memory_id not in deleted]
            if missing and not allow_missing:
                # Raising rolls the transaction back: a failed delete deletes nothing.
                raise NotFound("memory", missing[0], f"memories do not exist: {', '.join(map(repr, missing))}")
            return len(deleted)


async def _store_dimension(conn: Connection, namespace: str, store: str, lock: str = "") -> int:
    """The store's dimension; NOT_FOUND when it does not exist."""
    cursor = await conn.execute(
        f"SELECT dimension FROM {SCHEMA}.stores WHERE namespace = %s AND name = %s {lock}", (namespace, store)
    )
    row = await cursor.fetchone()
    if row is None:
        raise NotFound("store", store)
    return row["dimension"]
