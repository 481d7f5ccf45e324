"""Searches per second on the primary alone, and with one streaming read replica beside it.

Starts its own primary Postgres, fills one store (the benchmark's corpus, vectors supplied),
makes a streaming standby of it (`pg_basebackup -R`, the bundled binaries), then runs the same
SearchMemories (supplied vector, 10 results) for 1 and 16 callers against a server on the
primary alone and one given the replica too (`--database-read-url`), each a worker per core,
alternately, twice, so the ratio holds on a noisy machine. Each row says which databases
answered (from the responses). Both databases share this machine's cores, as the server does:
the figure says what a replica costs or gains here, not on a replica of its own hardware.

    .venv/bin/python -m bench.replicas            # 10,000 entries (make bench)
    .venv/bin/python -m bench.replicas --quick    # 2,000 entries, fewer calls

Results go to bench/results/replicas.json.
"""

from __future__ import annotations

import asyncio
import collections
import json
import tempfile
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

import grpc
from contextfold import AsyncClient
from contextfold.v1 import memory_pb2, memory_pb2_grpc

from bench import corpus, sized_run
from bench.inject import Row, row, timed
from harness.polling import wait_for
from harness.servers import Postgres, start_server

STORE = "replicas"


async def fill(address: str, entries: int) -> None:
    texts, vectors = corpus.entries(entries, min(entries, 2_000))
    async with AsyncClient(address, timeout=120) as cf:
        await cf.create_store(STORE)

        async def add(n: int) -> None:
            batch = range(n * 500, min(entries, (n + 1) * 500))
            await cf.add_memories(
                STORE, [{"id": f"e{i}", "content": texts[i], "vector": vectors[i].tolist()} for i in batch]
            )

        await timed(add, 4, -(-entries // 500))


async def measure(address: str, setup: str, entries: int, calls: int) -> list[tuple[Row, dict[str, int]]]:
    queries = corpus.embed(corpus.questions(200), "questions")
    # Separate connections, as separate agents: the kernel spreads connections over the workers.
    options = [("grpc.use_local_subchannel_pool", 1)]
    channels = [grpc.aio.insecure_channel(address, options=options) for _ in range(16)]
    stubs = [memory_pb2_grpc.MemoryServiceStub(channel) for channel in channels]
    answered: collections.Counter[str] = collections.Counter()

    async def search(n: int) -> None:
        request = memory_pb2.SearchMemoriesRequest(
            query_vector=queries[n % len(queries)].tolist(),
            stores=[STORE],
            max_results=10,
            ranking=memory_pb2.RANKING_SIMILARITY,
        )
        response = await stubs[n % len(stubs)].SearchMemories(request, timeout=60)
        answered[response.database] += 1

    await timed(search, 4, 40)  # warm the pools and caches
    results = []
    for callers in (1, 16):
        answered.clear()
        samples, seconds = await timed(search, callers, calls * (4 if callers > 1 else 1))
        results.append((row(f"SearchMemories, {setup}", entries, callers, samples, seconds), dict(answered)))
    for channel in channels:
        await channel.close()
    return results


def main() -> None:
    args = sized_run(__doc__.split("\n\n")[0], 300, "replicas")
    started = time.perf_counter()
    measured: list[tuple[Row, dict[str, int]]] = []
    with tempfile.TemporaryDirectory() as scratch:
        root = Path(scratch)
        primary = Postgres(root / "primary")
        standby: Postgres | None = None
        try:
            filling = start_server(root / "fill.log", "--database-url", primary.url, workers=args.workers)
            try:
                asyncio.run(fill(filling.address, args.entries))
            finally:
                filling.stop()
            primary.query("VACUUM ANALYZE contextfold.memories")
            standby = replica = primary.standby(root / "standby")
            replayed = primary.query("SELECT pg_current_wal_lsn()::text")[0][0]
            wait_for(
                lambda: replica.query("SELECT pg_last_wal_replay_lsn() >= %s::pg_lsn", (replayed,))[0][0],
                60,
                what="the standby to replay the fill",
            )
            setups: dict[str, tuple[str, ...]] = {
                "primary alone": (),
                "primary + 1 replica": ("--database-read-url", replica.url),
            }
            for _ in range(2):
                for setup, extra in setups.items():
                    server = start_server(
                        root / f"{setup}.log", "--database-url", primary.url, *extra, workers=args.workers
                    )
                    try:
                        measured += asyncio.run(measure(server.address, setup, args.entries, args.calls))
                    finally:
                        server.stop()
        finally:
            if standby is not None:
                standby.cleanup()
            primary.cleanup()
    print(f"contextfold read replicas benchmark: {args.entries:,} entries, the server with {args.workers} workers")
    print(table(measured))
    print(f"(took {time.perf_counter() - started:.0f} s)")
    results: dict[str, Any] = {"rows": [{**asdict(r), "answered_by": answered} for r, answered in measured]}
    args.json.write_text(json.dumps(results, indent=2) + "\n")


def table(measured: list[tuple[Row, dict[str, int]]]) -> str:
    lines = [
        "| case | callers | p50 ms | p95 ms | searches/s | answered by |",
        "| --- | ---: | ---: | ---: | ---: | --- |",
    ]
    for r, answered in measured:
        by = ", ".join(f"{name} {count}" for name, count in sorted(answered.items()))
        lines.append(f"| {r.case} | {r.callers} | {r.p50_ms} | {r.p95_ms} | {r.per_second} | {by} |")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
