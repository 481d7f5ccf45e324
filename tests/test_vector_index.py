"""Scoped searches stay correct under the HNSW index (pgvector 0.8 iterative scans).

Runs the store against a Postgres of its own with sequential scans disabled,
so every search must go through the index, and compares with exact search.
"""

from __future__ import annotations

import asyncio

import numpy as np
import psycopg
import pytest
from contextfold_server.database import Database
from contextfold_server.memory.schema import migrate
from contextfold_server.memory.store import NewMemory, PostgresMemoryStore, Scope

from .servers import Postgres

DIMENSION = 8
ENTRIES = 4000
NEEDLE_EVERY = 50  # one entry in 50 belongs to the scoped user: a 2% filter


@pytest.fixture
def postgres(tmp_path):
    database = Postgres(tmp_path / "pgdata")
    yield database
    database.cleanup()


def exact_top(vectors: np.ndarray, query: np.ndarray, limit: int) -> list[int]:
    unit = vectors / np.linalg.norm(vectors, axis=1, keepdims=True)
    similarity = unit @ (query / np.linalg.norm(query))
    return [int(i) for i in np.argsort(-similarity)[:limit]]


async def index_scans(url: str, index: str) -> int:
    """How often `index` was scanned. Backends report their counts when they end,
    a moment after the pool closes them, so wait for the count to settle."""
    scans = 0
    for _ in range(50):
        with psycopg.connect(url, autocommit=True) as conn:
            (scans,) = conn.execute(
                "SELECT idx_scan FROM pg_stat_user_indexes WHERE indexrelname = %s", (index,)
            ).fetchone()
        if scans:
            return scans
        await asyncio.sleep(0.1)
    return scans


def test_scoped_search_through_the_index_matches_exact_search(postgres: Postgres) -> None:
    rng = np.random.default_rng(7)
    vectors = rng.normal(size=(ENTRIES, DIMENSION)).astype(np.float32)
    needles = list(range(0, ENTRIES, NEEDLE_EVERY))
    queries = rng.normal(size=(20, DIMENSION)).astype(np.float32)

    async def run() -> tuple[list[list[str]], int]:
        await migrate(postgres.url)
        with psycopg.connect(postgres.url, autocommit=True) as conn:
            conn.execute("ALTER DATABASE postgres SET enable_seqscan = off")
        database = await Database.open(postgres.url)
        store = PostgresMemoryStore(database)
        try:
            await store.create_store("default", "vectors", "", DIMENSION)
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
            # As autovacuum would after a bulk load: the planner needs to know the table's size.
            with psycopg.connect(postgres.url, autocommit=True) as conn:
                conn.execute("ANALYZE contextfold.memories")
            found = [
                [
                    r.memory.id
                    for r in await store.search("default", q.tolist(), ["vectors"], Scope(user_id="needle"), 10)
                ]
                for q in queries
            ]
        finally:
            await database.close()
        return found, await index_scans(postgres.url, f"memories_hnsw_{DIMENSION}")

    found, scans = asyncio.run(run())

    assert scans >= len(queries), "every search went through the HNSW index"
    recalls = []
    for query, ids in zip(queries, found, strict=True):
        assert len(ids) == 10, "iterative scans fill the page even though 98% of candidates are filtered out"
        assert all(int(memory_id[1:]) in needles for memory_id in ids)
        expected = {f"e{needles[i]}" for i in exact_top(vectors[needles], query, 10)}
        recalls.append(len(expected & set(ids)) / 10)
    assert np.mean(recalls) >= 0.95
