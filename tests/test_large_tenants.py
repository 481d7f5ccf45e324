"""A tenant's volume never slows another's searches: a namespace whose entries of one dimension pass
the size gets a vector index of its own, built in the background; a smaller one is searched exactly,
its own entries only; the index every namespace shared (earlier releases) goes at start-up."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import psycopg
import pytest
from contextfold import Client
from contextfold_server.memory.records import UNSCOPED
from contextfold_server.memory.statements import INDEX_FIRST, SEARCH_SETTINGS, entries_where, search_statement
from contextfold_server.postgres.vector_index import index_name
from pgvector.psycopg import register_vector

from harness.polling import wait_for
from harness.servers import Postgres, ServerProcess, start_server

from .test_tenancy import keys, works

SIZE = 300
DIMENSION = 16


def vectors(count: int, seed: int) -> np.ndarray:
    found = np.random.default_rng(seed).normal(size=(count, DIMENSION)).astype(np.float32)
    return found / np.linalg.norm(found, axis=1, keepdims=True)


def vector_indexes(url: str) -> dict[str, str]:
    """Each valid HNSW index on the entries, with its predicate."""
    with psycopg.connect(url, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT c.relname, pg_get_expr(i.indpred, i.indrelid) FROM pg_index i"
            " JOIN pg_class c ON c.oid = i.indexrelid JOIN pg_am a ON a.oid = c.relam"
            " WHERE a.amname = 'hnsw' AND i.indisvalid"
        ).fetchall()
    return dict(rows)


def add(cf: Client, store: str, found: np.ndarray, prefix: str, first: int = 0) -> None:
    """The entries `<prefix><n>`, numbered from `first`."""
    for start in range(first, first + len(found), 100):
        cf.add_memories(
            store,
            [
                {"id": f"{prefix}{start + n}", "content": f"{prefix} {start + n}", "vector": v.tolist()}
                for n, v in enumerate(found[start - first : start - first + 100])
            ],
        )


def plan(url: str, namespace: str, query: np.ndarray) -> str:
    """How Postgres runs a similarity search of the namespace's store: the statement the server sends, with
    its parameters, with sorting discouraged as a filtered search's is (`INDEX_FIRST`)."""
    where, params = entries_where(UNSCOPED, None)
    params |= {"namespace": namespace, "names": ["vectors"], "vector": query, "exclude": [], "limit": 5}
    params |= {"live_at": datetime.now(UTC), "max_distance": None}
    with psycopg.connect(url) as conn:
        register_vector(conn)
        for name, value in {**INDEX_FIRST, **dict(_settings(SEARCH_SETTINGS))}.items():
            conn.execute(f"SET LOCAL {name} = {value}")
        rows = conn.execute("EXPLAIN " + search_statement(DIMENSION, where), params).fetchall()
    return "\n".join(row[0] for row in rows)


def _settings(statements: str) -> list[tuple[str, str]]:
    return [tuple(part.strip().removeprefix("SET ").split(" = ")) for part in statements.split(";") if part.strip()]


def nearest(found: np.ndarray, query: np.ndarray, prefix: str, limit: int = 5) -> list[str]:
    return [f"{prefix}{i}" for i in np.argsort(-(found @ query))[:limit]]


@pytest.fixture(scope="module")
def own_index_server(postgres: Postgres, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    process = start_server(
        tmp_path_factory.mktemp("large") / "server.log",
        "--database-url", postgres.url, "--auth", "keys", "--own-index-entries", str(SIZE),
    )  # fmt: skip
    yield process
    assert process.stop() == 0, process.log()


def admin(postgres: Postgres, server: ServerProcess, namespace: str) -> Client:
    key = keys(postgres.url, "create", "--namespace", namespace, "--role", "admin")["key"]
    cf = Client(server.address, api_key=key)
    wait_for(lambda: works(cf), 10, what="the key to work")
    cf.create_store("vectors", dimension=DIMENSION)
    return cf


def test_a_namespace_past_the_size_gets_its_own_index_and_a_small_one_is_searched_exactly(
    postgres: Postgres, own_index_server: ServerProcess
) -> None:
    server = own_index_server
    large_entries, small_entries = vectors(SIZE + 100, 1), vectors(120, 2)
    queries = vectors(10, 3)
    with admin(postgres, server, "large-tenant") as large, admin(postgres, server, "small-tenant") as small:
        add(small, "vectors", small_entries, "s")
        add(large, "vectors", large_entries[: SIZE - 50], "l")
        own = index_name("large-tenant", DIMENSION)
        assert own not in vector_indexes(postgres.url), "under the size: no index of its own yet"

        add(large, "vectors", large_entries[SIZE - 50 :], "l", first=SIZE - 50)
        indexes = wait_for(lambda: own in vector_indexes(postgres.url) and vector_indexes(postgres.url), 60,
                           what="the large namespace's own index")  # fmt: skip
        assert "'large-tenant'" in indexes[own] and f"dimension = {DIMENSION}" in indexes[own]
        assert index_name("small-tenant", DIMENSION) not in indexes, "the small namespace has no index"
        assert f"memories_hnsw_{DIMENSION}" not in indexes, "no index every namespace shares"

        # The statement a search sends, planned as a filtered search is (index first): the large namespace's
        # walks its own index, the small one's cannot walk any.
        assert f"Index Scan using {own} on memories" in plan(postgres.url, "large-tenant", queries[0])
        assert "hnsw" not in plan(postgres.url, "small-tenant", queries[0])
        for query in queries:
            found = large.search_memories(stores=["vectors"], query_vector=query.tolist(), ranking="similarity")
            expected = nearest(large_entries, query, "l")
            assert len({m.memory.id for m in found} & set(expected)) >= 4
            found = small.search_memories(stores=["vectors"], query_vector=query.tolist(), ranking="similarity")
            assert [m.memory.id for m in found] == nearest(small_entries, query, "s"), "exact: its own entries"


def test_start_up_builds_the_missing_index_and_drops_the_shared_one(postgres: Postgres, tmp_path: Path) -> None:
    common = ("--database-url", postgres.url, "--auth", "keys")
    # A server whose size no namespace reaches: the entries go in without an index of their own.
    first = start_server(tmp_path / "first.log", *common, "--own-index-entries", "1000000")
    try:
        with admin(postgres, first, "grown-tenant") as cf:
            add(cf, "vectors", vectors(SIZE + 20, 4), "g")
    finally:
        assert first.stop() == 0, first.log()
    shared = f"memories_hnsw_{DIMENSION}"
    with psycopg.connect(postgres.url, autocommit=True) as conn:
        # As earlier releases built it: one index for every namespace's entries of the dimension.
        conn.execute(
            f"CREATE INDEX {shared} ON contextfold.memories USING hnsw ((embedding::vector({DIMENSION}))"
            f" vector_cosine_ops) WHERE dimension = {DIMENSION}"
        )
    own = index_name("grown-tenant", DIMENSION)
    assert own not in vector_indexes(postgres.url)

    second = start_server(tmp_path / "second.log", *common, "--own-index-entries", str(SIZE))
    try:
        indexes = wait_for(
            lambda: (found := vector_indexes(postgres.url)) and own in found and shared not in found and found,
            60, what="the missing index built and the shared one dropped",
        )  # fmt: skip
        assert "'grown-tenant'" in indexes[own]
    finally:
        assert second.stop() == 0, second.log()
