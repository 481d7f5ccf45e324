"""Stores and entries in Postgres, searched with pgvector.

Every statement names the caller's namespace, and runs on a connection acting
for it (row-level security): no call reads or changes another namespace's rows.
"""

from __future__ import annotations

import functools
import re
import uuid
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
from psycopg import sql
from psycopg.types.json import Jsonb

from ..engine.filters import Filter
from ..engine.memory import SearchQuery
from ..errors import Aborted, AlreadyExists, FailedPrecondition, InvalidArgument, NotFound, ResourceExhausted
from ..postgres.migrations import PURGE_SETTING, SCHEMA
from ..postgres.pool import Connection, Database, NamespaceConnection
from ..postgres.replicas import Databases
from .filters import anchor, compile_filter


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
    # Entries added without an expiry expire this long after; None: never.
    default_ttl: timedelta | None = None


@dataclass(frozen=True)
class NewMemory:
    content: str
    vector: Sequence[float]
    id: str = ""
    metadata: dict[str, Any] = field(default_factory=dict)
    scope: Scope = Scope()
    # None: the store's default time-to-live after it is added, or never.
    expire_time: datetime | None = None


@dataclass(frozen=True)
class MemoryRecord:
    id: str
    store: str
    content: str
    metadata: dict[str, Any]
    scope: Scope
    create_time: datetime
    seq: int
    # None until the first update.
    update_time: datetime | None = None
    expire_time: datetime | None = None
    version: int = 1

    @property
    def etag(self) -> str:
        """Changes with every update, and differs for an entry deleted and added again under its id."""
        return f"{self.seq}.{self.version}"


@dataclass(frozen=True)
class ImportedMemory:
    """An entry as ExportMemories wrote it: its own id, store, vector and times."""

    memory: NewMemory
    store: str
    create_time: datetime | None
    update_time: datetime | None


@dataclass(frozen=True)
class MemoryVersion:
    """What an update replaced: the entry's fields in `version`, and when and by whom it was replaced."""

    version: int
    memory: MemoryRecord
    replace_time: datetime
    replaced_by: str


# The fields UpdateMemory may change, by their name in an update mask.
UPDATABLE = ("content", "metadata", "user_id", "agent_id", "session_id", "vector", "expire_time")


@dataclass(frozen=True)
class MemoryChange:
    """An update: the new values of the fields in `fields` (names from `UPDATABLE`)."""

    fields: frozenset[str]
    content: str = ""
    metadata: dict[str, Any] = field(default_factory=dict)
    scope: Scope = Scope()
    vector: Sequence[float] = ()
    expire_time: datetime | None = None


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


_MEMORY_COLUMNS = (
    "id, store, content, metadata, user_id, agent_id, session_id, create_time, seq, update_time, expire_time, version"
)
# An entry is returned until it expires: the caller's clock (`%(live_at)s`) is past its expiry from that moment.
_LIVE = " AND (m.expire_time IS NULL OR m.expire_time > %(live_at)s)"
# The columns of an entry's version, as `memory_versions` keeps them.
_VERSIONED = "store, content, metadata, user_id, agent_id, session_id, create_time, update_time, expire_time"


def _memory(row: dict[str, Any]) -> MemoryRecord:
    return MemoryRecord(
        id=row["id"],
        store=row["store"],
        content=row["content"],
        metadata=row["metadata"],
        scope=Scope(row["user_id"], row["agent_id"], row["session_id"]),
        create_time=row["create_time"],
        seq=row["seq"],
        update_time=row["update_time"],
        expire_time=row["expire_time"],
        version=row["version"],
    )


def _now() -> datetime:
    return datetime.now(UTC)


def _scope_filter(columns: Iterable[str]) -> sql.Composable:
    """` AND m.user_id = %(user_id)s`, … for each column of a scope's fields (the entries' table is `m`)."""
    return sql.SQL("").join(
        sql.SQL(" AND {} = {}").format(sql.Identifier("m", column), sql.Placeholder(column)) for column in columns
    )


def _entries_where(scope: Scope, tree: Filter | None, live: bool = True) -> tuple[str, dict[str, Any]]:
    """The conditions after `m.namespace = %(namespace)s` for the entries of `scope` matching `tree` (and
    with `live`, not expired at `%(live_at)s`), and their parameters besides `live_at`."""
    scoped = scope.fields()
    condition, params = compile_filter(tree)
    return _scope_filter(scoped).as_string(None) + (_LIVE if live else "") + condition, {**scoped, **params}


_STORE_COLUMNS = "name, description, dimension, create_time, default_ttl"
_M_COLUMNS = sql.SQL(", ").join(sql.Identifier("m", column) for column in _MEMORY_COLUMNS.split(", "))
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
def _search_query(dimension: int, where: str, exact: bool = False) -> str:
    """The search statement for a dimension and the entries' conditions (`_entries_where`); composed once,
    so every search of the same shape sends the same text (prepared by psycopg, planned per values).
    `exact` orders by the distance itself, which the vector index does not serve: every entry that
    matches is weighed. Its first row says how many candidates there were before `min_score`."""
    return (
        sql.SQL(
            _KNOWN_STORES + ", candidates AS MATERIALIZED ("
            # Iterative index scans may return near-ties slightly out of order;
            # the outer sort restores exact order over the few candidates.
            " SELECT {columns}, {distance} AS distance FROM {memories} m"
            " WHERE m.namespace = %(namespace)s AND m.dimension = {dim}"
            " AND m.store = ANY(ARRAY(SELECT name FROM known WHERE dimension = {dim}))"
            " AND NOT (m.id = ANY(%(exclude)s)){where}"
            " ORDER BY distance LIMIT %(limit)s"
            ") SELECT " + _KNOWN_ONCE + ","
            " CASE WHEN row_number() OVER () = 1 THEN (SELECT count(*) FROM candidates) END AS candidate_count,"
            " found.* FROM (SELECT 1) AS one LEFT JOIN (SELECT * FROM candidates"
            " WHERE %(max_distance)s::float8 IS NULL OR distance <= %(max_distance)s) AS found ON true"
            " ORDER BY found.distance"
        )
        .format(
            stores=sql.Identifier(SCHEMA, "stores"),
            columns=_M_COLUMNS,
            memories=sql.Identifier(SCHEMA, "memories"),
            dim=sql.Literal(dimension),
            where=sql.SQL(where),
            distance=sql.SQL(_EXACT_DISTANCE if exact else _INDEXED_DISTANCE).format(dim=sql.Literal(dimension)),
        )
        .as_string(None)
    )


# The distance the dimension's vector index serves (over its own cast), and the same distance uncast, which it
# does not: a statement ordering by the second weighs every entry its conditions leave.
_INDEXED_DISTANCE = "((m.embedding::vector({dim})) <=> %(vector)s)::float8"
_EXACT_DISTANCE = "(m.embedding <=> %(vector)s)::float8"


@functools.lru_cache(maxsize=128)
def _candidates_query(dimension: int, lexical: bool, where: str, filtered: bool, exact: bool = False) -> str:
    """The statement reading the candidates of rankings that judge each store's, and with `lexical` the
    entries holding the query's rare words besides, heaviest first (`rare_word_matches`): each entry with
    its distance, and its words' weight when it holds any. Without a filter (`where` holds the scope and
    expiry only), each store's nearest come from `nearest_per_store` (migration 11); with one, each store's
    `per_store` nearest that match it are read by a statement of their own, through the vector index (its
    iterative scan skips what the filter refuses) or exactly, as its plan for the store decides; with
    `exact`, always exactly. Composed once per shape."""
    words = (
        ", words AS MATERIALIZED ("
        " SELECT {columns}, ((m.embedding::vector({dim})) <=> %(vector)s)::float8 AS distance,"
        " rare.weight AS lexical FROM {rare_words}(%(words)s,"
        " ARRAY(SELECT name FROM known WHERE dimension = {dim}), %(exclude)s,"
        " (%(scope)s::text[])[1], (%(scope)s::text[])[2], (%(scope)s::text[])[3], %(lexical)s) AS rare"
        " JOIN {memories} AS m ON m.namespace = %(namespace)s AND m.id = rare.id{where}"
        ")"
        if lexical
        else ""
    )
    nearest = (
        " SELECT nearest.*, NULL::float8 AS lexical FROM (SELECT name FROM known WHERE dimension = {dim}) AS s"
        " CROSS JOIN LATERAL (SELECT {columns}, {distance} AS distance"
        " FROM {memories} m WHERE m.namespace = %(namespace)s AND m.dimension = {dim} AND m.store = s.name"
        " AND NOT (m.id = ANY(%(exclude)s)){where} ORDER BY distance LIMIT %(per_store)s) AS nearest"
        if filtered
        # The function is read where it is called, not through a CTE: a CTE copies what it returns.
        else " SELECT *, NULL::float8 AS lexical FROM {nearest}(%(namespace)s, {dim}, %(vector)s,"
        " ARRAY(SELECT name FROM known WHERE dimension = {dim} ORDER BY name), %(per_store)s, %(pool)s,"
        " %(exclude)s, (%(scope)s::text[])[1], (%(scope)s::text[])[2], (%(scope)s::text[])[3], %(live_at)s)"
    )
    return (
        sql.SQL(
            _KNOWN_STORES + words + " SELECT " + _KNOWN_ONCE + ","
            " found.* FROM (SELECT 1) AS one LEFT JOIN ("
            + nearest
            + (" UNION ALL SELECT * FROM words" if lexical else "")
            + ") AS found ON true"
        )
        .format(
            stores=sql.Identifier(SCHEMA, "stores"),
            nearest=sql.Identifier(SCHEMA, "nearest_per_store"),
            columns=_M_COLUMNS,
            memories=sql.Identifier(SCHEMA, "memories"),
            dim=sql.Literal(dimension),
            rare_words=sql.Identifier(SCHEMA, "rare_word_matches"),
            where=sql.SQL(where),
            distance=sql.SQL(_EXACT_DISTANCE if exact else _INDEXED_DISTANCE).format(dim=sql.Literal(dimension)),
        )
        .as_string(None)
    )


# A filtered search reads through the vector index first: the planner cannot tell how many entries a
# filter keeps (it has no statistics inside metadata) and would often read a store whole to sort it. The
# index's scan gives up after this many entries (a filter few entries pass), and the search is then
# done exactly (`exact`): bounded work wasted, never a result missed.
INDEX_FIRST = {"enable_sort": "off", "hnsw.max_scan_tuples": "5000"}

# Stores of a namespace use at most this many vector dimensions: each has an index of its own, which
# every tenant's writes keep up and which takes a while to build.
MAX_DIMENSIONS_PER_NAMESPACE = 8


class PostgresMemoryStore:
    def __init__(
        self,
        database: Database | Databases,
        new_dimension: Callable[[int], None] = lambda dimension: None,
        clock: Callable[[], datetime] = _now,
    ) -> None:
        self._database = database
        # Told each store's dimension as it is created, so its index gets built (`VectorIndexes.request`).
        self._new_dimension = new_dimension
        # What time it is for expiry: an entry is gone from every read the moment this passes its expiry.
        self._clock = clock

    def _connection(self, namespace: str) -> NamespaceConnection:
        return self._database.connection(namespace)

    # Stores

    async def create_store(
        self, namespace: str, name: str, description: str, dimension: int, default_ttl: timedelta | None = None
    ) -> StoreRecord:
        """A new store; its dimension's index is built in the background if it has none yet. A
        namespace's stores use at most `MAX_DIMENSIONS_PER_NAMESPACE` dimensions (an index each)."""
        async with self._connection(namespace) as conn:
            record = await self._create_store(conn, namespace, name, description, dimension, default_ttl)
            if record is None:
                raise AlreadyExists("store", name)
        self._new_dimension(dimension)
        return record

    async def _create_store(
        self,
        conn: Connection,
        namespace: str,
        name: str,
        description: str,
        dimension: int,
        default_ttl: timedelta | None,
    ) -> StoreRecord | None:
        """The store created on `conn`, or None when its name is taken."""
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
            f"INSERT INTO {SCHEMA}.stores (namespace, name, description, dimension, default_ttl)"
            f" VALUES (%s, %s, %s, %s, %s) ON CONFLICT DO NOTHING RETURNING {_STORE_COLUMNS}",
            (namespace, name, description, dimension, default_ttl),
        )
        row = await cursor.fetchone()
        return None if row is None else StoreRecord(**row)

    async def list_stores(self, namespace: str, after: str, limit: int, scope: Scope = _UNSCOPED) -> list[StoreRecord]:
        """A page of stores, each with its count of entries within `scope` (a scope-bound key counts
        its own user's entries, not everyone's) that have not expired."""
        where, params = _entries_where(scope, None)
        rows = await self._database.read(
            namespace,
            sql.SQL(
                "SELECT {columns}, (SELECT count(*) FROM {memories} m WHERE m.namespace = s.namespace"
                " AND m.store = s.name{where}) AS memory_count FROM {stores} s"
                " WHERE s.namespace = %(namespace)s AND s.name > %(after)s ORDER BY s.name LIMIT %(limit)s"
            ).format(
                columns=sql.SQL(", ").join(sql.Identifier("s", c) for c in _STORE_COLUMNS.split(", ")),
                memories=sql.Identifier(SCHEMA, "memories"),
                stores=sql.Identifier(SCHEMA, "stores"),
                where=sql.SQL(where),
            ),
            {"namespace": namespace, "after": after, "limit": limit, "live_at": self._clock(), **params},
        )
        return [StoreRecord(**row) for row in rows]

    async def get_stores(self, namespace: str, names: Sequence[str]) -> dict[str, StoreRecord]:
        """The named stores that exist; every store of the namespace when `names` is empty."""
        rows = await self._database.read(
            namespace,
            f"SELECT {_STORE_COLUMNS} FROM {SCHEMA}.stores"
            " WHERE namespace = %s AND (cardinality(%s::text[]) = 0 OR name = ANY(%s::text[])) ORDER BY name",
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
        async with self._connection(namespace) as conn:
            return await _add_memories(conn, namespace, store, memories)

    async def search(
        self, namespace: str, scope: Scope, query: SearchQuery
    ) -> tuple[dict[str, int], list[ScoredRecord]]:
        """In one round trip: the dimension of each store asked for that exists (every store of the
        namespace when `query.stores` is empty), and the `query.limit` entries nearest to
        `query.vector` across those of its dimension that match `query.filter`, most similar first,
        none below `query.min_score`."""
        where, params = _entries_where(scope, query.filter)
        params |= {
            "namespace": namespace,
            "names": list(query.stores),
            "vector": np.asarray(query.vector, dtype=np.float32),
            "exclude": sorted(query.exclude_ids),
            "limit": query.limit,
            "max_distance": None if query.min_score is None else 1.0 - query.min_score,
            "live_at": self._clock(),
        }
        statement = _search_query(len(query.vector), where)
        rows = await self._database.read(namespace, statement, params, INDEX_FIRST if query.filter else None)
        if query.filter is not None and _once(rows, "candidate_count") < query.limit:
            # Fewer matches than asked for: there are no more, or the vector index's scan gave up first
            # (pgvector stops after `hnsw.max_scan_tuples`) on a filter few entries pass. Weighed exactly.
            exact = _search_query(len(query.vector), where + _anchored(query.filter, params), exact=True)
            rows = await self._database.read(namespace, exact, params)
        results = [ScoredRecord(_memory(row), 1.0 - float(row["distance"])) for row in rows if row["id"] is not None]
        return _known(rows), results

    async def candidates(
        self, namespace: str, scope: Scope, query: SearchQuery, per_store: int, pool: int, lexical: int = 0
    ) -> tuple[dict[str, int], list[Candidate]]:
        """In one round trip: the dimension of each store asked for that exists (as `search`), and among
        the stores of `query.vector`'s dimension, the `per_store` entries nearest to it in each store
        where it matters (`nearest_per_store`, with a first pass of `pool` across them; each store's
        own when `query.filter` is set), and with `lexical`, up to that many entries holding the rare
        words of `query.text` (an entry may be among both). `query.min_score` is not applied: a store's
        crowd counts every entry."""
        where, params = _entries_where(scope, query.filter)
        params |= {
            "namespace": namespace,
            "names": list(query.stores),
            "vector": np.asarray(query.vector, dtype=np.float32),
            "exclude": sorted(query.exclude_ids),
            "per_store": per_store,
            "pool": max(per_store, pool),
            "scope": [scope.user_id, scope.agent_id, scope.session_id],
            "live_at": self._clock(),
        }
        if lexical:
            params |= {"words": query.text, "lexical": lexical}
        dimension, filtered = len(query.vector), query.filter is not None
        statement = _candidates_query(dimension, bool(lexical), where, filtered)
        rows = await self._database.read(namespace, statement, params, INDEX_FIRST if filtered else None)
        searched = sum(1 for stored in _known(rows).values() if stored == dimension)
        nearest = sum(1 for row in rows if row["id"] is not None and row["lexical"] is None)
        if filtered and nearest < per_store * searched:
            # A store gave fewer matches than asked for: as in `search`, weighed exactly.
            anchored = where + _anchored(query.filter, params)
            statement = _candidates_query(dimension, bool(lexical), anchored, filtered, exact=True)
            rows = await self._database.read(namespace, statement, params)
        found = [
            Candidate(_memory(row), 1.0 - float(row["distance"]), row["lexical"])
            for row in rows
            if row["id"] is not None
        ]
        return _known(rows), found

    async def get_memory(self, namespace: str, memory_id: str, scope: Scope = _UNSCOPED) -> MemoryRecord:
        """The entry, if it exists within `scope` and has not expired: otherwise, it does not."""
        where, params = _entries_where(scope, None)
        rows = await self._database.read(
            namespace,
            f"SELECT {_MEMORY_COLUMNS} FROM {SCHEMA}.memories m"
            f" WHERE m.namespace = %(namespace)s AND m.id = %(id)s{where}",
            {"namespace": namespace, "id": memory_id, "live_at": self._clock(), **params},
        )
        if not rows:
            raise NotFound("memory", memory_id)
        return _memory(rows[0])

    async def list_memories(
        self, namespace: str, store: str, scope: Scope, after_seq: int, limit: int, tree: Filter | None = None
    ) -> list[MemoryRecord]:
        """A page of the store's entries within `scope` that match `tree`, oldest first, after `after_seq`."""
        where, params = _entries_where(scope, tree)
        if not await self.get_stores(namespace, [store]):
            raise NotFound("store", store)
        rows = await self._database.read(
            namespace,
            f"SELECT {_MEMORY_COLUMNS} FROM {SCHEMA}.memories m WHERE m.namespace = %(namespace)s"
            f" AND m.store = %(store)s AND m.seq > %(after)s{where} ORDER BY m.seq LIMIT %(limit)s",
            {"namespace": namespace, "store": store, "after": after_seq, "limit": limit, "live_at": self._clock()}
            | params,
        )
        return [_memory(row) for row in rows]

    async def delete_memories(
        self, namespace: str, ids: Sequence[str], allow_missing: bool, scope: Scope = _UNSCOPED
    ) -> int:
        """Delete the entries by id, within `scope` (outside it, or expired, they do not exist)."""
        where, params = _entries_where(scope, None)
        async with self._connection(namespace) as conn:
            cursor = await conn.execute(
                f"DELETE FROM {SCHEMA}.memories m WHERE m.namespace = %(namespace)s AND m.id = ANY(%(ids)s)"
                f"{where} RETURNING m.id",
                {"namespace": namespace, "ids": list(ids), "live_at": self._clock(), **params},
            )
            deleted = {row["id"] for row in await cursor.fetchall()}
            missing = [memory_id for memory_id in ids if memory_id not in deleted]
            if missing and not allow_missing:
                # Raising rolls the transaction back: a failed delete deletes nothing.
                raise NotFound("memory", missing[0], f"memories do not exist: {', '.join(map(repr, missing))}")
            return len(deleted)

    # The lifecycle: updates and their versions, erasure, export and import, expiry.

    async def update_memory(
        self,
        namespace: str,
        memory_id: str,
        change: MemoryChange,
        *,
        etag: str = "",
        store: str = "",
        allow_missing: bool = False,
        scope: Scope = _UNSCOPED,
        replaced_by: str = "",
    ) -> tuple[MemoryRecord, bool]:
        """The entry after `change`, and whether it was added: with `allow_missing`, an id no live entry
        holds within `scope` is added to `store` (from the change's fields). Otherwise the version it
        replaces is kept, with `replaced_by` and the time. `etag`, when given, must be the entry's: ABORTED
        when another update came first. The entry's row is locked for the update, so two updates of one
        version cannot both pass the check."""
        where, params = _entries_where(scope, None)
        live_at = self._clock()
        async with self._connection(namespace) as conn:
            cursor = await conn.execute(
                f"SELECT {_MEMORY_COLUMNS}, m.dimension FROM {SCHEMA}.memories m"
                f" WHERE m.namespace = %(namespace)s AND m.id = %(id)s{where} FOR UPDATE",
                {"namespace": namespace, "id": memory_id, "live_at": live_at, **params},
            )
            row = await cursor.fetchone()
            if row is None:
                if not allow_missing:
                    raise NotFound("memory", memory_id)
                if etag:
                    raise Aborted("ETAG_MISMATCH", f"memory {memory_id!r} does not exist: no etag matches it")
                return await self._add_for_update(conn, namespace, memory_id, change, store, live_at), True
            current = _memory(row)
            if etag and etag != current.etag:
                raise Aborted(
                    "ETAG_MISMATCH",
                    f"memory {memory_id!r} changed since it was read (etag {current.etag!r}, not {etag!r}):"
                    " read it again and retry",
                )
            if store and store != current.store:
                raise InvalidArgument.of("memory.store", f"memory {memory_id!r} is in store {current.store!r}")
            if "vector" in change.fields:
                _check_dimension(change.vector, row["dimension"], current.store, "memory.vector")
            await conn.execute(
                f"INSERT INTO {SCHEMA}.memory_versions (namespace, id, version, {_VERSIONED}, replaced_by)"
                f" SELECT namespace, id, version, {_VERSIONED}, %s FROM {SCHEMA}.memories"
                " WHERE namespace = %s AND id = %s",
                (replaced_by, namespace, memory_id),
            )
            assignments = ["version = version + 1", "update_time = now()"]
            values: dict[str, Any] = {"namespace": namespace, "id": memory_id}
            for name in sorted(change.fields):
                if name in ("user_id", "agent_id", "session_id"):
                    values[name] = getattr(change.scope, name)
                elif name == "metadata":
                    values[name] = Jsonb(change.metadata)
                elif name == "vector":
                    values[name] = np.asarray(change.vector, dtype=np.float32)
                else:
                    values[name] = getattr(change, name)
                column = "embedding" if name == "vector" else name
                assignments.append(f"{column} = %({name})s")
            cursor = await conn.execute(
                f"UPDATE {SCHEMA}.memories SET {', '.join(assignments)}"
                f" WHERE namespace = %(namespace)s AND id = %(id)s RETURNING {_MEMORY_COLUMNS}",
                values,
            )
            updated = await cursor.fetchone()
            assert updated is not None  # locked above
            return _memory(updated), False

    async def _add_for_update(
        self, conn: Connection, namespace: str, memory_id: str, change: MemoryChange, store: str, live_at: datetime
    ) -> MemoryRecord:
        """An upsert's add: the entry from the change's fields, in `store`. An expired entry still holding
        the id (not purged yet) goes first; one outside the caller's scope keeps it (ALREADY_EXISTS)."""
        dimension, ttl = await _store_settings(conn, namespace, store, lock="FOR SHARE")
        _check_dimension(change.vector, dimension, store, "memory.vector")
        await conn.execute(
            f"DELETE FROM {SCHEMA}.memories WHERE namespace = %s AND id = %s AND expire_time <= %s",
            (namespace, memory_id, live_at),
        )
        cursor = await conn.execute(
            f"INSERT INTO {SCHEMA}.memories (namespace, id, store, content, metadata, user_id, agent_id,"
            " session_id, dimension, embedding, expire_time)"
            " VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, coalesce(%s, now() + %s))"
            f" ON CONFLICT (namespace, id) DO NOTHING RETURNING {_MEMORY_COLUMNS}",
            (
                namespace,
                memory_id,
                store,
                change.content,
                Jsonb(change.metadata),
                change.scope.user_id,
                change.scope.agent_id,
                change.scope.session_id,
                dimension,
                np.asarray(change.vector, dtype=np.float32),
                change.expire_time,
                ttl,
            ),
        )
        row = await cursor.fetchone()
        if row is None:
            raise AlreadyExists("memory", memory_id, f"memory.id: {memory_id!r} is taken")
        return _memory(row)

    async def list_versions(
        self, namespace: str, memory_id: str, scope: Scope, before: int, limit: int
    ) -> list[MemoryVersion]:
        """The versions of a live entry within `scope` that updates replaced, newest first, older than
        `before` (0: from the newest). NOT_FOUND when the entry is not there."""
        current = await self.get_memory(namespace, memory_id, scope)
        rows = await self._database.read(
            namespace,
            f"SELECT id, version, {_VERSIONED}, replace_time, replaced_by FROM {SCHEMA}.memory_versions"
            " WHERE namespace = %(namespace)s AND id = %(id)s AND (%(before)s = 0 OR version < %(before)s)"
            " ORDER BY version DESC LIMIT %(limit)s",
            {"namespace": namespace, "id": memory_id, "before": before, "limit": limit},
        )
        return [
            MemoryVersion(row["version"], _memory({**row, "seq": current.seq}), row["replace_time"], row["replaced_by"])
            for row in rows
        ]

    async def erase(
        self, namespace: str, stores: Sequence[str], scope: Scope, tree: Filter | None, batch: int = 1000
    ) -> int:
        """Delete every entry of `stores` (every store when empty) within `scope` matching `tree`, expired
        ones too, with their versions; with a scope and no filter, the turns Remember noted for it too.
        In batches of `batch`, each its own transaction: a long erasure holds no lock for long, and one
        cut short is finished by calling again. Named stores must exist."""
        if stores:
            found = await self.get_stores(namespace, stores)
            missing = [name for name in stores if name not in found]
            if missing:
                raise NotFound("store", missing[0])
        where, params = _entries_where(scope, tree, live=False)
        params |= {"namespace": namespace, "stores": list(stores), "batch": batch}
        statement = (
            f"DELETE FROM {SCHEMA}.memories WHERE namespace = %(namespace)s AND id IN ("
            f" SELECT m.id FROM {SCHEMA}.memories m WHERE m.namespace = %(namespace)s"
            f" AND (cardinality(%(stores)s::text[]) = 0 OR m.store = ANY(%(stores)s::text[])){where}"
            " LIMIT %(batch)s) RETURNING 1"
        )
        erased = 0
        while True:
            async with self._connection(namespace) as conn:
                cursor = await conn.execute(statement, params)
                # Counted from the rows returned: in pipeline mode, a cursor's rowcount is not known yet.
                deleted = len(await cursor.fetchall())
            erased += deleted
            if deleted < batch:
                break
        if tree is None and scope.fields():
            # Without a filter, `where` is the scope alone: the ledger's rows have its columns too.
            async with self._connection(namespace) as conn:
                await conn.execute(
                    f"DELETE FROM {SCHEMA}.remembered_turns m WHERE m.namespace = %(namespace)s"
                    f" AND (cardinality(%(stores)s::text[]) = 0 OR m.store = ANY(%(stores)s::text[])){where}",
                    params,
                )
        return erased

    async def export(
        self, namespace: str, stores: Sequence[str], scope: Scope, tree: Filter | None, batch: int = 256
    ) -> AsyncIterator[list[tuple[MemoryRecord, list[float]]]]:
        """The live entries of `stores` within `scope` matching `tree`, with their vectors, oldest first,
        `batch` at a time: each batch one read after the last one's position, so an export holds no
        transaction open while its reader is slow."""
        where, params = _entries_where(scope, tree)
        params |= {"namespace": namespace, "stores": list(stores), "batch": batch}
        after = 0
        while True:
            rows = await self._database.read(
                namespace,
                f"SELECT {_MEMORY_COLUMNS}, m.embedding FROM {SCHEMA}.memories m WHERE m.namespace = %(namespace)s"
                f" AND m.store = ANY(%(stores)s::text[]) AND m.seq > %(after)s{where}"
                " ORDER BY m.seq LIMIT %(batch)s",
                {**params, "after": after, "live_at": self._clock()},
            )
            if not rows:
                return
            # pgvector's psycopg adapter reads the column as its `Vector`.
            yield [(_memory(row), row["embedding"].to_list()) for row in rows]
            if len(rows) < batch:
                return
            after = rows[-1]["seq"]

    async def import_batch(
        self, namespace: str, stores: Sequence[StoreRecord], memories: Sequence[ImportedMemory]
    ) -> tuple[list[str], dict[str, int]]:
        """Create the stores that do not exist (one that does must have the same dimension), and add the
        entries, replacing one whose id exists with something else: all or nothing. An update time equal
        to the creation time is an entry never updated (as exports show it). The stores created
        (their indexes are requested), and how many entries were added, replaced and left unchanged."""
        created: list[str] = []
        async with self._connection(namespace) as conn:
            for index, record in enumerate(stores):
                made = await self._create_store(
                    conn, namespace, record.name, record.description, record.dimension, record.default_ttl
                )
                if made is not None:
                    created.append(record.name)
                    continue
                dimension, _ = await _store_settings(conn, namespace, record.name)
                if dimension != record.dimension:
                    raise FailedPrecondition(
                        f"stores[{index}]: store {record.name!r} exists with {dimension} dimensions, not"
                        f" {record.dimension}"
                    )
            settings = {}
            for index, imported in enumerate(memories):
                if imported.store not in settings:
                    settings[imported.store] = await _store_settings(conn, namespace, imported.store, "FOR SHARE")
                _check_dimension(
                    imported.memory.vector, settings[imported.store][0], imported.store, f"memories[{index}].vector"
                )
            counts = {"added": 0, "replaced": 0}
            if memories:
                cursor = await conn.execute(
                    f"WITH given AS (SELECT * FROM unnest(%s::text[], %s::text[], %s::text[], %s::jsonb[],"
                    " %s::text[], %s::text[], %s::text[], %s::vector[], %s::timestamptz[], %s::timestamptz[],"
                    " %s::timestamptz[]) AS g(id, store, content, metadata, user_id, agent_id, session_id,"
                    " embedding, create_time, update_time, expire_time))"
                    f" INSERT INTO {SCHEMA}.memories AS m (namespace, id, store, content, metadata, user_id,"
                    " agent_id, session_id, dimension, embedding, create_time, update_time, expire_time)"
                    " SELECT %s, id, store, content, metadata, user_id, agent_id, session_id,"
                    " vector_dims(embedding), embedding, coalesce(create_time, now()),"
                    " nullif(update_time, create_time), expire_time"
                    " FROM given ON CONFLICT (namespace, id) DO UPDATE SET store = excluded.store,"
                    " content = excluded.content, metadata = excluded.metadata, user_id = excluded.user_id,"
                    " agent_id = excluded.agent_id, session_id = excluded.session_id,"
                    " dimension = excluded.dimension, embedding = excluded.embedding,"
                    " create_time = excluded.create_time, update_time = excluded.update_time,"
                    " expire_time = excluded.expire_time, version = m.version + 1"
                    " WHERE (m.store, m.content, m.metadata, m.user_id, m.agent_id, m.session_id, m.embedding,"
                    " m.create_time, m.update_time, m.expire_time) IS DISTINCT FROM (excluded.store,"
                    " excluded.content, excluded.metadata, excluded.user_id, excluded.agent_id, excluded.session_id,"
                    " excluded.embedding, excluded.create_time, excluded.update_time, excluded.expire_time)"
                    " RETURNING (xmax = 0) AS added",
                    (
                        [m.memory.id for m in memories],
                        [m.store for m in memories],
                        [m.memory.content for m in memories],
                        [Jsonb(m.memory.metadata) for m in memories],
                        [m.memory.scope.user_id for m in memories],
                        [m.memory.scope.agent_id for m in memories],
                        [m.memory.scope.session_id for m in memories],
                        [np.asarray(m.memory.vector, dtype=np.float32) for m in memories],
                        [m.create_time for m in memories],
                        [m.update_time for m in memories],
                        [m.memory.expire_time for m in memories],
                        namespace,
                    ),
                )
                for row in await cursor.fetchall():
                    counts["added" if row["added"] else "replaced"] += 1
            counts["unchanged"] = len(memories) - counts["added"] - counts["replaced"]
        for record in stores:
            if record.name in created:
                self._new_dimension(record.dimension)
        return created, counts

    async def purge_expired(self, batch: int) -> int:
        """Delete up to `batch` entries that expired, in any namespace (the purge's own policy lets this
        connection see them, and nothing else): how many were deleted."""
        async with self._database.connection("") as conn:
            await conn.execute("SELECT set_config(%s, 'on', true)", (PURGE_SETTING,))
            cursor = await conn.execute(
                f"DELETE FROM {SCHEMA}.memories WHERE (namespace, id) IN (SELECT namespace, id"
                f" FROM {SCHEMA}.memories WHERE expire_time <= now() LIMIT %s) RETURNING 1",
                (batch,),
            )
            return len(await cursor.fetchall())

    # Remember's turns

    async def remember_turns(
        self, namespace: str, store: str, scope: Scope, turns: Sequence[str], memories: Sequence[NewMemory]
    ) -> list[MemoryRecord]:
        """Note the turns (their hashes) as remembered and add `memories`, in one transaction, so neither
        stands without the other; ABORTED when another call noted one of them first (its memories are that
        call's). The entries added."""
        async with self._connection(namespace) as conn:
            await _store_settings(conn, namespace, store, lock="FOR SHARE")
            cursor = await conn.execute(
                f"INSERT INTO {SCHEMA}.remembered_turns (namespace, store, turn, user_id, agent_id, session_id)"
                " SELECT %s, %s, turn, %s, %s, %s FROM unnest(%s::text[]) AS t(turn)"
                " ON CONFLICT DO NOTHING RETURNING turn",
                (namespace, store, scope.user_id, scope.agent_id, scope.session_id, list(turns)),
            )
            if len(await cursor.fetchall()) != len(turns):
                raise Aborted("CONCURRENT_REMEMBER", "another call is remembering these turns: retry to skip them")
            return await _add_memories(conn, namespace, store, memories) if memories else []

    async def remembered(self, namespace: str, store: str, turns: Sequence[str]) -> set[str]:
        """Which of `turns` (hashes) Remember has noted in `store`."""
        rows = await self._database.read(
            namespace,
            f"SELECT turn FROM {SCHEMA}.remembered_turns WHERE namespace = %s AND store = %s AND turn = ANY(%s)",
            (namespace, store, list(turns)),
        )
        return {row["turn"] for row in rows}


async def _add_memories(
    conn: Connection, namespace: str, store: str, memories: Sequence[NewMemory]
) -> list[MemoryRecord]:
    """`PostgresMemoryStore.add_memories` on `conn`, in its transaction."""
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
            memory.expire_time,
        )
        for memory in memories
    ]
    # FOR SHARE holds off a concurrent DeleteStore until the batch is in.
    dimension, ttl = await _store_settings(conn, namespace, store, lock="FOR SHARE")
    for index, memory in enumerate(memories):
        _check_dimension(memory.vector, dimension, store, f"memories[{index}].vector")
    async with conn.cursor() as insert:
        await insert.executemany(
            f"INSERT INTO {SCHEMA}.memories (namespace, id, store, content, metadata, user_id, agent_id,"
            " session_id, dimension, embedding, expire_time)"
            " VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, coalesce(%s, now() + %s))"
            " ON CONFLICT (namespace, id) DO NOTHING",
            [(*row, ttl) for row in rows],
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


def _known(rows: list[dict[str, Any]]) -> dict[str, int]:
    """The dimension of each store a search statement found (`_KNOWN_ONCE`: on one of its rows)."""
    return dict(_once(rows, "known"))


def _anchored(tree: Filter | None, params: dict[str, Any]) -> str:
    """` AND m.id IN (the holders of the filter's anchor)` (`filters.anchor`), its documents added to
    `params`; empty when the filter has no anchor."""
    documents = anchor(tree)
    if documents is None:
        return ""
    params["anchor"] = documents
    return f" AND m.id IN (SELECT {SCHEMA}.metadata_holders(%(anchor)s::jsonb[]))"


def _once(rows: list[dict[str, Any]], column: str) -> Any:
    """A value a statement returns on one of its rows only (the first it numbered, not always the first
    it sorted)."""
    return next(row[column] for row in rows if row[column] is not None)


async def _store_settings(conn: Connection, namespace: str, store: str, lock: str = "") -> tuple[int, timedelta | None]:
    """The store's dimension and default time-to-live; NOT_FOUND when it does not exist."""
    cursor = await conn.execute(
        f"SELECT dimension, default_ttl FROM {SCHEMA}.stores WHERE namespace = %s AND name = %s {lock}",
        (namespace, store),
    )
    row = await cursor.fetchone()
    if row is None:
        raise NotFound("store", store)
    return row["dimension"], row["default_ttl"]


def _check_dimension(vector: Sequence[float], dimension: int, store: str, field: str) -> None:
    if len(vector) != dimension:
        raise InvalidArgument.of(field, f"has {len(vector)} dimensions; store {store!r} has {dimension}")
