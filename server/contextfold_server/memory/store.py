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
from ..postgres.migrations import SCHEMA
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


@dataclass(frozen=True)
class Candidate:
    """An entry a ranking weighs: its similarity to the query, and for one the full-text search found,
    the weight of the query's rare words it holds (None for the vector search's)."""

    memory: MemoryRecord
    score: float
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


# The stores found, on one row only: on every row, each would carry (and the driver decode) its copy.
_KNOWN_ONCE = (
    "CASE WHEN row_number() OVER () = 1"
    " THEN (SELECT coalesce(jsonb_object_agg(name, dimension), '{{}}') FROM known) END AS known"
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
            ") SELECT " + _KNOWN_ONCE + ", found.*"
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


@functools.lru_cache(maxsize=128)
def _candidates_query(dimension: int, lexical: bool) -> str:
    """The statement reading the candidates of rankings that judge each store's (`nearest_per_store`,
    migration 10) and with `lexical` the entries holding the query's rare words besides, heaviest first
    (`rare_word_matches`): each entry with its distance, and its words' weight when it holds any.
    Composed once per shape."""
    words = (
        ", words AS MATERIALIZED ("
        " SELECT {m_columns}, ((m.embedding::vector({dim})) <=> %(vector)s)::float8 AS distance,"
        " rare.weight AS lexical FROM {rare_words}(%(words)s,"
        " ARRAY(SELECT name FROM known WHERE dimension = {dim}), %(exclude)s,"
        " (%(scope)s::text[])[1], (%(scope)s::text[])[2], (%(scope)s::text[])[3], %(lexical)s) AS rare"
        " JOIN {memories} AS m ON m.namespace = %(namespace)s AND m.id = rare.id"
        ")"
        if lexical
        else ""
    )
    return (
        sql.SQL(
            # The function is read where it is called, not through a CTE: a CTE copies what it returns.
            _KNOWN_STORES + words + " SELECT " + _KNOWN_ONCE + ","
            " found.* FROM (SELECT 1) AS one LEFT JOIN ("
            " SELECT *, NULL::float8 AS lexical FROM {nearest}(%(namespace)s, {dim}, %(vector)s,"
            " ARRAY(SELECT name FROM known WHERE dimension = {dim} ORDER BY name), %(per_store)s, %(pool)s,"
            " %(exclude)s, (%(scope)s::text[])[1], (%(scope)s::text[])[2], (%(scope)s::text[])[3])"
            + (" UNION ALL SELECT * FROM words" if lexical else "")
            + ") AS found ON true"
        )
        .format(
            stores=sql.Identifier(SCHEMA, "stores"),
            nearest=sql.Identifier(SCHEMA, "nearest_per_store"),
            m_columns=sql.SQL(", ").join(sql.Identifier("m", column) for column in _MEMORY_COLUMNS.split(", ")),
            memories=sql.Identifier(SCHEMA, "memories"),
            dim=sql.Literal(dimension),
            rare_words=sql.Identifier(SCHEMA, "rare_word_matches"),
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
        self, namespace: str, scope: Scope, query: SearchQuery
    ) -> tuple[dict[str, int], list[ScoredRecord]]:
        """In one round trip: the dimension of each store asked for that exists (every store of the
        namespace when `query.stores` is empty), and the `query.limit` entries nearest to
        `query.vector` across those of its dimension, most similar first, none below `query.min_score`."""
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
        rows = await self._database.read(namespace, _search_query(len(query.vector), tuple(scoped)), params)
        results = [ScoredRecord(_memory(row), 1.0 - float(row["distance"])) for row in rows if row["id"] is not None]
        return _known(rows), results

    async def candidates(
        self, namespace: str, scope: Scope, query: SearchQuery, per_store: int, pool: int, lexical: int = 0
    ) -> tuple[dict[str, int], list[Candidate]]:
        """In one round trip: the dimension of each store asked for that exists (as `search`), and among
        the stores of `query.vector`'s dimension, the `per_store` entries nearest to it in each store
        where it matters (`nearest_per_store`, with a first pass of `pool` across them), and with
        `lexical`, up to that many entries holding the rare words of `query.text` (an entry may be
        among both). `query.min_score` is not applied: a store's crowd counts every entry."""
        params = {
            "namespace": namespace,
            "names": list(query.stores),
            "vector": np.asarray(query.vector, dtype=np.float32),
            "exclude": sorted(query.exclude_ids),
            "per_store": per_store,
            "pool": max(per_store, pool),
            "scope": [scope.user_id, scope.agent_id, scope.session_id],
        }
        if lexical:
            params |= {"words": query.text, "lexical": lexical}
        rows = await self._database.read(namespace, _candidates_query(len(query.vector), bool(lexical)), params)
        found = [
            Candidate(_memory(row), 1.0 - float(row["distance"]), row["lexical"])
            for row in rows
            if row["id"] is not None
        ]
        return _known(rows), found

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


def _known(rows: list[dict[str, Any]]) -> dict[str, int]:
    """The dimension of each store a search statement found (`_KNOWN_ONCE`: on one of its rows)."""
    return dict(next(row["known"] for row in rows if row["known"] is not None))


async def _store_dimension(conn: Connection, namespace: str, store: str, lock: str = "") -> int:
    """The store's dimension; NOT_FOUND when it does not exist."""
    cursor = await conn.execute(
        f"SELECT dimension FROM {SCHEMA}.stores WHERE namespace = %s AND name = %s {lock}", (namespace, store)
    )
    row = await cursor.fetchone()
    if row is None:
        raise NotFound("store", store)
    return row["dimension"]
