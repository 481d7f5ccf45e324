"""Noisy neighbours: one tenant's `Inject` while another floods the same server, each way a key allows.

Two tenants on one server (keys, the default shares). The bystander asks `Inject` (server
embedding, a store of 200 entries) call after call, alone and then while the flooding tenant
keeps, one at a time, from processes of their own: idle import streams past its share of
every worker; adds of 64 texts to embed, from four callers; the heaviest legal filter (any of
five membership tests of 100 values and 59 ranges, over entries with 15 KB of metadata), from
eight callers; bulk adds of 500 entries with vectors, from four callers. Every bystander
question is new (its query is embedded, never cached). Each case prints the bystander's p50 and p99, its
failed calls and the slowest health check, against the targets: p99 <= 2 x its p99 alone, no
call failing, health <= 50 ms.

    .venv/bin/python -m bench.tenants            # (make bench)
    .venv/bin/python -m bench.tenants --calls 60
"""

from __future__ import annotations

import contextlib
import itertools
import json
import multiprocessing
import os
import random
import tempfile
import time
from collections.abc import Callable, Iterator
from multiprocessing.synchronize import Event
from pathlib import Path

import grpc
from contextfold import Client, ContextfoldError
from contextfold.v1 import memory_pb2, memory_pb2_grpc

from bench import sized_run
from bench.fanout import percentile
from harness.messages import user
from harness.servers import ROOT, SERVE, Postgres, health_status, start_server

TARGET_RATIO = 2.0
TARGET_HEALTH_MS = 50.0
# Each question asked once in the whole run: every Inject embeds its query (none is a cached one).
QUESTIONS = itertools.count()


def keys(database_url: str, namespace: str) -> str:
    import subprocess

    done = subprocess.run(
        [*SERVE[:-1], "keys", "--database-url", database_url, "create", "--namespace", namespace, "--role", "admin"],
        cwd=ROOT, capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    return json.loads(done.stdout)["key"]


HEAVY_FILTER = {
    "any": [{"blob": {"in": [f"v{k}-{i}" for i in range(100)]}} for k in range(5)]
    + [{f"k{k}": {"gte": k}} for k in range(59)]
}


def idle_streams(address: str, key: str, stop: Event) -> None:
    channel = grpc.insecure_channel(address)
    stub = memory_pb2_grpc.MemoryServiceStub(channel)

    def nothing() -> Iterator[memory_pb2.ImportMemoriesRequest]:
        stop.wait()
        return
        yield

    metadata = (("authorization", f"Bearer {key}"),)
    calls = [stub.ImportMemories.future(nothing(), metadata=metadata) for _ in range(300)]
    stop.wait()
    for call in calls:
        call.cancel()
    channel.close()


def embedding_adds(address: str, key: str, stop: Event) -> None:
    with Client(address, api_key=key, timeout=120) as cf:
        n = 0
        while not stop.is_set():
            with contextlib.suppress(ContextfoldError):
                cf.add_memories("texts", [f"Flood text {os.getpid()} {n} {i}" for i in range(64)])
            n += 1


def heavy_filters(address: str, key: str, stop: Event) -> None:
    with Client(address, api_key=key, timeout=120) as cf:
        while not stop.is_set():
            with contextlib.suppress(ContextfoldError):
                list(cf.list_memories("heavy", filter=HEAVY_FILTER, page_size=10))


def bulk_adds(address: str, key: str, stop: Event) -> None:
    local = random.Random(os.getpid())
    with Client(address, api_key=key, timeout=120) as cf:
        while not stop.is_set():
            batch = [{"content": "bulk", "vector": [local.random() for _ in range(64)]} for _ in range(500)]
            with contextlib.suppress(ContextfoldError):
                cf.add_memories("bulk", batch)


@contextlib.contextmanager
def flooding(work: Callable[[str, str, Event], None], processes: int, address: str, key: str) -> Iterator[None]:
    """`work` in `processes` processes of their own (so the bystander's client shares no interpreter
    with the flood) until the block ends."""
    spawn = multiprocessing.get_context("spawn")
    stop = spawn.Event()
    running = [spawn.Process(target=work, args=(address, key, stop), daemon=True) for _ in range(processes)]
    for process in running:
        process.start()
    time.sleep(2.0)  # the flood under way before the bystander is timed
    try:
        yield
    finally:
        stop.set()
        for process in running:
            process.join(60)


def bystander_calls(address: str, key: str, calls: int) -> tuple[list[float], int, float]:
    """The bystander's Inject latencies, its failed calls, and the slowest health check between them."""
    samples: list[float] = []
    failed = 0
    slowest_health = 0.0
    with Client(address, api_key=key, timeout=30) as cf:
        for _ in range(calls):
            started = time.perf_counter()
            try:
                cf.inject([user(f"What does the user think about topic {next(QUESTIONS)}?")], stores=["notes"])
                samples.append(time.perf_counter() - started)
            except ContextfoldError:
                failed += 1
            checked = time.perf_counter()
            health_status(address, timeout=10)
            slowest_health = max(slowest_health, time.perf_counter() - checked)
    return samples, failed, slowest_health


def main() -> None:
    args = sized_run(__doc__.split("\n\n")[0], 200, "tenants")
    rng = random.Random(5)
    rows = []
    with tempfile.TemporaryDirectory() as scratch:
        database = Postgres(Path(scratch) / "pgdata")
        server = start_server(
            Path(scratch) / "server.log", "--database-url", database.url, "--auth", "keys", workers=args.workers
        )
        try:
            flooder, bystander = keys(database.url, "flooding"), keys(database.url, "bystander")
            with Client(server.address, api_key=bystander, timeout=60) as cf:
                cf.create_store("notes")
                cf.add_memories("notes", [f"The user's view of topic {n} is opinion {n * 7 % 13}" for n in range(200)])
            with Client(server.address, api_key=flooder, timeout=120) as cf:
                cf.create_store("bulk", dimension=64)
                cf.create_store("heavy", dimension=8)
                for batch in range(10):
                    blob = "".join(rng.choices("abcdefghijklmnopqrstuvwxyz0123456789", k=15_000))
                    cf.add_memories(
                        "heavy",
                        [
                            {"content": f"h {batch}-{n}", "vector": [1.0] * 8, "metadata": {"blob": blob[n:]}}
                            for n in range(50)
                        ],
                    )
                cf.create_store("texts")

            bystander_calls(server.address, bystander, 20)  # warm
            alone = bystander_calls(server.address, bystander, args.calls)
            rows.append(("alone", alone))
            for name, work, processes in (
                ("idle import streams, 600 of them", idle_streams, 2),
                ("adds of 64 texts to embed, 4 callers", embedding_adds, 4),
                ("the heaviest legal filter, 8 callers", heavy_filters, 8),
                ("bulk adds of 500 with vectors, 4 callers", bulk_adds, 4),
            ):
                with flooding(work, processes, server.address, flooder):
                    rows.append((name, bystander_calls(server.address, bystander, args.calls)))
        finally:
            server.stop()
            database.cleanup()

    alone_p99 = percentile(rows[0][1][0], 0.99)
    print(f"another tenant's Inject while one tenant floods ({args.workers} workers; ms)")
    print(f"{'flood':44} {'calls':>6} {'failed':>7} {'p50':>7} {'p99':>7} {'x alone':>8} {'health max':>11}")
    results = []
    for name, (samples, failed, health) in rows:
        p50, p99 = percentile(samples, 0.5), percentile(samples, 0.99)
        ratio = p99 / alone_p99
        print(
            f"{name:44} {len(samples):>6} {failed:>7} {p50 * 1000:>7.1f} {p99 * 1000:>7.1f} {ratio:>8.2f}"
            f" {health * 1000:>11.1f}"
        )
        results.append(
            {"flood": name, "failed": failed, "p50_ms": p50 * 1000, "p99_ms": p99 * 1000, "ratio": ratio,
             "health_max_ms": health * 1000}
        )  # fmt: skip
    missed = [
        r["flood"]
        for r in results[1:]
        if r["ratio"] > TARGET_RATIO or r["failed"] or r["health_max_ms"] > TARGET_HEALTH_MS
    ]
    print(
        f"targets: p99 <= {TARGET_RATIO:g} x alone, no call failing, health <= {TARGET_HEALTH_MS:g} ms:"
        f" {'met' if not missed else 'MISSED by ' + '; '.join(missed)}"
    )
    args.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
