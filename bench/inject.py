"""`Inject` against its floor: latency and throughput at 10,000 and 100,000 entries, one table.

Starts its own Postgres (the embedded package's) and a real server, fills a store
with entries spread over 100 users (clustered unit vectors of the model's
dimension, supplied by the caller), then measures, in one run so ratios hold on
any machine:

- the floor: the query's embedding alone (the same model, in this process) and the
  SQL search alone (the server's own scoped query, straight to Postgres);
- `Inject` with a supplied query vector and with server-side embedding, for 1 and
  16 concurrent callers, and with two providers that each take 100 ms;
- bulk `AddMemories` with supplied vectors (the fill) and with server embedding;
- recall@5 of the indexed, scoped search against exact search.

    .venv/bin/python -m bench.inject                 # 10,000 and 100,000 entries (make bench)
    .venv/bin/python -m bench.inject --quick         # 10,000 entries, fewer calls (make bench-quick)
    .venv/bin/python -m bench.inject --sizes 1000000 # the long run

Results go to bench/results/inject.json and a plot to bench/results/inject.svg.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import psycopg
from contextfold import AsyncClient
from pgvector.psycopg import register_vector

from tests.servers import Postgres, provider_fixtures, start_server

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
DIMENSION = 384
USERS = 100
STORE = "bench"
PROVIDER_DELAY = 0.1


@dataclass
class Row:
    case: str
    entries: int
    callers: int
    calls: int
    p50_ms: float
    p95_ms: float
    p99_ms: float
    per_second: float


def percentile(samples: list[float], share: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, round(share * (len(ordered) - 1)))]


def row(case: str, entries: int, callers: int, samples: list[float], seconds: float) -> Row:
    return Row(
        case,
        entries,
        callers,
        len(samples),
        round(percentile(samples, 0.5) * 1000, 2),
        round(percentile(samples, 0.95) * 1000, 2),
        round(percentile(samples, 0.99) * 1000, 2),
        round(len(samples) / seconds, 1),
    )


class Vectors:
    """Clustered unit vectors: entries near one of 200 centres, queries near an entry."""

    def __init__(self, seed: int = 7) -> None:
        self.random = np.random.default_rng(seed)
        self.centres = self._unit(self.random.normal(size=(200, DIMENSION)))

    @staticmethod
    def _unit(vectors: np.ndarray) -> np.ndarray:
        return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)

    def entries(self, count: int) -> np.ndarray:
        centres = self.centres[self.random.integers(0, len(self.centres), count)]
        return self._unit(centres + 0.35 * self.random.normal(size=(count, DIMENSION)) / np.sqrt(DIMENSION) * 4)

    def queries(self, count: int) -> np.ndarray:
        return self.entries(count)


async def timed(call: Callable[[int], Awaitable[object]], callers: int, calls: int) -> tuple[list[float], float]:
    """Run `calls` calls from `callers` concurrent callers; each call's latency and the wall time."""
    samples: list[float] = []
    counter = iter(range(calls))

    async def caller() -> None:
        for n in counter:
            started = time.perf_counter()
            await call(n)
            samples.append(time.perf_counter() - started)

    started = time.perf_counter()
    await asyncio.gather(*(caller() for _ in range(callers)))
    return samples, time.perf_counter() - started


async def fill(cf: AsyncClient, vectors: Vectors, target: int, have: int) -> tuple[list[float], float]:
    """Add entries with supplied vectors until the store holds `target`; batch latencies and wall time."""
    batch = 500
    batches = (target - have) // batch

    async def add(n: int) -> None:
        chunk = vectors.entries(batch)
        start = have + n * batch
        await cf.add_memories(
            STORE,
            [
                {
                    "id": f"e{start + i}",
                    "content": f"Entry {start + i}: a fact about topic {(start + i) % 997}",
                    "user_id": f"user-{(start + i) % USERS}",
                    "vector": chunk[i].tolist(),
                }
                for i in range(batch)
            ],
        )

    return await timed(add, 4, batches)


def sql_search(conn: psycopg.Connection, vector: np.ndarray, user: str, exact: bool) -> list[str]:
    """The server's scoped nearest-neighbour query; `exact` turns the index off."""
    conn.execute("SET enable_indexscan = off" if exact else "SET enable_indexscan = on")
    rows = conn.execute(
        "SELECT id FROM contextfold.memories WHERE namespace = 'default' AND dimension = 384 AND store = ANY(%s)"
        " AND (%s = '' OR user_id = %s) ORDER BY (embedding::vector(384)) <=> %s LIMIT 5",
        ([STORE], user, user, vector.astype(np.float32)),
    ).fetchall()
    return [row[0] for row in rows]


def floor_rows(database_url: str, vectors: Vectors, entries: int, calls: int) -> tuple[list[Row], float]:
    """The embedding alone and the SQL search alone; recall@5 of indexed against exact."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from contextfold_server.embedding.local import LocalEmbedder

    model = LocalEmbedder()
    texts = [f"What does user {n} like to drink in the morning?" for n in range(calls + 5)]
    model._encode(texts[:5])
    embed = []
    for text in texts[5:]:
        started = time.perf_counter()
        model._encode([text])
        embed.append(time.perf_counter() - started)

    search, scoped, recalled = [], [], []
    with psycopg.connect(database_url, autocommit=True) as conn:
        register_vector(conn)
        conn.execute("SET hnsw.ef_search = 100; SET hnsw.iterative_scan = relaxed_order")
        queries = vectors.queries(calls)
        for n, vector in enumerate(queries):
            started = time.perf_counter()
            sql_search(conn, vector, "", exact=False)
            search.append(time.perf_counter() - started)
            user = f"user-{n % USERS}"
            started = time.perf_counter()
            found = sql_search(conn, vector, user, exact=False)
            scoped.append(time.perf_counter() - started)
            exact = sql_search(conn, vector, user, exact=True)
            recalled.append(len(set(found) & set(exact)) / max(1, len(exact)))
    rows = [
        row("floor: embedding alone", entries, 1, embed, sum(embed)),
        row("floor: SQL search alone", entries, 1, search, sum(search)),
        row("floor: SQL search alone, scoped", entries, 1, scoped, sum(scoped)),
    ]
    return rows, statistics.mean(recalled)


async def inject_rows(cf: AsyncClient, vectors: Vectors, entries: int, calls: int, providers: bool) -> list[Row]:
    rows: list[Row] = []
    queries = vectors.queries(calls)
    ask = [{"role": "user", "content": [{"text": "What should I know about this user?"}]}]

    def supplied(n: int) -> Awaitable[object]:
        return cf.inject(ask, stores=[STORE], query_vector=queries[n % len(queries)].tolist())

    def embedded(n: int) -> Awaitable[object]:
        # Every question differs: the embedding cache never answers for it.
        question = [{"role": "user", "content": [{"text": f"What does user {n} drink, call {time.time_ns()}?"}]}]
        return cf.inject(question, stores=[STORE])

    def scoped(n: int) -> Awaitable[object]:
        vector = queries[n % len(queries)].tolist()
        scope = {"user_id": f"user-{n % USERS}"}
        return cf.search_memories(stores=[STORE], query_vector=vector, max_results=5, scope=scope)

    for name, call in (
        ("Inject, supplied vector", supplied),
        ("Inject, server embedding", embedded),
        ("SearchMemories, scoped to 1 user of 100", scoped),
    ):
        await timed(call, 4, 20)  # warm
        for callers in (1, 16):
            samples, seconds = await timed(call, callers, calls * (4 if callers > 1 else 1))
            rows.append(row(name, entries, callers, samples, seconds))

    if providers:
        app_state = {"texts": {"a": "<a/>", "b": "<b/>"}, "delays": {"a": PROVIDER_DELAY, "b": PROVIDER_DELAY}}

        def fanned(n: int) -> Awaitable[object]:
            return cf.inject(
                ask,
                stores=[STORE],
                query_vector=queries[n % len(queries)].tolist(),
                providers=["a", "b"],
                app_state=app_state,
            )

        for callers in (1, 16):
            samples, seconds = await timed(fanned, callers, calls)
            rows.append(row("Inject + two 100 ms providers", entries, callers, samples, seconds))
    return rows


async def bulk_embedded(cf: AsyncClient, entries: int, count: int) -> Row:
    batch = 100

    async def add(n: int) -> None:
        await cf.add_memories(
            STORE,
            [
                {"content": f"Embedded fact {n}-{i}: the user mentioned plan {i * 31 + n}", "user_id": "bulk"}
                for i in range(batch)
            ],
        )

    samples, seconds = await timed(add, 2, count // batch)
    result = row("AddMemories, server embedding (100/batch)", entries, 2, samples, seconds)
    result.per_second = round(count / seconds, 1)
    return result


def table(rows: list[Row], recall: dict[int, float]) -> str:
    lines = [f"{'case':44} {'entries':>8} {'callers':>7} {'p50 ms':>8} {'p95 ms':>8} {'p99 ms':>8} {'per s':>8}"]
    for r in rows:
        lines.append(
            f"{r.case:44} {r.entries:>8} {r.callers:>7} {r.p50_ms:>8.2f} {r.p95_ms:>8.2f} {r.p99_ms:>8.2f}"
            f" {r.per_second:>8.1f}"
        )
    for entries, value in recall.items():
        lines.append(f"recall@5, scoped search (the planner's index) vs exact, {entries} entries: {value:.3f}")
    return "\n".join(lines)


def plot(rows: list[Row], path: Path) -> None:
    """A bar per case: p50 with its p99 whisker, on a log scale, so the floor and Inject sit side by side."""
    shown = [r for r in rows if r.callers == 1 or "AddMemories" in r.case]
    width, bar, left = 900, 22, 330
    height = 60 + len(shown) * (bar + 10)
    top = max(r.p99_ms for r in shown) * 1.2

    def x(ms: float) -> float:
        return left + (width - left - 20) * (np.log10(max(ms, 0.1)) + 1) / (np.log10(top) + 1)

    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" font-family="sans-serif"'
        ' font-size="12">',
        '<text x="10" y="20" font-size="14">p50 (bar) and p99 (line), ms, log scale; one caller</text>',
    ]
    for i, r in enumerate(shown):
        y = 40 + i * (bar + 10)
        label = f"{r.case} ({r.entries:,})"
        parts.append(f'<text x="10" y="{y + 15}">{label}</text>')
        parts.append(f'<rect x="{left}" y="{y}" width="{x(r.p50_ms) - left:.1f}" height="{bar}" fill="#4a7bd0"/>')
        parts.append(f'<line x1="{x(r.p99_ms):.1f}" x2="{x(r.p99_ms):.1f}" y1="{y}" y2="{y + bar}" stroke="#c33"/>')
        parts.append(f'<text x="{x(r.p99_ms) + 4:.1f}" y="{y + 15}">{r.p50_ms:g} / {r.p99_ms:g}</text>')
    parts.append("</svg>")
    path.write_text("\n".join(parts) + "\n")


async def measure(args: argparse.Namespace, server_address: str, database_url: str, port: int) -> dict:
    vectors = Vectors()
    rows: list[Row] = []
    recall: dict[int, float] = {}
    async with AsyncClient(server_address, timeout=120) as cf:
        await cf.create_store(STORE)
        for name in ("a", "b"):
            await cf.register_provider(name, f"127.0.0.1:{port}", timeout=2)
        have = 0
        for entries in args.sizes:
            samples, seconds = await fill(cf, vectors, entries, have)
            added = entries - have
            fill_row = row("AddMemories, supplied vectors (500/batch)", entries, 4, samples, seconds)
            fill_row.per_second = round(added / seconds, 1)
            have = entries
            with psycopg.connect(database_url, autocommit=True) as conn:
                conn.execute("ANALYZE contextfold.memories")
            floors, recall[entries] = floor_rows(database_url, vectors, entries, args.calls)
            rows += floors
            rows += await inject_rows(cf, vectors, entries, args.calls, providers=entries == args.sizes[0])
            rows.append(fill_row)
        rows.append(await bulk_embedded(cf, args.sizes[-1], args.embedded))
    return {"rows": [asdict(r) for r in rows], "recall_at_5": recall}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000], help="entries, in rising order")
    parser.add_argument("--calls", type=int, default=200, help="timed calls per case and caller count")
    parser.add_argument("--embedded", type=int, default=1000, help="entries added with server embedding")
    parser.add_argument("--quick", action="store_true", help="10,000 entries and fewer calls (make bench-quick)")
    parser.add_argument("--json", type=Path, default=RESULTS / "inject.json")
    args = parser.parse_args()
    if args.quick:
        args.sizes, args.calls, args.embedded = [10_000], 60, 300
        args.json = RESULTS / "inject-quick.json"

    RESULTS.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as scratch:
        database = Postgres(Path(scratch) / "pgdata")
        server = start_server(Path(scratch) / "server.log", "--database-url", database.url)
        try:
            with provider_fixtures() as ports:
                started = time.perf_counter()
                results = asyncio.run(measure(args, server.address, database.url, ports["scripted"]))
        finally:
            server.stop()
            database.cleanup()

    rows = [Row(**r) for r in results["rows"]]
    recall = {int(k): v for k, v in results["recall_at_5"].items()}
    machine = f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}"
    print(f"contextfold Inject benchmark on {machine}")
    print(table(rows, recall))
    print(f"(took {time.perf_counter() - started:.0f} s)")
    args.json.write_text(
        json.dumps(
            {"machine": {"cpus": os.cpu_count(), "arch": platform.machine(), "python": platform.python_version()}}
            | results,
            indent=2,
        )
        + "\n"
    )
    plot(rows, args.json.with_suffix(".svg"))


if __name__ == "__main__":
    main()
