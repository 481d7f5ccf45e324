"""A large neighbour: a small tenant's searches while another tenant grows to 100,000 entries.

Two tenants on one server (keys). The small tenant keeps 2,000 entries (embedded by the
server's model, bench/corpus.py) in one store, half of them tagged `{"topic": "work"}`, and
searches them with supplied query vectors: plain, filtered by the tag, scoped to one of its
users, and with the question's words beside its vector (the default weighs them: each word's
holders looked up in the words' index). Its p50 is measured alone, then again once the large
tenant has filled a store of the same dimension with `--entries` entries (blends of the same
base: the same manifold, no duplicates; each with the texts of the two entries it blends, as
bench/corpus.py writes them, so the large tenant holds every word the small one does, a hundred
times over at 100,000). The large tenant's own plain search is measured beside it. Target: the
small tenant's p50 with the neighbour <= 1.2 x without it, for each kind of search.

    .venv/bin/python -m bench.large_tenant                  # (make bench)
    .venv/bin/python -m bench.large_tenant --entries 20000
"""

from __future__ import annotations

import json
import tempfile
import time
from pathlib import Path

import numpy as np
import psycopg
from contextfold import Client

from bench import corpus, sized_run
from bench.fanout import percentile
from bench.tenants import keys
from harness.servers import Postgres, start_server

TARGET_RATIO = 1.2
SMALL = 2_000
USERS = 20
BATCH = 1_000
WARM = 50  # searches of each kind before the timed ones


def small_entries(texts: list[str], vectors: np.ndarray) -> list[dict]:
    return [
        {
            "content": text,
            "vector": vector.tolist(),
            "metadata": {"topic": "work" if n % 2 else "home"},
            "user_id": f"user-{n % USERS}",
        }
        for n, (text, vector) in enumerate(zip(texts, vectors, strict=True))
    ]


KINDS = {
    "plain": {},
    "filtered (topic = work)": {"filter": {"topic": "work"}},
    "one user's entries": {"scope": {"user_id": "user-3"}},
    "with the question's words": {},
}
# The kinds that send the question's text beside its vector.
WORDED = ("with the question's words",)


def searches(
    cf: Client,
    store: str,
    questions: list[str],
    queries: np.ndarray,
    calls: int,
    kinds: tuple[str, ...] = tuple(KINDS),
) -> dict[str, float]:
    """p50 (ms) of each kind of search, `calls` of each, over the queries (`questions`, embedded) in turn."""
    figures = {}
    for kind in kinds:
        options = KINDS[kind]
        samples = []
        for n in range(calls + WARM):
            text = questions[n % len(queries)] if kind in WORDED else ""
            started = time.perf_counter()
            found = cf.search_memories(text, stores=[store], query_vector=queries[n % len(queries)].tolist(), **options)
            if n >= WARM:
                samples.append(time.perf_counter() - started)
            assert found, f"{kind}: no results"
        figures[kind] = percentile(samples, 0.5) * 1000
    return figures


def settled(url: str) -> None:
    """Once no autovacuum runs (up to two minutes): a search timed beside one measures the vacuum."""
    with psycopg.connect(url, autocommit=True) as conn:
        for _ in range(240):
            running = conn.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'autovacuum worker'"
            ).fetchone()
            if not running or not running[0]:
                return
            time.sleep(0.5)


def fill(cf: Client, store: str, contents: list[str], vectors: np.ndarray) -> float:
    """The large tenant's entries, in batches; the wall time."""
    started = time.perf_counter()
    for start in range(0, len(vectors), BATCH):
        cf.add_memories(
            store,
            [
                {"content": content, "vector": v.tolist()}
                for content, v in zip(contents[start : start + BATCH], vectors[start : start + BATCH], strict=True)
            ],
        )
    return time.perf_counter() - started


def main() -> None:
    args = sized_run(__doc__.split("\n\n")[0], 200, "large_tenant")
    if args.entries == 10_000 and not args.quick:
        args.entries = 100_000
    texts, vectors = corpus.entries(SMALL, SMALL)
    questions = corpus.questions(200)
    queries = corpus.embed(questions, "questions")
    first, second, blends = corpus.blends(vectors, args.entries, np.random.default_rng(9))
    contents = corpus.blended_texts(texts, first, second)
    with tempfile.TemporaryDirectory() as scratch:
        database = Postgres(Path(scratch) / "pgdata")
        server = start_server(
            Path(scratch) / "server.log", "--database-url", database.url, "--auth", "keys", workers=args.workers
        )
        try:
            small_key, large_key = keys(database.url, "small"), keys(database.url, "large")
            with (
                Client(server.address, api_key=small_key, timeout=120) as small,
                Client(server.address, api_key=large_key, timeout=600) as large,
            ):
                small.create_store("notes")
                for start in range(0, SMALL, BATCH):
                    small.add_memories(
                        "notes", small_entries(texts[start : start + BATCH], vectors[start : start + BATCH])
                    )
                large.create_store("archive")
                large.add_memories("archive", [{"content": contents[0], "vector": blends[0].tolist()}])
                settled(database.url)
                alone = searches(small, "notes", questions, queries, args.calls)
                seconds = fill(large, "archive", contents[1:], blends[1:])
                print(f"the large tenant added {args.entries:,} entries in {seconds:.0f} s")
                settled(database.url)
                beside = searches(small, "notes", questions, queries, args.calls)
                own = searches(large, "archive", questions, queries, args.calls, ("plain",))
        finally:
            server.stop()
            database.cleanup()

    print(f"the small tenant's search ({SMALL:,} entries) beside a tenant of {args.entries:,} (p50, ms)")
    print(f"{'search':28} {'alone':>8} {'beside':>8} {'ratio':>7}")
    results = []
    missed = []
    for kind in alone:
        ratio = beside[kind] / alone[kind]
        print(f"{kind:28} {alone[kind]:>8.2f} {beside[kind]:>8.2f} {ratio:>7.2f}")
        results.append({"search": kind, "alone_ms": alone[kind], "beside_ms": beside[kind], "ratio": ratio})
        if ratio > TARGET_RATIO:
            missed.append(kind)
    print(f"the large tenant's own plain search: p50 {own['plain']:.2f} ms")
    print(
        f"target: the small tenant's p50 <= {TARGET_RATIO:g} x alone:"
        f" {'met' if not missed else 'MISSED by ' + '; '.join(missed)}"
    )
    args.json.write_text(json.dumps({"entries": args.entries, "small": results, "large_plain_ms": own}, indent=2))


if __name__ == "__main__":
    main()
