"""Stores and entries in Postgres, searched with pgvector: creating, reading, searching and deleting them.

Every statement names the caller's namespace, and runs on a connection acting for it (row-level
security): no call reads or changes another namespace's rows. The statements are `statements.py`'s;
updates, versions, erasure, export and import, expiry and Remember's ledger are `lifecycle.py`'s.
"""

from __future__ import annotations

import secrets
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
from psycopg import sql

from ..access.quotas import DEFAULT_QUOTA, Quota, over_quota
from ..engine.filters import Filter
from ..engine.memory import SearchQuery
from ..errors import Aborted, AlreadyExists, FailedPrecondition, InvalidArgument, NotFound, ResourceExhausted
from ..postgres.pool import Connection, Database, NamespaceConnection, Params, Query, Read
from ..postgres.replicas import Databases
from ..postgres.schema import SCHEMA
from .records import (
    UNSCOPED,
    Candidate,
    MemoryRecord,
    Neighbours,
    NewMemory,
    Scope,
    ScoredRecord,
    StoreRecord,
    etag_of,
)
from .statements import (
    GENERIC_PLAN,
    INDEX_FIRST,
    MEMORY_COLUMNS,
    SENTENCES_PLAN,
    SENTENCES_READ_MOST,
    STORE_COLUMNS,
    anchored,
    candidates_statement,
    compared,
    entries_where,
    entry_params,
    insert_entries,
    known_stores,
    memory_from_row,
    neighbours_statement,
    once,
    search_statement,
    sentences_statement,
    stored_as_given,
    unknown_share,
    whole_statement,
    words_statement,
)

# Stores of a namespace use at most this many vector dimensions: each has an index of its own, which
# every tenant's writes keep up and which takes a while to build.
MAX_DIMENSIONS_PER_NAMESPACE = 8
# How long a scope a search found no sentences to read in (none, or more than `SENTENCES_READ_MOST`) is searched
# without reading them: its entries' sentences come a moment after their write (memory/sentences.py), and this
# delays them that much more at most. And how many such scopes a worker keeps (emptied when full).
SENTENCELESS_SECONDS = 5.0
SENTENCELESS_KEPT = 4096
# A search's scope as the searches kept without sentences are: its namespace, dimension, stores named and fields.
ScopeKey = tuple[str, int, tuple[str, ...], tuple[tuple[str, str], ...]]


class PostgresMemoryStore:
    def __init__(
        self,
        database: Database | Databases,
        grew: Callable[[str, int, int], None] = lambda namespace, dimension, entries: None,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
        etag_key: bytes = b"",
        quotas: Callable[[str], Quota] = lambda namespace: DEFAULT_QUOTA,
    ) -> None:
        self._database = database
        # Told after each write that adds entries: the namespace, their dimension and the entries the
        # namespace holds, so a namespace past the size gets its own vector index (`VectorIndexes.grew`).
        self.grew = grew
        # What time it is for expiry: an entry is gone from every read the moment this passes its expiry.
        self._clock = clock
        # What entries' etags are keyed with (`records.etag_of`): the service's, so every replica agrees.
        self._etag_key = etag_key or secrets.token_bytes(32)
        # Each namespace's quota (`access/quotas.py`), checked in the transaction that would pass it.
        self.quota = quotas
        # The scopes a search found no sentences to read in (`candidates`), and when (the monotonic clock).
        self._sentenceless: dict[ScopeKey, float] = {}

    def connection(self, namespace: str) -> NamespaceConnection:
        """A connection acting for `namespace`, in one transaction (`Database.connection`)."""
        return self._database.connection(namespace)

    async def read(
        self, namespace: str, query: Query, params: Params, settings: Mapping[str, str] | None = None
    ) -> list[dict[str, Any]]:
        """One read acting for `namespace` (`Database.read`)."""
        return await self._database.read(namespace, query, params, settings)

    async def read_all(
        self, namespace: str, reads: Sequence[Read], apart: Sequence[int] = ()
    ) -> list[list[dict[str, Any]]]:
        """Several reads acting for `namespace`, in one round trip, or split at the places `apart` names over
        connections side by side while they are spare (`Database.read_all`)."""
        return await self._database.read_all(namespace, reads, apart)

    def now(self) -> datetime:
        """What time it is for expiry: an entry is gone from every read the moment this passes its expiry."""
        return self._clock()

    def record(self, row: dict[str, Any]) -> MemoryRecord:
        """An entry as a statement read it (`statements.MEMORY_COLUMNS`), with its etag."""
        return memory_from_row(row, self._etag_key)

    # Stores

    async def create_store(
        self, namespace: str, name: str, description: str, dimension: int, default_ttl: timedelta | None = None
    ) -> StoreRecord:
        """A new store. A namespace's stores use at most `MAX_DIMENSIONS_PER_NAMESPACE` dimensions (once
        large, an index each)."""
        async with self.connection(namespace) as conn:
            record = await self.create_store_on(conn, namespace, name, description, dimension, default_ttl)
            if record is None:
                raise AlreadyExists("store", name)
        return record

    async def create_store_on(
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
            f"SELECT array_agg(DISTINCT dimension) AS dimensions, count(*) AS stores FROM {SCHEMA}.stores"
            " WHERE namespace = %s",
            (namespace,),
        )
        held = await cursor.fetchone() or {}
        used = set(held.get("dimensions") or ())
        allowed = self.quota(namespace).stores
        if allowed is not None and held.get("stores", 0) >= allowed:
            raise over_quota("stores", namespace, held["stores"], 1, allowed, "stores")
        if dimension not in used and len(used) >= MAX_DIMENSIONS_PER_NAMESPACE:
            raise ResourceExhausted(
                "DIMENSIONS_PER_NAMESPACE",
                f"store.dimension: this namespace's stores already use {len(used)} dimensions"
                f" ({', '.join(map(str, sorted(used)))}); the limit is {MAX_DIMENSIONS_PER_NAMESPACE}",
            )
        cursor = await conn.execute(
            f"INSERT INTO {SCHEMA}.stores (namespace, name, description, dimension, default_ttl)"
            f" VALUES (%s, %s, %s, %s, %s) ON CONFLICT DO NOTHING RETURNING {STORE_COLUMNS}",
            (namespace, name, description, dimension, default_ttl),
        )
        row = await cursor.fetchone()
        return None if row is None else StoreRecord(**row)

    async def list_stores(self, namespace: str, after: str, limit: int, scope: Scope = UNSCOPED) -> list[StoreRecord]:
        """A page of stores, each with its count of entries within `scope` (a scope-bound key counts
        its own user's entries, not everyone's) that have not expired."""
        where, params = entries_where(scope, None)
        rows = await self.read(
            namespace,
            sql.SQL(
                "SELECT {columns}, (SELECT count(*) FROM {memories} m WHERE m.namespace = s.namespace"
                " AND m.store = s.name{where}) AS memory_count FROM {stores} s"
                " WHERE s.namespace = %(namespace)s AND s.name > %(after)s ORDER BY s.name LIMIT %(limit)s"
            ).format(
                columns=sql.SQL(", ").join(sql.Identifier("s", c) for c in STORE_COLUMNS.split(", ")),
                memories=sql.Identifier(SCHEMA, "memories"),
                stores=sql.Identifier(SCHEMA, "stores"),
                where=sql.SQL(where),
            ),
            {"namespace": namespace, "after": after, "limit": limit, "live_at": self.now(), **params},
        )
        return [StoreRecord(**row) for row in rows]

    async def get_stores(self, namespace: str, names: Sequence[str]) -> dict[str, StoreRecord]:
        """The named stores that exist; every store of the namespace when `names` is empty."""
        rows = await self.read(
            namespace,
            f"SELECT {STORE_COLUMNS} FROM {SCHEMA}.stores"
            " WHERE namespace = %s AND (cardinality(%s::text[]) = 0 OR name = ANY(%s::text[])) ORDER BY name",
            (namespace, list(names), list(names)),
        )
        return {row["name"]: StoreRecord(**row) for row in rows}

    async def delete_store(self, namespace: str, name: str, force: bool) -> int:
        async with self.connection(namespace) as conn:
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
        async with self.connection(namespace) as conn:
            return await add_memories_on(conn, namespace, store, memories, self)

    def _searching(self, namespace: str, scope: Scope, query: SearchQuery) -> tuple[str, dict[str, Any]]:
        """The conditions of a search's entries (`entries_where`), and the parameters every search takes."""
        where, params = entries_where(scope, query.filter)
        return where, params | {
            "namespace": namespace,
            "names": list(query.stores),
            "vector": np.asarray(query.vector, dtype=np.float32),
            "exclude": sorted(query.exclude_ids),
            "live_at": self.now(),
        }

    async def search(
        self, namespace: str, scope: Scope, query: SearchQuery
    ) -> tuple[dict[str, int], list[ScoredRecord]]:
        """In one round trip: the dimension of each store asked for that exists (every store of the
        namespace when `query.stores` is empty), and the `query.limit` entries nearest to
        `query.vector` across those of its dimension that match `query.filter`, most similar first,
        none below `query.min_score`."""
        where, params = self._searching(namespace, scope, query)
        params |= {
            "limit": query.limit,
            "max_distance": None if query.min_score is None else 1.0 - query.min_score,
        }
        statement = search_statement(len(query.vector), where)
        rows = await self.read(namespace, statement, params, INDEX_FIRST if query.filter else None)
        if query.filter is not None and once(rows, "candidate_count") < query.limit:
            # Fewer matches than asked for: there are no more, or the vector index's scan gave up first
            # (pgvector stops after `hnsw.max_scan_tuples`) on a filter few entries pass. Weighed exactly.
            exact = search_statement(len(query.vector), where + anchored(query.filter, params), exact=True)
            rows = await self.read(namespace, exact, params)
        results = [
            ScoredRecord(self.record(row), 1.0 - float(row["distance"])) for row in rows if row["id"] is not None
        ]
        return known_stores(rows), results

    async def candidates(
        self,
        namespace: str,
        scope: Scope,
        query: SearchQuery,
        per_store: int,
        pool: int,
        lexical: int = 0,
        words: str = "word_matches",
        names: Sequence[str] = (),
        parts: Sequence[Sequence[float]] = (),
        seeds: int = 0,
        by_sentence: int = 0,
    ) -> tuple[dict[str, int], list[Candidate], float, Neighbours, int | None]:
        """In one round trip: the dimension of each store asked for that exists (as `search`), and among
        the stores of `query.vector`'s dimension, the `per_store` entries nearest to it in each store
        where it matters (`nearest_per_store`, with a first pass of `pool` across them; each store's
        own when `query.filter` is set), and with `lexical`, up to that many entries sharing the words of
        `query.text`, as `words` (the SQL function) weighs them (an entry may be among both); and the
        share of `names` no entry of the scope holds (read with the words, `words_statement`; 0 without
        words, or when the scope is larger than their sample, which cannot tell). `query.min_score` is
        not applied: a store's crowd counts every entry. With `parts` (the vectors of a question's parts,
        `Asked.parts`), each part's nearest as well, read as the question's are (`Candidate.part`). With
        `seeds`, the neighbours (as `neighbours` reads them) of the `seeds` nearest and of every word
        match, read ahead in the same statements (`Neighbours`). With `by_sentence`, that many entries whose
        best sentence is nearest (`sentences_statement`, their neighbours read ahead too with `seeds`), each with
        its best sentence's similarity (`Candidate.sentence`). Last, how many entries the scope holds, up to
        `NAMES_SAMPLE` (read with `word_matches`' words; None without them)."""
        where, params = self._searching(namespace, scope, query)
        params |= {
            "per_store": per_store,
            "pool": max(per_store, pool),
            "scope": [scope.user_id, scope.agent_id, scope.session_id],
        }
        dimension, filtered = len(query.vector), query.filter is not None
        # One store named needs no pass across stores: a statement of its own, planned for its values.
        each_store, settings = filtered or len(query.stores) == 1, INDEX_FIRST if filtered else None
        nearest = candidates_statement(dimension, where, each_store, beside=seeds > 0, filtered=filtered)
        reads = [Read(nearest, params | {"seeds": seeds}, settings)]
        sentenceless: ScopeKey = (namespace, dimension, tuple(sorted(query.stores)), tuple(scope.fields().items()))
        sentences_read = bool(by_sentence) and not self._without_sentences(sentenceless)
        if sentences_read:
            # Beside the nearest, on their connection: the two together take about as long as the words alone.
            sentences = sentences_statement(dimension, where, tuple(scope.fields()), filtered)
            wanted = {"by_sentence": by_sentence, "sentences_most": SENTENCES_READ_MOST}
            reads.append(Read(sentences, params | wanted, SENTENCES_PLAN))
        if parts:
            part_read = candidates_statement(dimension, where, each_store)
            reads += [Read(part_read, params | {"vector": np.asarray(v, dtype=np.float32)}, settings) for v in parts]
        # The words are weighed among the scope's entries, whatever the filter; so are the names.
        ahead = seeds > 0 and words == "word_matches"
        if lexical:
            matching = words_statement(dimension, words, where, beside=ahead, filtered=filtered)
            # Planned once per connection (0.4 ms of each question): what depends on the values is read by functions
            # planned for each call's. A filter's conditions are the statement's own, planned for their values.
            planned = GENERIC_PLAN if words == "word_matches" and not filtered else None
            asked = {"words": query.text, "lexical": lexical, "named": list(names)}
            reads.append(Read(matching, params | asked, planned))
        # The nearest, the sentences and the words are read side by side while connections are spare: Postgres plans
        # and runs each in its own process, and the call waits for the longest rather than for all. With two, the
        # nearest and the sentences go together beside the words (which take about as long as the two); with three,
        # each on its own (LoCoMo: 1.8 ms off the search's 9, docs/performance.md).
        rows, *read = await self.read_all(namespace, reads, apart=(2, 1) if sentences_read else (1,))
        sentence_rows = read.pop(0) if sentences_read else []
        if sentences_read and not 0 < once(sentence_rows, "held") <= SENTENCES_READ_MOST:
            self._found_without_sentences(sentenceless)
        by_part, matched = read[: len(parts)], read[len(parts) :]
        neighbours = Neighbours()
        record = self._records()
        if seeds:
            rows = self._read_ahead(rows, neighbours, record)
        if matched and ahead:
            matched[0] = self._read_ahead(matched[0], neighbours, record)
        if sentence_rows:
            sentence_rows = self._read_ahead(sentence_rows, neighbours, record)
        unknown = unknown_share(matched[0]) if names and matched else 0.0
        entries = int(once(matched[0], "sampled")) if matched and words == "word_matches" else None
        searched = sum(1 for stored in known_stores(rows).values() if stored == dimension)
        if filtered and sum(1 for row in rows if row["id"] is not None) < per_store * searched:
            # A store gave fewer matches than asked for: as in `search`, weighed exactly.
            narrowed = where + anchored(query.filter, params)
            rows = await self.read(namespace, candidates_statement(dimension, narrowed, filtered, exact=True), params)
        found = [Candidate(record(row), 1.0 - float(row["distance"])) for row in rows if row["id"] is not None]
        for number, part_rows in enumerate(by_part, start=1):
            found += [
                Candidate(record(row), 1.0 - float(row["distance"]), part=number)
                for row in part_rows
                if row["id"] is not None
            ]
        for row in matched[0] if matched else ():
            if row["id"] is not None:
                found.append(Candidate(record(row), 1.0 - float(row["distance"]), row["lexical"]))
        found += [
            Candidate(record(row), 1.0 - float(row["distance"]), sentence=1.0 - float(row["sentence_distance"]))
            for row in sentence_rows
            if row["id"] is not None
        ]
        return known_stores(rows), found, unknown, neighbours, entries

    def _records(self) -> Callable[[dict[str, Any]], MemoryRecord]:
        """`record`, made once for each entry (its id, row and version) of the rows of one search's reads, which
        find the same entries again: a LoCoMo question's 145 rows hold about half as many."""
        made: dict[tuple[str, int, int], MemoryRecord] = {}

        def record(row: dict[str, Any]) -> MemoryRecord:
            key = (row["id"], row["seq"], row["version"])
            found = made.get(key)
            if found is None:
                found = made[key] = self.record(row)
            return found

        return record

    def _without_sentences(self, key: ScopeKey) -> bool:
        """Whether a search of this scope (its namespace, dimension, stores and scope) found no sentences to read
        within `SENTENCELESS_SECONDS` (none written yet, or more than a search reads): its searches then skip the
        read, 0.8 ms of each at 10,000 entries that have none."""
        found = self._sentenceless.get(key)
        return found is not None and time.monotonic() - found < SENTENCELESS_SECONDS

    def _found_without_sentences(self, key: ScopeKey) -> None:
        if len(self._sentenceless) >= SENTENCELESS_KEPT:
            self._sentenceless.clear()
        self._sentenceless[key] = time.monotonic()

    def _read_ahead(
        self, rows: list[dict[str, Any]], neighbours: Neighbours, record: Callable[[dict[str, Any]], MemoryRecord]
    ) -> list[dict[str, Any]]:
        """A statement's rows but the neighbours it read ahead (`beside`), which go to `neighbours` with the
        ids whose neighbours it looked for (`seeded`)."""
        kept = []
        for row in rows:
            if row["beside"] is not None:
                neighbours.pairs.append((row["beside"], Candidate(record(row), 1.0 - float(row["distance"]))))
            else:
                kept.append(row)
                if row["id"] is not None and row["seeded"]:
                    neighbours.covered.add(row["id"])
        return kept

    async def neighbours(
        self, namespace: str, scope: Scope, query: SearchQuery, ids: Sequence[str]
    ) -> tuple[list[Candidate], dict[str, set[str]]]:
        """In one round trip: the entries written just before and just after each of `ids` in its store and
        session, or its author's order (`statements.neighbours_statement`), that the search `query` could find
        (within `scope`, matching its filter, live, none it excludes), each with its similarity to its vector;
        and which entries are beside which (both ways)."""
        where, params = self._searching(namespace, scope, query)
        rows = await self.read(namespace, neighbours_statement(where), params | {"ids": list(ids)}, GENERIC_PLAN)
        read = Neighbours([(row["beside"], Candidate(self.record(row), 1.0 - float(row["distance"]))) for row in rows])
        return read.of(ids)

    async def get_memory(self, namespace: str, memory_id: str, scope: Scope = UNSCOPED) -> MemoryRecord:
        """The entry, if it exists within `scope` and has not expired: otherwise, it does not."""
        where, params = entries_where(scope, None)
        rows = await self.read(
            namespace,
            f"SELECT {MEMORY_COLUMNS} FROM {SCHEMA}.memories m"
            f" WHERE m.namespace = %(namespace)s AND m.id = %(id)s{where}",
            {"namespace": namespace, "id": memory_id, "live_at": self.now(), **params},
        )
        if not rows:
            raise NotFound("memory", memory_id)
        return self.record(rows[0])

    async def whole(
        self, namespace: str, scope: Scope, query: SearchQuery, ids: Sequence[str]
    ) -> dict[str, MemoryRecord]:
        """The entries `ids` whole, by id, that the search `query` could still find (within `scope`, matching its
        filter, live): a ranking reads of its candidates' content only what it weighs (`statements.whole_statement`)."""
        where, params = entries_where(scope, query.filter)
        params |= {"namespace": namespace, "ids": list(ids), "live_at": self.now()}
        return {row["id"]: self.record(row) for row in await self.read(namespace, whole_statement(where), params)}

    async def held_within(self, namespace: str, ids: Sequence[str], scope: Scope) -> set[str]:
        """Which of `ids` live entries within `scope` hold."""
        where, params = entries_where(scope, None)
        rows = await self.read(
            namespace,
            f"SELECT m.id FROM {SCHEMA}.memories m WHERE m.namespace = %(namespace)s AND m.id = ANY(%(ids)s){where}",
            {"namespace": namespace, "ids": list(ids), "live_at": self.now(), **params},
        )
        return {row["id"] for row in rows}

    async def list_memories(
        self, namespace: str, store: str, scope: Scope, after_seq: int, limit: int, tree: Filter | None = None
    ) -> list[MemoryRecord]:
        """A page of the store's entries within `scope` that match `tree`, oldest first, after `after_seq`."""
        where, params = entries_where(scope, tree)
        if not await self.get_stores(namespace, [store]):
            raise NotFound("store", store)
        rows = await self.read(
            namespace,
            f"SELECT {MEMORY_COLUMNS} FROM {SCHEMA}.memories m WHERE m.namespace = %(namespace)s"
            f" AND m.store = %(store)s AND m.seq > %(after)s{where} ORDER BY m.seq LIMIT %(limit)s",
            {"namespace": namespace, "store": store, "after": after_seq, "limit": limit, "live_at": self.now()}
            | params,
        )
        return [self.record(row) for row in rows]

    async def delete_memories(
        self, namespace: str, ids: Sequence[str], allow_missing: bool, scope: Scope = UNSCOPED, etag: str = ""
    ) -> int:
        """Delete the entries by id, within `scope` (outside it, or expired, they do not exist). With `etag`
        (one id), only the version it names: ABORTED, and nothing deleted, when the entry changed since."""
        where, params = entries_where(scope, None)
        async with self.connection(namespace) as conn:
            cursor = await conn.execute(
                f"DELETE FROM {SCHEMA}.memories m WHERE m.namespace = %(namespace)s AND m.id = ANY(%(ids)s)"
                f"{where} RETURNING m.id, m.seq, m.version",
                {"namespace": namespace, "ids": list(ids), "live_at": self.now(), **params},
            )
            rows = await cursor.fetchall()
            for row in rows if etag else ():
                if etag_of(self._etag_key, row["id"], row["seq"], row["version"]) != etag:
                    # Raising rolls the transaction back: the version the caller read is not deleted, nor any.
                    raise Aborted(
                        "ETAG_MISMATCH", f"memory {row['id']!r} changed since it was read: read it again and retry"
                    )
            deleted = {row["id"] for row in rows}
            missing = [memory_id for memory_id in ids if memory_id not in deleted]
            if missing and not allow_missing:
                # Raising rolls the transaction back: a failed delete deletes nothing.
                raise NotFound("memory", missing[0], f"memories do not exist: {', '.join(map(repr, missing))}")
            return len(deleted)


async def add_memories_on(
    conn: Connection, namespace: str, store: str, memories: Sequence[NewMemory], rows: PostgresMemoryStore
) -> list[MemoryRecord]:
    """`PostgresMemoryStore.add_memories` on `conn`, in its transaction (Remember's too). An entry that
    expired (and awaits the purge) never holds its id against a new one: it goes first."""
    ids = [memory.id or str(uuid.uuid4()) for memory in memories]
    # FOR SHARE holds off a concurrent DeleteStore until the batch is in.
    dimension, ttl = await store_settings(conn, namespace, store, lock="FOR SHARE")
    for index, memory in enumerate(memories):
        check_dimension(memory.vector, dimension, store, f"memories[{index}].vector")
    await delete_expired(conn, namespace, ids, rows.now())
    params = entry_params(
        namespace, [(memory_id, store, memory) for memory_id, memory in zip(ids, memories, strict=True)], ttl
    )
    cursor = await conn.execute(insert_entries("DO NOTHING", "1"), params)
    held = await check_usage(conn, namespace, rows.quota(namespace), len(await cursor.fetchall()))
    rows.grew(namespace, dimension, held)
    cursor = await conn.execute(stored_as_given(), compared(params))
    stored = {row["id"]: row for row in await cursor.fetchall()}
    for index, (row_id, memory) in enumerate(zip(ids, memories, strict=True)):
        if not stored[row_id]["same"]:
            raise AlreadyExists("memory", row_id, f"memories[{index}].id: {_clash(stored[row_id], store, memory)}")
    return [rows.record(stored[row_id]) for row_id in ids]


def _clash(row: dict[str, Any], store: str, memory: NewMemory) -> str:
    """Why the entry `row` (an id's holder) is not what an add to `store` gave under its id: another store
    holds the id (ids are unique across a namespace's stores), or what differs."""
    if row["store"] != store:
        return (
            f"memory {row['id']!r} is held by store {row['store']!r}: an id is unique across the namespace's"
            f" stores (add to {row['store']!r}, or give this entry another id)"
        )
    given = {"content": memory.content, **vars(memory.scope)}
    differing = [name for name, value in given.items() if row[name] != value] or ["metadata"]
    return f"memory {row['id']!r} already exists in store {store!r} with a different {', '.join(differing)}"


async def check_usage(conn: Connection, namespace: str, quota: Quota, adding: int) -> int:
    """After a write, in its transaction: refuse it (rolled back, nothing stored) when the namespace now
    holds more entries, or bytes, than its quota allows. `adding`: the entries the write added. Returns
    the entries the namespace holds."""
    cursor = await conn.execute(
        f"SELECT coalesce(sum(entries), 0) AS entries, coalesce(sum(bytes), 0) AS bytes FROM {SCHEMA}.tenant_usage"
        " WHERE namespace = %s",
        (namespace,),
    )
    held = await cursor.fetchone() or {"entries": 0, "bytes": 0}
    if quota.entries is not None and held["entries"] > quota.entries:
        raise over_quota("entries", namespace, int(held["entries"]) - adding, adding, quota.entries, "entries")
    if quota.stored_bytes is not None and held["bytes"] > quota.stored_bytes:
        raise over_quota("stored_bytes", namespace, int(held["bytes"]), None, quota.stored_bytes, "stored bytes")
    return int(held["entries"])


async def delete_expired(conn: Connection, namespace: str, ids: Sequence[str], live_at: datetime) -> None:
    """Delete the entries under `ids` that expired by `live_at`: no read returns them any more, and a
    write under their ids must find them gone, not absorb it or be refused by them."""
    await conn.execute(
        f"DELETE FROM {SCHEMA}.memories WHERE namespace = %s AND id = ANY(%s) AND expire_time <= %s",
        (namespace, list(ids), live_at),
    )


async def store_settings(conn: Connection, namespace: str, store: str, lock: str = "") -> tuple[int, timedelta | None]:
    """The store's dimension and default time-to-live; NOT_FOUND when it does not exist."""
    cursor = await conn.execute(
        f"SELECT dimension, default_ttl FROM {SCHEMA}.stores WHERE namespace = %s AND name = %s {lock}",
        (namespace, store),
    )
    row = await cursor.fetchone()
    if row is None:
        raise NotFound("store", store)
    return row["dimension"], row["default_ttl"]


def check_dimension(vector: Sequence[float], dimension: int, store: str, field: str) -> None:
    if len(vector) != dimension:
        raise InvalidArgument.of(field, f"has {len(vector)} dimensions; store {store!r} has {dimension}")
