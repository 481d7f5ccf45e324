"""Filtered search and updates: latency, throughput and recall, one table.

Starts its own Postgres and a real server (a worker per core, as `make run`), fills
one store with entries of the benchmark's corpus (bench/corpus.py; vectors supplied)
whose metadata carries a `topic` (one of ten: each a tenth of the entries), a
`rating` (1 to 5) and, on one entry in a hundred, `rare: true`. Then, in one run so
the ratios hold on any machine:

- SearchMemories (supplied vector, similarity, 10 results) without a filter, and with
  filters that keep a tenth (`topic`), a tenth again in another form (`rating >= 4`
  and `topic` in three), a hundredth (`rare`) and a thousandth (`very rare`), for 1 and
  16 callers; each filtered search's recall@10 against the exact nearest matching entries
  (computed here, in numpy, from the same vectors and metadata); and store-aware across
  the store and a small one beside it (500 entries), without a filter and with one;
- UpdateMemory of metadata only, and of content (embedded again by the server), for 1
  and 16 callers; beside them AddMemories of one entry with a supplied vector, the write
  every update is compared with.

    .venv/bin/python -m bench.lifecycle            # 10,000 entries (make bench)
    .venv/bin/python -m bench.lifecycle --quick    # 2,000 entries, fewer calls

Results go to bench/results/lifecycle.json.
"""

from __future__ import annotations

import asyncio
import json
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np
import psycopg
from contextfold import AsyncClient

from bench import corpus, sized_run
from bench.inject import Row, row, separate_connections, timed
from harness.servers import Postgres, start_server

STORE = "lifecycle"
# 500 entries beside the large store, for the store-aware rows.
SMALL_STORE = "lifecycle-small"
TOPICS = [f"topic-{n}" for n in range(10)]
FILTERS: dict[str, dict[str, Any]] = {
    "topic = one of ten (10 %)": {"topic": "topic-3"},
    "rating >= 4 and topic in three (12 %)": {"rating": {"gte": 4}, "topic": {"in": TOPICS[:3]}},
    "rare (1 %)": {"rare": True},
    "very rare (0.1 %)": {"very_rare": True},
}


def metadata(n: int) -> dict[str, Any]:
    marks = {"rare": True} if n % 100 == 7 else {}
    if n % 1000 == 7:
        marks["very_rare"] = True
    return {"topic": TOPICS[n % 10], "rating": 1 + (n // 10) % 5, **marks}


def matches(tree: dict[str, Any], n: int) -> bool:
    """The benchmark's filters, evaluated here: the exact answer recall is measured against."""
    held = metadata(n)
    for key, wanted in tree.items():
        if isinstance(wanted, dict):
            if "gte" in wanted and not held.get(key, 0) >= wanted["gte"]:
                return False
            if "in" in wanted and held.get(key) not in wanted["in"]:
                return False
        elif held.get(key) != wanted:
            return False
    return True


async def fill(cf: AsyncClient, texts: list[str], vectors: np.ndarray) -> None:
    batch = 500

    async def add(n: int) -> None:
        await cf.add_memories(
            STORE,
            [
                {"id": f"e{i}", "content": texts[i], "metadata": metadata(i), "vector": vectors[i].tolist()}
                for i in range(n * batch, min(len(texts), (n + 1) * batch))
            ],
        )

    await timed(add, 4, -(-len(texts) // batch))


async def measure(address: str, database_url: str, entries: int, calls: int) -> dict[str, Any]:
    texts, vectors = corpus.entries(entries, min(entries, 2_000))
    queries = corpus.embed(corpus.questions(200), "questions")
    clients = separate_connections(address, 16)
    cf = clients[0]
    await cf.create_store(STORE)
    await fill(cf, texts, vectors)
    await cf.create_store(SMALL_STORE)
    await cf.add_memories(
        SMALL_STORE,
        [{"content": texts[i], "metadata": metadata(i), "vector": vectors[i].tolist()} for i in range(500)],
    )
    # As autovacuum would soon after a fill: the planner weighs the indexes with fresh statistics.
    async with await psycopg.AsyncConnection.connect(database_url, autocommit=True) as conn:
        await conn.execute("VACUUM ANALYZE contextfold.memories")
    rows: list[Row] = []
    recalls: dict[str, float] = {}

    def searching(tree: dict[str, Any] | None, ranking: str = "similarity") -> Callable[[int], Awaitable[object]]:
        stores = [STORE] if ranking == "similarity" else [STORE, SMALL_STORE]

        def search(n: int) -> Awaitable[object]:
            client = clients[n % len(clients)]
            vector = queries[n % len(queries)].tolist()
            return client.search_memories(
                query_vector=vector, stores=stores, max_results=10, ranking=ranking, filter=tree
            )

        return search

    cases = [(name, tree, "similarity") for name, tree in {"no filter": None, **FILTERS}.items()]
    cases += [
        (f"{name}, store-aware beside a small store", tree, "store_aware")
        for name, tree in (("no filter", None), ("topic = one of ten (10 %)", FILTERS["topic = one of ten (10 %)"]))
    ]
    for name, tree, ranking in cases:
        await timed(searching(tree, ranking), 4, 20)
        for callers in (1, 16):
            samples, seconds = await timed(searching(tree, ranking), callers, calls * (4 if callers > 1 else 1))
            rows.append(row(f"search, {name}", entries, callers, samples, seconds))
        if tree is not None and ranking == "similarity":
            allowed = np.asarray([matches(tree, n) for n in range(entries)])
            found_share = []
            for n in range(min(calls, 100)):
                query = queries[n % len(queries)]
                scores = np.where(allowed, vectors @ query, -np.inf)
                exact = {f"e{i}" for i in np.argsort(-scores)[:10]}
                results = await searching(tree)(n)
                found = {result.memory.id for result in results}  # type: ignore[attr-defined]
                found_share.append(len(found & exact) / len(exact))
            recalls[name] = round(statistics.mean(found_share), 4)

    async def add_one(n: int) -> None:
        await clients[n % len(clients)].add_memories(
            STORE, [{"id": f"added-{n}", "content": texts[n % entries], "vector": vectors[n % entries].tolist()}]
        )

    async def update_metadata(n: int) -> None:
        await clients[n % len(clients)].update_memory(f"e{(n * 7919) % entries}", metadata={"checked": n})

    async def update_content(n: int) -> None:
        await clients[n % len(clients)].update_memory(
            f"e{(n * 104729) % entries}", content=f"{texts[n % entries]} (corrected {n})"
        )

    offset = 0
    for name, call in (
        ("AddMemories, one entry, vector supplied", add_one),
        ("UpdateMemory, metadata", update_metadata),
        ("UpdateMemory, content (embedded again)", update_content),
    ):
        for callers in (1, 16):
            count = calls * (4 if callers > 1 else 1)

            def shifted(n: int, call: Callable[[int], Awaitable[None]] = call, offset: int = offset) -> Awaitable[None]:
                return call(n + offset)

            samples, seconds = await timed(shifted, callers, count)
            offset += count
            rows.append(row(name, entries, callers, samples, seconds))
    for client in clients:
        await client.close()
    return {"rows": [asdict(r) for r in rows], "recall_at_10": recalls}


def table(rows: list[Row], recalls: dict[str, float]) -> str:
    lines = [
        "| case | callers | p50 ms | p95 ms | calls/s | recall@10 |",
        "| --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in rows:
        name = r.case.removeprefix("search, ")
        recall = f"{recalls[name]:.3f}" if r.case.startswith("search, ") and name in recalls else ""
        lines.append(f"| {r.case} | {r.callers} | {r.p50_ms} | {r.p95_ms} | {r.per_second} | {recall} |")
    return "\n".join(lines)


def main() -> None:
    args = sized_run(__doc__.split("\n\n")[0], 200, "lifecycle")
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as scratch:
        database = Postgres(Path(scratch) / "pgdata")
        server = start_server(Path(scratch) / "server.log", "--database-url", database.url, workers=args.workers)
        try:
            results = asyncio.run(measure(server.address, database.url, args.entries, args.calls))
        finally:
            server.stop()
            database.cleanup()
    rows = [Row(**r) for r in results["rows"]]
    print(f"contextfold lifecycle benchmark: {args.entries:,} entries, the server with {args.workers} workers")
    print(table(rows, results["recall_at_10"]))
    print(f"(took {time.perf_counter() - started:.0f} s)")
    args.json.write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
