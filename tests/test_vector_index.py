"""Scoped searches are right whichever plan Postgres picks, and it picks the fast one.

Runs the store against a Postgres of its own with sequential scans disabled, so
every search goes through an index: a narrow scope (2% of the entries) through
the scope's btree index, searched exactly; a broad one (98%) through the HNSW
index with pgvector 0.8's iterative scans. Both are compared with exact search.
"""

from __future__ import annotations

import asyncio

import numpy as np
import psycopg
from contextfold_server.engine.memory import SearchQuery
from contextfold_server.memory.records import NewMemory, Scope
from contextfold_server.memory.statements import SEARCH_SETTINGS
from contextfold_server.memory.store import PostgresMemoryStore
from contextfold_server.postgres.migrations import migrate
from contextfold_server.postgres.pool import Database
from contextfold_server.postgres.vector_index import VectorIndexes, index_name

from harness.polling import wait_for
from harness.servers import Postgres

DIMENSION = 8
ENTRIES = 4000
NEEDLE_EVERY = 50  # one entry in 50 belongs to the scoped user: a 2% filter
OWN_INDEX = index_name("default", DIMENSION)


def exact_top(vectors: np.ndarray, query: np.ndarray, limit: int) -> list[int]:
    unit = vectors / np.linalg.norm(vectors, axis=1, keepdims=True)
    similarity = unit @ (query / np.linalg.norm(query))
    return [int(i) for i in np.argsort(-similarity)[:limit]]


def index_scans(url: str, *indexes: str) -> dict[str, int]:
    """How often each index was scanned. Backends report their counts when they end,
    a moment after the pool closes them, so wait until two readings agree."""
    readings: list[dict[str, int]] = []

    def settled() -> dict[str, int]:
        with psycopg.connect(url, autocommit=True) as conn:
            rows = conn.execute(
                "SELECT indexrelname, idx_scan FROM pg_stat_user_indexes WHERE indexrelname = ANY(%s)",
                (list(indexes),),
            ).fetchall()
        readings.append({name: count for name, count in rows})
        agreed = len(readings) > 1 and readings[-1] == readings[-2] and any(readings[-1].values())
        return readings[-1] if agreed else {}

    return wait_for(settled, 10, what="the index counts to settle", interval=0.2)


def test_scoped_searches_take_the_fast_index_and_match_exact_search(fresh_postgres: Postgres) -> None:
    rng = np.random.default_rng(7)
    vectors = rng.normal(size=(ENTRIES, DIMENSION)).astype(np.float32)
    needles = list(range(0, ENTRIES, NEEDLE_EVERY))
    queries = rng.normal(size=(20, DIMENSION)).astype(np.float32)

    async def run() -> tuple[dict[str, list[list[str]]], dict[str, int]]:
        await migrate(fresh_postgres.url)
        with psycopg.connect(fresh_postgres.url, autocommit=True) as conn:
            conn.execute("ALTER DATABASE postgres SET enable_seqscan = off")
        database = await Database.open(fresh_postgres.url, session_settings=SEARCH_SETTINGS)
        indexes = VectorIndexes(fresh_postgres.url)
        store = PostgresMemoryStore(database, indexes.grew)
        try:
            await store.create_store("default", "vectors", "", DIMENSION)
            # Built in the background, concurrently, while the entries go in.
            await store.add_memories(
                "default",
                "vectors",
                [
                    NewMemory(
                        content=f"entry {i}",
                        vector=vectors[i].tolist(),
                        id=f"e{i}",
                        scope=Scope(user_id="needle" if i in needles else "hay"),
                    )
                    for i in range(ENTRIES)
                ],
            )
            await indexes.built("default", DIMENSION)
            # As autovacuum would after a bulk load: the planner needs to know the table's size.
            with psycopg.connect(fresh_postgres.url, autocommit=True) as conn:
                conn.execute("ANALYZE contextfold.memories")
            found: dict[str, list[list[str]]] = {}
            for user in ("needle", "hay"):
                found[user] = []
                for q in queries:
                    query = SearchQuery("", tuple(q.tolist()), ("vectors",), 10, None, frozenset())
                    _, results = await store.search("default", Scope(user), query)
                    found[user].append([r.memory.id for r in results])
        finally:
            await indexes.close()
            await database.close()
        return found, index_scans(fresh_postgres.url, OWN_INDEX, "memories_by_user_id")

    found, scans = asyncio.run(run())

    assert scans["memories_by_user_id"] >= len(queries), "the narrow scope was searched exactly, from its index"
    assert scans[OWN_INDEX] >= len(queries), "the broad scope went through the HNSW index"
    hay = [i for i in range(ENTRIES) if i not in needles]
    for user, members, least in (("needle", needles, 1.0), ("hay", hay, 0.95)):
        recalls = []
        for query, ids in zip(queries, found[user], strict=True):
            assert len(ids) == 10, "the page is full"
            assert all(int(memory_id[1:]) in members for memory_id in ids)
            expected = {f"e{members[i]}" for i in exact_top(vectors[members], query, 10)}
            recalls.append(len(expected & set(ids)) / 10)
        assert np.mean(recalls) >= least, (user, recalls)


def test_an_entrys_vector_stays_in_its_row_beside_a_long_text(fresh_postgres: Postgres) -> None:
    """Every search reads the vector of each entry it weighs: one of 384 dimensions beside a text of 1,500
    characters (a row of about 3.5 kB) stays in the entry's row, not moved to the table's TOAST storage (one
    more lookup each); one of 1,536 dimensions, past what a row holds whole, is moved out as before."""
    rng = np.random.default_rng(11)
    text = " ".join(f"word{n}" for n in range(250))[:1500]

    async def run() -> dict[str, bool]:
        await migrate(fresh_postgres.url)
        database = await Database.open(fresh_postgres.url, session_settings=SEARCH_SETTINGS)
        store = PostgresMemoryStore(database)
        try:
            for dimension in (384, 1536):
                name = f"d{dimension}"
                await store.create_store("default", name, "", dimension)
                vector = rng.normal(size=dimension).tolist()
                await store.add_memories("default", name, [NewMemory(content=text, vector=vector, id=name)])
        finally:
            await database.close()
        with psycopg.connect(fresh_postgres.url, autocommit=True) as conn:
            rows = conn.execute(
                "SELECT id, pg_column_toast_chunk_id(embedding) IS NULL FROM contextfold.memories"
            ).fetchall()
        return dict(rows)

    assert asyncio.run(run()) == {"d384": True, "d1536": False}
