"""`Inject` against its floor: latency and throughput at 10,000 and 100,000 entries, one table.

Starts its own Postgres (the embedded package's) and a real server, fills a store
with entries spread over 100 users (sentences embedded by the server's model, see
bench/corpus.py; their vectors supplied by the caller), then measures, in one run
so ratios hold on any machine:

- the floor, the work no `Inject` can avoid, done alone: the query's embedding (the
  server's ONNX model, loaded in this process with the threads a worker gives it, which
  are all the cores here; and 64 texts at a time), the SQL search (the server's nearest-neighbour
  query, straight to Postgres; 1 and 16 connections), the cheapest gRPC call
  (GetMemory), and Postgres taking entries by COPY with and without the vector index;
- `Inject` with a supplied query vector and with server-side embedding, for 1 and
  16 concurrent callers (each on a connection of its own, as separate agents are, so
  the server's workers share them), against the server as `make run` starts it (a
  worker per core), and once against one worker; and with two providers that each
  take 100 ms; with one caller, each `Inject` takes turns with its floor (the SQL
  search alone, the embedding alone), so a noisy machine's drift touches both alike;
- a peer: mem0's in-process `Memory.search` on the same entries, in the same Postgres,
  with the same model on PyTorch (bench/mem0.py; not with --quick);
- the server's CPU per `Inject` (every process of it, from /proc, over 800 calls with supplied
  vectors), beside a bare `grpc.aio` echo server's per call for a request of the same size;
- a server started fresh on the same data: its first `Inject`, then its next calls' p50;
- the stages the server reports (embed, search, rank, fold) at p50, p95 and p99;
- bulk `AddMemories` with supplied vectors (the fill) and with server embedding;
- recall@5 of the indexed search against exact search, unscoped and scoped to a user;
- with `--soak SECONDS`, the server's resident memory (every process of it) under steady mixed load.

    .venv/bin/python -m bench.inject                 # 10,000 and 100,000 entries (make bench)
    .venv/bin/python -m bench.inject --quick         # 10,000 entries, fewer calls (make bench-quick)
    .venv/bin/python -m bench.inject --sizes 10000 100000 1000000  # the long run
    .venv/bin/python -m bench.inject --sizes 10000 --soak 600      # resident memory over 10 minutes

It prints the table, then each target beside what this run measured and the floor
that bounds it. Results go to bench/results/inject.json and a plot to
bench/results/inject.svg.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path

import grpc
import numpy as np
import psutil
import psycopg
from contextfold import AsyncClient
from contextfold_server.access.keys import OPEN_NAMESPACE
from contextfold_server.config import available_cores
from contextfold_server.engine.memory import DEFAULT_MAX_ENTRIES, SearchQuery
from contextfold_server.memory.records import UNSCOPED
from contextfold_server.memory.search import MemorySearcher
from contextfold_server.memory.statements import SEARCH_SETTINGS
from contextfold_server.memory.store import PostgresMemoryStore
from contextfold_server.postgres.pool import Read, settings_statement
from contextfold_server.postgres.schema import NAMESPACE_SETTING, SERVICE_ROLE
from pgvector.psycopg import register_vector, register_vector_async

from bench import corpus, mem0
from bench.fanout import percentile
from harness.echo_server import METHOD as ECHO_METHOD
from harness.servers import Postgres, ServerProcess, provider_fixtures, start_server, terminate

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
DIMENSION = 384
USERS = 100
STORE = "bench"
PROVIDER_DELAY = 0.1
# What an agent asks when the caller supplies the query vector: its text is not searched with.
ASKED = "What should I know about this user?"
ASK = [{"role": "user", "content": [{"text": ASKED}]}]
BATCH = 64  # texts per AddMemories call with server embedding, and per timed model call


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


@dataclass
class Data:
    """The stored entries (text and vector) and the questions asked, with their vectors."""

    texts: list[str]
    vectors: np.ndarray
    questions: list[str]
    queries: np.ndarray

    @classmethod
    def make(cls, entries: int, base: int, calls: int) -> Data:
        texts, vectors = corpus.entries(entries, base)
        questions = corpus.questions(max(calls, 200))
        return cls(texts, vectors, questions, corpus.embed(questions, "questions"))


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


async def fill(cf: AsyncClient, data: Data, target: int, have: int) -> tuple[list[float], float]:
    """Add entries with supplied vectors until the store holds `target`; batch latencies and wall time."""
    batch = 500
    batches = (target - have) // batch

    async def add(n: int) -> None:
        start = have + n * batch
        await cf.add_memories(
            STORE,
            [
                {
                    "id": f"e{i}",
                    "content": data.texts[i],
                    "user_id": f"user-{i % USERS}",
                    "vector": data.vectors[i].tolist(),
                }
                for i in range(start, start + batch)
            ],
        )

    return await timed(add, 4, batches)


_SEARCH = (
    f"SELECT id FROM contextfold.memories WHERE namespace = '{OPEN_NAMESPACE}' AND dimension = 384"
    " AND store = ANY(%(stores)s){scope} ORDER BY (embedding::vector(384)) <=> %(vector)s LIMIT 5"
)


def search_statement(vector: np.ndarray, user: str) -> tuple[str, dict]:
    """The server's nearest-neighbour query, scoped to `user` unless empty."""
    scope = " AND user_id = %(user)s" if user else ""
    return _SEARCH.format(scope=scope), {"stores": [STORE], "user": user, "vector": vector.astype(np.float32)}


def sql_search(conn: psycopg.Connection, vector: np.ndarray, user: str) -> list[str]:
    # Never prepared: a prepared statement keeps the plan it was first given, and the
    # indexed and exact runs must each be planned with their own settings.
    return [row[0] for row in conn.execute(*search_statement(vector, user), prepare=False).fetchall()]


def exact_search(conn: psycopg.Connection, vector: np.ndarray, user: str) -> list[str]:
    """The same query with the indexes off: every candidate compared."""
    conn.execute("SET enable_indexscan = off")
    try:
        return sql_search(conn, vector, user)
    finally:
        conn.execute("SET enable_indexscan = on")


def recall(found: list[str], exact: list[str]) -> float:
    return len(set(found) & set(exact)) / max(1, len(exact))


class _Recorded(Exception):
    pass


class _Recording:
    """Stands in for a worker's pool to learn what one search sends: the reads it would make, with their
    settings, in the order it makes them (the first round trip: what a search's stage starts with)."""

    def __init__(self) -> None:
        self.reads: list[Read] = []

    async def read_all(self, namespace: str, reads: list[Read], apart: tuple[int, ...] = ()) -> list:
        self.reads = list(reads)
        raise _Recorded

    async def read(self, namespace: str, query: str, params: dict, settings: dict | None = None) -> list:
        self.reads = [Read(query, params, settings)]
        raise _Recorded


def ranked_reads(text: str, vector: np.ndarray) -> list[Read]:
    """The statements the server's default ranking sends for an Inject of `text` (its vector given), as its
    searcher composes them: each store's nearest, and the entries holding the query's words."""
    recording = _Recording()
    searcher = MemorySearcher(PostgresMemoryStore(recording), embedder=None)  # type: ignore[arg-type]
    query = SearchQuery(text, tuple(float(x) for x in vector), (STORE,), DEFAULT_MAX_ENTRIES, None, frozenset())
    # Driven by hand, in whatever loop is running: its first await is the recording's, which raises.
    searching = searcher.search(OPEN_NAMESPACE, UNSCOPED, query)
    try:
        searching.send(None)
    except _Recorded:
        return recording.reads
    finally:
        searching.close()
    raise AssertionError("the search sent nothing")


def _read_pipelined(conn: psycopg.Connection, reads: list[Read]) -> None:
    """`reads` on `conn` in one transaction and one round trip, acting for the open namespace, with their
    settings as the worker's pool sets them (one statement for all), every row fetched."""
    with conn.pipeline():
        conn.execute("BEGIN")
        conn.execute("SELECT set_config(%s, %s, true)", (NAMESPACE_SETTING, OPEN_NAMESPACE))
        cursors = []
        for read in reads:
            if read.settings:
                conn.execute(settings_statement(len(read.settings)), list(itertools.chain(*read.settings.items())))
            cursors.append(conn.execute(read.query, read.params))
        conn.execute("COMMIT")
    # The pipeline's end sends its one Sync and takes every result (as the server's reads do).
    for cursor in cursors:
        cursor.fetchall()


class Floor:
    """The work an `Inject` cannot avoid, done alone in this process: the model embedding the query
    (the server's model, loaded here), the nearest-neighbour query sent straight to Postgres, and the
    statements the default ranking sends (each store's nearest and the words' matches, side by side on two
    connections as the server sends them while one is spare, as the service role under row-level security)."""

    def __init__(self, database_url: str, data: Data, threads: int) -> None:
        self.data = data
        # The model as one worker runs it, and (the same, on every core) for batches.
        self.model = corpus.local_model(threads)
        self.model.encode(data.questions[:5])
        self.batch_model = corpus.local_model()
        self.batch_model.encode(data.questions[:5])
        self.conn = psycopg.connect(database_url, autocommit=True)
        register_vector(self.conn)
        self.conn.execute(SEARCH_SETTINGS)
        # As a worker's connections are: the service role, so row-level security applies as it does there.
        self.ranked_conns = []
        for _ in range(2):
            conn = psycopg.connect(database_url, autocommit=True)
            register_vector(conn)
            conn.execute(SEARCH_SETTINGS)
            conn.execute(f"SET ROLE {SERVICE_ROLE}")
            self.ranked_conns.append(conn)
        # The second connection's round trip, beside the first's (psycopg waits for Postgres without the GIL).
        self.beside = ThreadPoolExecutor(1)

    def close(self) -> None:
        self.conn.close()
        for conn in self.ranked_conns:
            conn.close()
        self.beside.shutdown()

    def embed(self, n: int) -> float:
        started = time.perf_counter()
        self.model.encode([f"{self.data.questions[n % len(self.data.questions)]} (floor {n})"])
        return time.perf_counter() - started

    def search(self, n: int) -> float:
        started = time.perf_counter()
        sql_search(self.conn, self.data.queries[n % len(self.data.queries)], "")
        return time.perf_counter() - started

    def embed_and_rank(self, n: int, ranked: list[float]) -> float:
        """The embedding alone (its time returned), then the default ranking's statements alone (their time
        added to `ranked`): an `Inject` with server embedding takes turns with both."""
        embedded = self.embed(n)
        ranked.append(self.ranked_search(n))
        return embedded

    def ranked_search(self, n: int) -> float:
        """The default ranking's statements for a fresh question: each store's nearest on one connection and
        the words' matches on another, at once, each in one transaction and one round trip."""
        text = f"{self.data.questions[n % len(self.data.questions)]} (floor {n})"
        reads = ranked_reads(text, self.data.queries[n % len(self.data.queries)])
        nearest, words = self.ranked_conns
        started = time.perf_counter()
        beside = self.beside.submit(_read_pipelined, words, reads[1:])
        _read_pipelined(nearest, reads[:1])
        beside.result()
        return time.perf_counter() - started

    def rows(self, entries: int, calls: int) -> tuple[list[Row], dict[str, float]]:
        """The model's rate in batches, the scoped search alone, and recall@5 of indexed against
        exact search, unscoped and scoped."""
        batches = []
        for n in range(4):
            texts = [f"Embedded fact {n}-{i}: the user mentioned plan {i * 31 + n}" for i in range(BATCH)]
            started = time.perf_counter()
            self.batch_model.encode(texts)
            batches.append(time.perf_counter() - started)
        model_rate = row(f"floor: embedding alone, {BATCH} at a time", entries, 1, batches, sum(batches))
        model_rate.per_second = round(BATCH * len(batches) / sum(batches), 1)

        scoped: list[float] = []
        recalls: dict[str, list[float]] = {"unscoped": [], "scoped": []}
        for n in range(calls):
            vector = self.data.queries[n % len(self.data.queries)]
            user = f"user-{n % USERS}"
            started = time.perf_counter()
            found = sql_search(self.conn, vector, user)
            scoped.append(time.perf_counter() - started)
            recalls["scoped"].append(recall(found, exact_search(self.conn, vector, user)))
            found = sql_search(self.conn, vector, "")
            recalls["unscoped"].append(recall(found, exact_search(self.conn, vector, "")))
        rows = [model_rate, row("floor: SQL search alone, scoped", entries, 1, scoped, sum(scoped))]
        return rows, {kind: round(statistics.mean(values), 4) for kind, values in recalls.items()}


async def alternating(
    call: Callable[[int], Awaitable[object]], floor: Callable[[int], float], calls: int
) -> tuple[list[float], list[float]]:
    """One caller: the floor's work alone, then the call, in turn, so both see the same machine
    (a noisy machine's speed drifts over a run; taken in turns, the ratio holds)."""
    samples, floors = [], []
    for n in range(calls):
        floors.append(floor(n))
        started = time.perf_counter()
        await call(n)
        samples.append(time.perf_counter() - started)
    return samples, floors


async def concurrent_floor_rows(cf: AsyncClient, database_url: str, data: Data, entries: int, calls: int) -> list[Row]:
    """What 16 callers get from Postgres alone (16 connections), and from the gRPC stack alone (the
    cheapest call there is, GetMemory by id): ceilings Inject's throughput sits under."""
    connections = [await psycopg.AsyncConnection.connect(database_url, autocommit=True) for _ in range(16)]
    try:
        for conn in connections:
            await register_vector_async(conn)
            await conn.execute(SEARCH_SETTINGS)
        idle = list(connections)

        async def search(n: int) -> None:
            conn = idle.pop()
            try:
                await conn.execute(*search_statement(data.queries[n % len(data.queries)], ""))
            finally:
                idle.append(conn)

        await timed(search, 16, 64)
        samples, seconds = await timed(search, 16, calls * 4)
    finally:
        for conn in connections:
            await conn.close()
    rows = [row("floor: SQL search alone", entries, 16, samples, seconds)]

    def get(n: int) -> Awaitable[object]:
        return cf.get_memory(f"e{n % entries}")

    await timed(get, 4, 20)
    for callers in (1, 16):
        samples, seconds = await timed(get, callers, calls * (4 if callers > 1 else 1))
        rows.append(row("floor: a gRPC call (GetMemory)", entries, callers, samples, seconds))
    return rows


async def insert_floor(database_url: str, data: Data, entries: int, indexed: bool, count: int = 2000) -> Row:
    """Postgres alone taking `count` entries by COPY from 4 connections, as the fill: into the entries
    table itself, with its vector index, in transactions rolled back (then vacuumed away); or into
    a temporary table like it, without the index. What every added entry pays, and what the index adds."""
    batch = count // 4
    columns = "namespace, id, store, content, metadata, user_id, dimension, embedding"
    # Vectors no entry has: an index finds a duplicate of a stored vector far sooner than a place
    # for a new one, and the fill's vectors are all stored by now.
    *_, blends = corpus.blends(data.vectors, count, np.random.default_rng(entries + indexed))

    async def copy(n: int) -> None:
        async with await psycopg.AsyncConnection.connect(database_url) as conn:
            await register_vector_async(conn)
            table = "contextfold.memories"
            if not indexed:
                table = "floor_entries"
                await conn.execute(
                    f"CREATE TEMPORARY TABLE {table} (LIKE contextfold.memories INCLUDING DEFAULTS INCLUDING IDENTITY)"
                )
            async with conn.cursor().copy(f"COPY {table} ({columns}) FROM STDIN WITH (FORMAT BINARY)") as copying:
                copying.set_types(["text", "text", "text", "text", "jsonb", "text", "int4", "vector"])
                for i in range(n * batch, (n + 1) * batch):
                    text = data.texts[i % len(data.texts)]
                    await copying.write_row((OPEN_NAMESPACE, f"floor-{i}", STORE, text, "{}", "floor", 384, blends[i]))
            await conn.rollback()

    samples, seconds = await timed(copy, 4, 4)
    if indexed:
        async with await psycopg.AsyncConnection.connect(database_url, autocommit=True) as conn:
            await conn.execute("VACUUM contextfold.memories")
    case = "floor: Postgres COPY, " + ("with the vector index" if indexed else "no vector index")
    result = row(case, entries, 4, samples, seconds)
    result.per_second = round(count / seconds, 1)
    return result


def separate_connections(address: str, count: int) -> list[AsyncClient]:
    """Clients on connections of their own, as separate agents are: the kernel spreads connections
    (not calls) over the server's workers."""
    options = [("grpc.use_local_subchannel_pool", 1)]
    return [AsyncClient(channel=grpc.aio.insecure_channel(address, options=options), timeout=120) for _ in range(count)]


def supplied_vector(clients: list[AsyncClient], data: Data) -> Callable[[int], Awaitable[object]]:
    """An Inject with the caller's query vector, the n-th call on the n-th client (round robin)."""

    def call(n: int) -> Awaitable[object]:
        vector = data.queries[n % len(data.queries)].tolist()
        return clients[n % len(clients)].inject(ASK, stores=[STORE], query_vector=vector)

    return call


async def inject_rows(
    clients: list[AsyncClient], data: Data, floor: Floor, entries: int, calls: int, providers: bool
) -> list[Row]:
    rows: list[Row] = []
    queries = data.queries
    stages: dict[str, list[float]] = {"embed": [], "search": [], "rank": [], "fold": []}

    supplied = supplied_vector(clients, data)

    async def embedded(n: int) -> object:
        result = await clients[n % len(clients)].inject(fresh_question(data, n), stores=[STORE])
        for stage, samples in stages.items():
            duration = result.report.stage_durations.get(stage)
            if duration is not None:
                samples.append(duration.seconds + duration.nanos / 1e9)
        return result

    def scoped(n: int) -> Awaitable[object]:
        vector = queries[n % len(queries)].tolist()
        scope = {"user_id": f"user-{n % USERS}"}
        return clients[n % len(clients)].search_memories(
            stores=[STORE], query_vector=vector, max_results=5, scope=scope
        )

    ranked: list[float] = []
    for name, call, alone in (
        ("Inject, supplied vector", supplied, ("floor: SQL search alone", floor.search)),
        ("Inject, server embedding", embedded, ("floor: embedding alone", lambda n: floor.embed_and_rank(n, ranked))),
        ("SearchMemories, scoped to 1 user of 100", scoped, None),
    ):
        await timed(call, 4, 20)  # warm
        for samples in stages.values():
            samples.clear()
        if alone:
            samples, floors = await alternating(call, alone[1], calls)
            rows.append(row(alone[0], entries, 1, floors, sum(floors)))
            if call is embedded:
                rows.append(row("floor: the default ranking's SQL alone", entries, 1, ranked, sum(ranked)))
        else:
            samples, _ = await timed(call, 1, calls)
        rows.append(row(name, entries, 1, samples, sum(samples)))
        if call is embedded:
            # The server's own account of the same calls: the time inside `Inject` its stages took.
            for stage, times in stages.items():
                if times:
                    rows.append(row(f"  its {stage} stage, as the server reports", entries, 1, times, sum(samples)))
        samples, seconds = await timed(call, 16, calls * 4)
        rows.append(row(name, entries, 16, samples, seconds))

    for name, samples in (await rankings_in_turn(clients[0], data, calls)).items():
        rows.append(row(name, entries, 1, samples, sum(samples)))

    if providers:
        app_state = {"texts": {"a": "<a/>", "b": "<b/>"}, "delays": {"a": PROVIDER_DELAY, "b": PROVIDER_DELAY}}

        def fanned(n: int) -> Awaitable[object]:
            return clients[n % len(clients)].inject(
                ASK,
                stores=[STORE],
                query_vector=queries[n % len(queries)].tolist(),
                providers=["a", "b"],
                app_state=app_state,
            )

        for callers in (1, 16):
            samples, seconds = await timed(fanned, callers, calls)
            rows.append(row("Inject + two 100 ms providers", entries, callers, samples, seconds))
    return rows


# Each ranking an `Inject` is compared under (its row's name, the options that name it), the question embedded before.
RANKINGS_COMPARED = {
    "Inject, the default ranking, question embedded before": {},
    "Inject, similarity, question embedded before": {"ranking": "similarity"},
}
# What the default may add to `Inject`'s p50 over similarity alone (ms), as bench/locomo.py has it on conversations.
TARGET_ADDED_MS = 4.0


async def rankings_in_turn(cf: AsyncClient, data: Data, calls: int) -> dict[str, list[float]]:
    """One caller: each question embedded once (a search with its text; the server keeps its vector), then an
    `Inject` under each ranking, taking turns (first one, then the other, first): what each costs beyond the
    embedding, on the same machine at the same moment."""
    samples: dict[str, list[float]] = {name: [] for name in RANKINGS_COMPARED}
    for n in range(calls):
        messages = fresh_question(data, n)
        await cf.search_memories(messages[0]["content"][0]["text"], stores=[STORE], max_results=1)
        for name in list(RANKINGS_COMPARED)[:: 1 if n % 2 else -1]:
            started = time.perf_counter()
            await cf.inject(messages, stores=[STORE], **RANKINGS_COMPARED[name])
            samples[name].append(time.perf_counter() - started)
    return samples


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


def fresh_question(data: Data, n: int) -> list[dict]:
    """A question no call asked before, so the embedding cache never answers for it: marked as the
    floor's are (`Floor.embed`, "(floor N)"), so the model embeds as many tokens either way."""
    text = f"{data.questions[n % len(data.questions)]} (call {next(_ASKED)})"
    return [{"role": "user", "content": [{"text": text}]}]


# Every fresh question's number, once each in a run.
_ASKED = itertools.count()


def resident_mb(pid: int) -> float:
    """The resident set size of the server: the supervisor, its workers and their sandboxes."""
    server = psutil.Process(pid)
    return sum(process.memory_info().rss for process in [server, *server.children(recursive=True)]) / 2**20


async def soak(clients: list[AsyncClient], data: Data, pid: int, seconds: float) -> dict:
    """16 callers for `seconds`, a steady mix of every kind of call; the server's resident memory every 10 s."""
    ends = time.monotonic() + seconds
    calls = 0

    async def caller(me: int) -> None:
        nonlocal calls
        n, cf = me, clients[me % len(clients)]
        while time.monotonic() < ends:
            vector = data.queries[n % len(data.queries)].tolist()
            kind = n % 8
            if kind < 3:
                await cf.inject(ASK, stores=[STORE], query_vector=vector)
            elif kind < 6:
                await cf.inject(fresh_question(data, n), stores=[STORE])
            elif kind == 6:
                await cf.search_memories(stores=[STORE], query_vector=vector, scope={"user_id": f"user-{n % USERS}"})
            else:
                # Writes too: a few entries, then they are deleted, so the store does not grow.
                added = await cf.add_memories(
                    STORE, [{"content": f"Soak entry {n}-{i}", "vector": vector, "user_id": "soak"} for i in range(5)]
                )
                await cf.delete_memories([m.id for m in added])
            calls += 1
            n += 16

    samples: list[tuple[float, float]] = []

    async def sample() -> None:
        started = time.monotonic()
        while time.monotonic() < ends:
            samples.append((round(time.monotonic() - started), round(resident_mb(pid), 1)))
            await asyncio.sleep(10)
        samples.append((round(time.monotonic() - started), round(resident_mb(pid), 1)))

    started = time.perf_counter()
    await asyncio.gather(sample(), *(caller(me) for me in range(16)))
    elapsed = time.perf_counter() - started
    # The first minute is warm-up (pools fill, caches fill, the allocator finds its size).
    settled = [mb for at, mb in samples if at >= min(60, seconds / 2)]
    return {
        "seconds": round(elapsed),
        "calls_per_second": round(calls / elapsed, 1),
        "rss_mb": samples,
        "rss_settled_first_mb": settled[0],
        "rss_last_mb": settled[-1],
        "rss_max_mb": max(mb for _, mb in samples),
    }


def targets(rows: list[Row], recall: dict[int, dict[str, float]], soaked: dict | None) -> list[str]:
    """Each target beside what this run measured, and the floor it is bounded by (in brackets)."""
    sizes = sorted({r.entries for r in rows if r.case == "Inject, server embedding"})
    largest = max(sizes)
    embedded_at = max(r.entries for r in rows if r.case.startswith("AddMemories, server"))

    def find(case: str, callers: int = 1, entries: int = largest) -> Row | None:
        return next((r for r in rows if r.case == case and r.callers == callers and r.entries == entries), None)

    def must(case: str, callers: int = 1, entries: int = largest) -> Row:
        found = find(case, callers, entries)
        assert found is not None, f"no row {case!r}, {callers} callers, {entries} entries"
        return found

    def verdict(measured: float, bound: float, at_most: bool = True) -> str:
        met = measured <= bound if at_most else measured >= bound
        return "met" if met else "MISSED"

    batch_rate = must(f"floor: embedding alone, {BATCH} at a time").per_second
    copy_rate = must("floor: Postgres COPY, with the vector index", 4).per_second
    lines = []
    for entries in sizes:
        embed, search = must("floor: embedding alone", 1, entries), must("floor: SQL search alone", 1, entries)
        call = must("floor: a gRPC call (GetMemory)", 1, entries)
        served = must("Inject, server embedding", 1, entries)
        ratio = served.p50_ms / (embed.p50_ms + search.p50_ms + call.p50_ms)
        lines.append(
            f"{entries:,} entries, Inject with server embedding, p50 <= 1.3 x (embedding + search + a gRPC call):"
            f" {ratio:.2f} x, {verdict(ratio, 1.3)} ({served.p50_ms:g} ms; {embed.p50_ms:g} + {search.p50_ms:g}"
            f" + {call.p50_ms:g} ms)"
        )
        ranked = find("floor: the default ranking's SQL alone", 1, entries)
        if ranked:
            # The same, with the search the default ranking makes (its words and each store's crowd).
            ratio = served.p50_ms / (embed.p50_ms + ranked.p50_ms + call.p50_ms)
            lines.append(
                f"{entries:,} entries, Inject with server embedding, p50 <= 1.3 x (embedding + the default ranking's"
                f" SQL + a gRPC call): {ratio:.2f} x, {verdict(ratio, 1.3)} ({served.p50_ms:g} ms; {embed.p50_ms:g}"
                f" + {ranked.p50_ms:g} + {call.p50_ms:g} ms)"
            )
        default, similarity = (find(name, 1, entries) for name in RANKINGS_COMPARED)
        if default and similarity:
            added = default.p50_ms - similarity.p50_ms
            lines.append(
                f"{entries:,} entries, the default ranking adds <= {TARGET_ADDED_MS:g} ms at p50 over similarity"
                f" (the question embedded before): {added:.2f} ms, {verdict(added, TARGET_ADDED_MS)}"
                f" ({default.p50_ms:g} against {similarity.p50_ms:g} ms, {default.p50_ms / similarity.p50_ms:.2f} x)"
            )
        tail = served.p99_ms / served.p50_ms
        lines.append(
            f"{entries:,} entries, Inject with server embedding, p99 <= 1.5 x its p50: {tail:.2f} x,"
            f" {verdict(tail, 1.5)} ({served.p99_ms:g} ms; p50 {served.p50_ms:g} ms)"
        )
        crowded = must("Inject, supplied vector", 16, entries)
        tail = crowded.p99_ms / crowded.p50_ms
        lines.append(
            f"{entries:,} entries, 16 callers, supplied vectors, p99 <= 3 x p50: {tail:.2f} x, {verdict(tail, 3.0)}"
            f" ({crowded.p99_ms:g} ms; p50 {crowded.p50_ms:g} ms)"
        )
        peer = find("peer: mem0 Memory.search, in-process", 1, entries)
        if peer:
            share = served.p50_ms / peer.p50_ms
            lines.append(
                f"{entries:,} entries, Inject with server embedding, p50 <= 0.6 x mem0's in-process search:"
                f" {share:.2f} x, {verdict(share, 0.6)} ({served.p50_ms:g} ms; mem0 {peer.p50_ms:g} ms)"
            )
        supplied, postgres = must("Inject, supplied vector", 16, entries), must("floor: SQL search alone", 16, entries)
        share = supplied.per_second / postgres.per_second
        one_worker = find("Inject, supplied vector, 1 worker", 16, entries)
        lines.append(
            f"{entries:,} entries, 16 callers, supplied vectors, Inject/s >= 0.8 x Postgres alone: {share:.2f} x,"
            f" {verdict(share, 0.8, at_most=False)} ({supplied.per_second:g}/s; Postgres alone"
            f" {postgres.per_second:g}/s" + (f"; one worker {one_worker.per_second:g}/s)" if one_worker else ")")
        )
        embedded = must("Inject, server embedding", 16, entries)
        share = embedded.per_second / batch_rate
        lines.append(
            f"{entries:,} entries, 16 callers, server embedding, Inject/s >= 0.7 x the model's batched texts/s:"
            f" {share:.2f} x, {verdict(share, 0.7, at_most=False)} ({embedded.per_second:g}/s; the model alone,"
            f" {BATCH} at a time on every core, {batch_rate:g} texts/s)"
        )

    def at_most(target: str, measured: Row | None, against: Row | None, bound: float, named: tuple[str, str]) -> None:
        """The target `measured` <= `bound` x `against` at p50, when this run measured both (`named`: what `against` is
        called in the target, and beside its figure)."""
        if measured and against:
            share = measured.p50_ms / against.p50_ms
            lines.append(
                f"{largest:,} entries, {target} <= {bound:g} x {named[0]}: {share:.2f} x, {verdict(share, bound)}"
                f" ({measured.p50_ms:g} ms; {named[1]} {against.p50_ms:g} ms)"
            )

    at_most(
        "the model inside a worker",
        find("  its embed stage, as the server reports"),
        find("floor: embedding alone"),
        1.2,
        ("the model alone at one query", "alone"),
    )
    stage, ranked = find("  its search stage, as the server reports"), find("floor: the default ranking's SQL alone")
    if stage and ranked:
        lines.append(
            f"{largest:,} entries, for the record: Inject's search stage {stage.p50_ms:g} ms against its statements"
            f" alone {ranked.p50_ms:g} ms ({stage.p50_ms / ranked.p50_ms:.2f} x; the rest is the pool, psycopg, the"
            " rows' conversion)"
        )
    at_most(
        "first Inject on a fresh server",
        find("Inject, first call on a fresh server"),
        find("Inject, that server's next 40 calls"),
        2.0,
        ("its steady p50", "then"),
    )
    at_most(
        "server CPU per Inject (supplied vector)",
        find("server CPU ms per Inject, supplied vector (4 callers)", 4),
        find("bare grpc.aio echo CPU ms per call (4 callers)", 4),
        2.5,
        ("a bare grpc.aio call's", "echo"),
    )
    scoped = must("SearchMemories, scoped to 1 user of 100")
    lines += [
        f"Scoped search, {largest:,} entries, recall@5 >= 0.95 and p99 <= 20 ms:"
        f" {recall[largest]['scoped']:.3f}, {scoped.p99_ms:g} ms",
        "AddMemories, server embedding:"
        f" {must('AddMemories, server embedding (100/batch)', 2, embedded_at).per_second:g}/s"
        f" (the model alone: {batch_rate:g} texts/s)",
        f"AddMemories, supplied vectors: {must('AddMemories, supplied vectors (500/batch)', 4).per_second:g}/s"
        f" (Postgres alone by COPY with the vector index: {copy_rate:g}/s)",
    ]
    if soaked:
        growth = soaked["rss_last_mb"] - soaked["rss_settled_first_mb"]
        lines.append(
            f"Resident memory flat over {soaked['seconds']} s: {growth:+.1f} MB after warm-up"
            f" ({soaked['rss_settled_first_mb']} -> {soaked['rss_last_mb']} MB, every process of the server)"
        )
    return lines


def table(rows: list[Row], recall: dict[int, dict[str, float]], soaked: dict | None) -> str:
    lines = [f"{'case':54} {'entries':>8} {'callers':>7} {'p50 ms':>8} {'p95 ms':>8} {'p99 ms':>8} {'per s':>8}"]
    # By size, the floor first; in the order measured otherwise.
    for r in sorted(rows, key=lambda r: (r.entries, not r.case.startswith("floor"))):
        lines.append(
            f"{r.case:54} {r.entries:>8} {r.callers:>7} {r.p50_ms:>8.2f} {r.p95_ms:>8.2f} {r.p99_ms:>8.2f}"
            f" {r.per_second:>8.1f}"
        )
    for entries, values in recall.items():
        lines.append(
            f"recall@5 vs exact search, {entries} entries: unscoped (HNSW) {values['unscoped']:.3f},"
            f" scoped to 1 user of {USERS} (the planner's index) {values['scoped']:.3f}"
        )
    if soaked:
        lines.append(
            f"resident memory over {soaked['seconds']} s of mixed calls ({soaked['calls_per_second']}/s, 16 callers):"
            f" {soaked['rss_settled_first_mb']} MB after warm-up, {soaked['rss_last_mb']} MB at the end,"
            f" {soaked['rss_max_mb']} MB at most"
        )
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


async def one_worker_row(args: argparse.Namespace, database_url: str, data: Data, entries: int) -> Row:
    """16 callers with supplied vectors against one worker, on the same database: what the workers add."""
    with tempfile.TemporaryDirectory() as scratch:
        server = start_server(Path(scratch) / "server.log", "--database-url", database_url, workers=1)
        clients = separate_connections(server.address, 16)
        try:
            call = supplied_vector(clients, data)
            await timed(call, 16, 64)
            samples, seconds = await timed(call, 16, args.calls * 4)
        finally:
            for client in clients:
                await client.close()
            server.stop()
    return row("Inject, supplied vector, 1 worker", entries, 16, samples, seconds)


async def first_call_rows(args: argparse.Namespace, database_url: str, data: Data, entries: int) -> list[Row]:
    """A server started fresh on the same database, as an autoscaled replica is: its first `Inject`
    (server embedding, a question it has not seen), then its next calls' p50."""
    with tempfile.TemporaryDirectory() as scratch:
        server = start_server(Path(scratch) / "server.log", "--database-url", database_url, workers=args.workers)
        try:
            async with AsyncClient(server.address, timeout=120) as cf:

                async def ask(n: int) -> object:
                    return await cf.inject(fresh_question(data, 10_000 + n), stores=[STORE])

                first, _ = await timed(ask, 1, 1)
                steady, seconds = await timed(lambda n: ask(n + 1), 1, 40)
        finally:
            server.stop()
    return [
        row("Inject, first call on a fresh server", entries, 1, first, sum(first)),
        row("Inject, that server's next 40 calls", entries, 1, steady, seconds),
    ]


def process_tree_cpu(pid: int) -> float:
    """CPU seconds (user and system) of `pid` and every process under it, from /proc."""
    parents: dict[int, int] = {}
    used: dict[int, float] = {}
    tick = os.sysconf("SC_CLK_TCK")
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        parents[int(entry.name)] = int(fields[1])
        used[int(entry.name)] = (int(fields[11]) + int(fields[12])) / tick
    tree, grown = {pid}, True
    while grown:
        children = {child for child, parent in parents.items() if parent in tree} - tree
        grown = bool(children)
        tree |= children
    return sum(used.get(member, 0.0) for member in tree)


async def cpu_rows(clients: list[AsyncClient], data: Data, server_pid: int, entries: int) -> list[Row]:
    """CPU per call, every process of the server, over a fixed load (supplied vectors, 4 callers), beside
    a bare `grpc.aio` echo server's per call for a request of the same size, in the same run."""
    calls = 800
    supplied = supplied_vector(clients, data)
    await timed(supplied, 4, 40)
    before = process_tree_cpu(server_pid)
    await timed(supplied, 4, calls)
    ours = (process_tree_cpu(server_pid) - before) / calls
    request = InjectRequestBytes.of(data)
    echo = subprocess.Popen([sys.executable, "-m", "harness.echo_server"], cwd=ROOT, stdout=subprocess.PIPE, text=True)
    try:
        port = int(echo.stdout.readline()) if echo.stdout else 0
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            call = channel.unary_unary(ECHO_METHOD)

            async def echoed(n: int) -> object:
                return await call(request)

            await timed(echoed, 4, 40)
            before = process_tree_cpu(echo.pid)
            await timed(echoed, 4, calls)
            bare = (process_tree_cpu(echo.pid) - before) / calls
    finally:
        terminate(echo)
    cpu = [
        Row("server CPU ms per Inject, supplied vector (4 callers)", entries, 4, calls, 0, 0, 0, 0),
        Row("bare grpc.aio echo CPU ms per call (4 callers)", entries, 4, calls, 0, 0, 0, 0),
    ]
    for made, seconds in zip(cpu, (ours, bare), strict=True):
        made.p50_ms = made.p95_ms = made.p99_ms = round(seconds * 1000, 3)
    return cpu


class InjectRequestBytes:
    """An `Inject` request as the supplied-vector case sends it, serialized: the echo's payload."""

    @staticmethod
    def of(data: Data) -> bytes:
        from contextfold.v1 import conversation_pb2, injection_pb2

        message = conversation_pb2.Message(
            role=conversation_pb2.ROLE_USER, content=[conversation_pb2.ContentBlock(text=ASKED)]
        )
        memory = injection_pb2.MemoryOptions(stores=[STORE], query_vector=data.queries[0].tolist())
        return injection_pb2.InjectRequest(messages=[message], memory=memory).SerializeToString()


def mem0_row(database_url: str, data: Data, entries: int, calls: int) -> Row:
    """The peer: mem0's in-process search on the same entries (one caller)."""
    found = mem0.search_latency(database_url, data.texts[:entries], data.vectors[:entries], data.questions, calls)
    peer = Row("peer: mem0 Memory.search, in-process", entries, 1, found["calls"], 0, 0, 0, 0)
    peer.p50_ms, peer.p95_ms, peer.p99_ms = (round(found[f"search_{q}_ms"], 2) for q in ("p50", "p95", "p99"))
    peer.per_second = round(1000 / found["mean_ms"], 1)
    return peer


async def measure(args: argparse.Namespace, server: ServerProcess, database_url: str, port: int) -> dict:
    data = Data.make(args.sizes[-1], args.base, args.calls)
    rows: list[Row] = []
    recall: dict[int, dict[str, float]] = {}
    soaked = None
    floor = Floor(database_url, data, threads=min(available_cores(), 4))
    clients = separate_connections(server.address, 16)
    try:
        async with AsyncClient(server.address, timeout=120) as cf:
            await cf.create_store(STORE)
            for name in ("a", "b"):
                await cf.register_provider(name, f"127.0.0.1:{port}", timeout=2)
            have = 0
            for entries in args.sizes:
                samples, seconds = await fill(cf, data, entries, have)
                added = entries - have
                fill_row = row("AddMemories, supplied vectors (500/batch)", entries, 4, samples, seconds)
                fill_row.per_second = round(added / seconds, 1)
                have = entries
                with psycopg.connect(database_url, autocommit=True) as conn:
                    conn.execute("ANALYZE contextfold.memories")
                floors, recall[entries] = floor.rows(entries, args.calls)
                rows += floors
                rows += await concurrent_floor_rows(cf, database_url, data, entries, args.calls)
                rows += await inject_rows(clients, data, floor, entries, args.calls, providers=entries == args.sizes[0])
                rows.append(await one_worker_row(args, database_url, data, entries))
                # The fill's dead tuples vacuumed first: an autovacuum of the 10,000 new rows (and their
                # vector index) in the middle of these would time Postgres' housekeeping, not the server.
                with psycopg.connect(database_url, autocommit=True) as conn:
                    conn.execute("VACUUM (ANALYZE) contextfold.memories")
                rows += await cpu_rows(clients, data, server.process.pid, entries)
                rows += await first_call_rows(args, database_url, data, entries)
                if args.peers:
                    rows.append(mem0_row(database_url, data, entries, args.calls))
                rows.append(fill_row)
                # Last, as it leaves dead index entries until its vacuum.
                for indexed in (True, False):
                    rows.append(await insert_floor(database_url, data, entries, indexed))
            rows.append(await bulk_embedded(cf, args.sizes[-1], args.embedded))
            if args.soak:
                soaked = await soak(clients, data, server.process.pid, args.soak)
    finally:
        for client in clients:
            await client.close()
        floor.close()
    return {"rows": [asdict(r) for r in rows], "recall_at_5": recall, "soak": soaked}


def cpu_model() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.partition(":")[2].strip()
    return platform.machine()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000], help="entries, in rising order")
    parser.add_argument("--calls", type=int, default=200, help="timed calls per case and caller count")
    parser.add_argument("--embedded", type=int, default=1000, help="entries added with server embedding")
    parser.add_argument(
        "--base", type=int, default=10_000, help="entries embedded by the model; the rest blend two of them"
    )
    parser.add_argument("--soak", type=float, default=0, help="then this many seconds of mixed load, watching RSS")
    parser.add_argument(
        "--workers", type=int, default=available_cores(), help="the server's workers (default: as `make run`)"
    )
    parser.add_argument("--no-peers", dest="peers", action="store_false", help="leave mem0 out")
    parser.add_argument("--quick", action="store_true", help="10,000 entries and fewer calls (make bench-quick)")
    parser.add_argument("--json", type=Path, default=RESULTS / "inject.json")
    args = parser.parse_args()
    if args.quick:
        args.sizes, args.calls, args.embedded, args.base, args.peers = [10_000], 60, 300, 2_000, False
        args.json = RESULTS / "inject-quick.json"

    RESULTS.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as scratch:
        database = Postgres(Path(scratch) / "pgdata")
        server = start_server(Path(scratch) / "server.log", "--database-url", database.url, workers=args.workers)
        try:
            with provider_fixtures() as ports:
                started = time.perf_counter()
                results = asyncio.run(measure(args, server, database.url, ports["scripted"]))
        finally:
            server.stop()
            database.cleanup()

    rows = [Row(**r) for r in results["rows"]]
    recall = {int(k): v for k, v in results["recall_at_5"].items()}
    machine = (
        f"{cpu_model()}, {os.cpu_count()} cores, Python {platform.python_version()};"
        f" the server with {args.workers} workers"
    )
    print(f"contextfold Inject benchmark on {machine}")
    print(table(rows, recall, results["soak"]))
    print("\ntargets (measured in this run; the floor each is bounded by in brackets):")
    for line in targets(rows, recall, results["soak"]):
        print(f"- {line}")
    print(f"(took {time.perf_counter() - started:.0f} s)")
    args.json.write_text(
        json.dumps(
            {"machine": {"cpu": cpu_model(), "cpus": os.cpu_count(), "python": platform.python_version()}} | results,
            indent=2,
        )
        + "\n"
    )
    plot(rows, args.json.with_suffix(".svg"))


if __name__ == "__main__":
    main()
