"""A query never waits behind bulk work: bulk calls run in a bulk worker at a lower CPU priority, with a
model, a database pool and database sessions of their own; batches are bounded by tokens; a worker's
event loop moves a bulk call's bytes and nothing more; the database's connections go in fair turns;
and a statement the caller's own deadline cut is DEADLINE_EXCEEDED."""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import random
import re
import signal
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import grpc
import psutil
import psycopg
import pytest
from contextfold import Client, DeadlineExceeded
from contextfold.v1 import memory_pb2
from contextfold_server.api.lanes import BulkCalls, BulkLane, Relayed
from contextfold_server.errors import Unavailable
from contextfold_server.postgres.embedded import running_url
from contextfold_server.postgres.pool import _TenantTurns
from grpc_health.v1 import health_pb2, health_pb2_grpc

from harness.messages import unique, user
from harness.polling import wait_for
from harness.servers import ServerProcess, live_children, sample, server_processes, serving

# A stall no check should see, however loaded the machine (`make bench` has the targets).
STALL = 0.25
LONG_TEXT = (
    "Notes from the planning meeting: the team reviewed the launch checklist, the open incidents and the"
    " budget for the next quarter, and agreed who follows up on each item before the review on Friday. "
) * 7


@pytest.fixture(scope="module")
def lanes_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("lanes")


@pytest.fixture(scope="module")
def lanes(lanes_root: Path) -> Iterator[ServerProcess]:
    with serving(lanes_root) as process:
        yield process


def sentences_settled(root: Path) -> None:
    """Wait until the bulk worker of the server serving under `root` has embedded the sentences of every entry
    written so far (memory/sentences.py): its model then embeds nothing more for the tests before, whose long
    entries' sentences it embeds a moment after them."""
    url = running_url(root / "pgdata")
    assert url is not None, "the server's embedded Postgres is not running"
    waiting = "SELECT count(*) FROM contextfold.memories WHERE sentences_state < 2"

    def settled() -> bool:
        with psycopg.connect(url, autocommit=True) as conn:
            row = conn.execute(waiting).fetchone()
        return row is not None and row[0] == 0

    wait_for(settled, 120, what="the entries' sentences to be embedded")


def embedded(server: ServerProcess, lane: str) -> float:
    return sample(server.scrape(), "contextfold_embedding_texts_total", lane=lane)


def timed_inject(cf: Client, store: str, question: str) -> float:
    started = time.perf_counter()
    result = cf.inject([user(question)], stores=[store])
    assert result.report.injected, result.report
    return time.perf_counter() - started


def test_a_query_is_answered_at_once_while_a_long_bulk_add_keeps_the_model_busy(lanes: ServerProcess) -> None:
    store = unique("documents")
    with Client(lanes.address, timeout=120) as cf, Client(lanes.address, timeout=120) as writer:
        cf.create_store(store)
        cf.add_memories(store, ["The user drinks green tea every morning"])
        timed_inject(cf, store, "What does the user drink?")
        before = embedded(lanes, "bulk")
        with ThreadPoolExecutor(1) as pool:
            # 48 texts of the model's longest: seconds of the model's time, in batches of two.
            adding = pool.submit(writer.add_memories, store, [f"{n}. {LONG_TEXT}" for n in range(48)])
            wait_for(lambda: embedded(lanes, "bulk") > before, 60, what="the bulk lane to embed")
            waits = [timed_inject(cf, store, f"What does the user drink, question {n}?") for n in range(10)]
            assert not adding.done(), "the bulk add ended before the queries were timed"
            assert len(adding.result()) == 48
    # Each query had its own model session, first in the kernel's order: none waited a bulk batch (up to
    # 512 tokens, about 100 ms), let alone the sixteen long texts a shared batch held (about a second).
    assert max(waits) < 0.25, [round(wait, 3) for wait in waits]


def test_a_query_and_a_writes_texts_never_share_a_batch(lanes: ServerProcess, lanes_root: Path) -> None:
    store = unique("notes")
    with Client(lanes.address, timeout=60) as cf:
        cf.create_store(store)
        cf.add_memories(store, ["The user walks the dog at noon"])
        sentences_settled(lanes_root)
        queries, bulk = embedded(lanes, "queries"), embedded(lanes, "bulk")
        tag = unique("shared")
        with ThreadPoolExecutor(4) as pool:
            writes = [pool.submit(cf.add_memories, store, [f"{tag} note {w}-{n}" for n in range(8)]) for w in range(5)]
            asked = [pool.submit(cf.inject, [user(f"{tag}: when is the walk, {n}?")], stores=[store]) for n in range(5)]
            for future in [*writes, *asked]:
                future.result()
    # The worker's model embedded the five questions and nothing else; the bulk worker's, the forty notes.
    assert embedded(lanes, "queries") - queries == 5
    assert embedded(lanes, "bulk") - bulk == 40


def _import_in_bulk(address: str, store: str, rounds: int) -> None:
    """Imports of 2,000 entries with vectors of 384 dimensions (one call, four parts), then adds of 2,000,
    from a process of their own: building them takes the interpreter, which in the test's process would hold
    up the checks it times."""
    rng = random.Random(os.getpid())
    parts = [
        [
            memory_pb2.Memory(
                id=f"{store}-{part}-{n}", store=store, content=f"bulk {n}", vector=[rng.random() for _ in range(384)]
            )
            for n in range(500)
        ]
        for part in range(4)
    ]
    with Client(address, timeout=120) as cf:
        for _ in range(rounds):
            imported = cf.import_memories(memory_pb2.ImportMemoriesRequest(memories=memories) for memories in parts)
            assert imported.added_count + imported.unchanged_count == 2000
        for half in range(2):  # 1,000 entries, the most one add takes
            added = cf.add_memories(
                store,
                [{"content": f"added {half}-{n}", "vector": [rng.random() for _ in range(384)]} for n in range(1000)],
            )
            assert len(added) == 1000


def test_a_bulk_import_and_a_bulk_add_of_2000_entries_leave_health_answering_without_a_stall(
    lanes: ServerProcess,
) -> None:
    """Health is checked again and again while a bulk worker imports 2,000 entries three times and adds 2,000.
    The bound is loose (no stall of a quarter second: one check of 56 ms among 335 on a loaded machine is noise,
    not a wait behind bulk work); `make bench` (bench/tenants.py) reports health's p99 against its 50 ms target."""
    store = unique("bulk")
    with Client(lanes.address, timeout=60) as cf:
        cf.create_store(store)
    importer = multiprocessing.get_context("spawn").Process(target=_import_in_bulk, args=(lanes.address, store, 3))
    waits: list[float] = []
    with grpc.insecure_channel(lanes.address) as channel:
        health = health_pb2_grpc.HealthStub(channel)
        health.Check(health_pb2.HealthCheckRequest(), timeout=10)
        importer.start()
        while importer.is_alive():
            started = time.perf_counter()
            health.Check(health_pb2.HealthCheckRequest(), timeout=10)
            waits.append(time.perf_counter() - started)
            time.sleep(0.005)
    importer.join()
    assert importer.exitcode == 0
    with Client(lanes.address, timeout=60) as cf:
        assert len(list(cf.list_memories(store, page_size=1000))) == 4000
    assert len(waits) > 20 and max(waits) < STALL, sorted(round(wait * 1000, 1) for wait in waits)[-10:]


def test_bulk_work_runs_at_a_lower_cpu_priority_its_database_sessions_too(lanes: ServerProcess) -> None:
    supervisor = psutil.Process(lanes.process.pid)
    workers, bulk = server_processes(supervisor)
    assert len(bulk) == 1 and len(workers) >= 1 and bulk[0].nice() == 10
    # Every thread of the bulk worker, the model's among them, at its priority.
    assert {psutil.Process(thread.id).nice() for thread in bulk[0].threads()} == {10}
    sessions = [p for p, command in live_children(supervisor, recursive=True) if command.startswith("postgres: ")]
    assert {p.nice() for p in sessions} >= {0, 10}


def test_a_bulk_worker_that_dies_is_replaced_and_queries_are_served_meanwhile(lanes: ServerProcess) -> None:
    store = unique("replaced")
    with Client(lanes.address, timeout=60) as cf:
        cf.create_store(store)
        cf.add_memories(store, ["The user's sister is called Ana"])
        _, (bulk,) = server_processes(psutil.Process(lanes.process.pid))
        bulk.send_signal(signal.SIGKILL)
        bulk.wait(10)
        result = cf.inject([user("What is my sister called?")], stores=[store])
        assert result.report.injected
        # The client retries UNAVAILABLE; the bulk call is served by the bulk worker that replaced it.
        added = wait_for(lambda: cf.add_memories(store, ["The user's brother is called Rui"]), 60, what="an add")
        assert added[0].content == "The user's brother is called Rui"
    assert re.search(r"bulk worker=<0> exit_code=<-9> \| a bulk worker died \| starting another", lanes.log())


def test_a_statement_cut_by_the_callers_deadline_is_deadline_exceeded_and_erases_nothing(
    lanes: ServerProcess,
) -> None:
    rng = random.Random(11)
    store = unique("heavy")
    with Client(lanes.address, timeout=60) as cf:
        cf.create_store(store, dimension=8)
        for batch in range(80):
            blob = "".join(rng.choices("abcdefghijklmnopqrstuvwxyz0123456789", k=15_000))
            entries = [
                {"content": f"entry {batch}-{n}", "vector": [1.0] * 8, "metadata": {"blob": blob[n:]}}
                for n in range(20)
            ]
            cf.add_memories(store, entries)
        # Each condition reads every entry's 15 KB again: well past the 50 ms a 100 ms deadline leaves it.
        heavy = {"any": [{f"k{n}": {"gte": n}} for n in range(64)]}
        with Client(lanes.address, timeout=0.1) as hurried, pytest.raises(DeadlineExceeded) as cut:
            hurried.erase_memories(stores=[store], filter=heavy)
        # Said by the server, which cut its statement before the caller gave up, not by the caller's library.
        assert cut.value.reason == "DEADLINE_EXCEEDED", cut.value
        assert len(list(cf.list_memories(store, page_size=1000))) == 1600


def test_the_next_free_connection_goes_to_the_tenant_that_holds_the_fewest() -> None:
    async def run() -> list[str]:
        turns = _TenantTurns(size=2, per_tenant=None, timeout=5.0)
        served: list[str] = []
        release = {name: asyncio.Event() for name in ("a1", "a2", "a3", "a4", "b1")}

        async def caller(name: str) -> None:
            async with turns.turn(name[0]):
                served.append(name)
                await release[name].wait()

        tasks = [asyncio.create_task(caller(name)) for name in ("a1", "a2", "a3", "a4")]
        await asyncio.sleep(0)
        tasks.append(asyncio.create_task(caller("b1")))
        await asyncio.sleep(0)
        assert served == ["a1", "a2"]
        release["a1"].set()
        await asyncio.sleep(0.01)
        # Tenant a's two waiters came first; b, holding none, has the connection a gave back.
        assert served == ["a1", "a2", "b1"]
        for event in release.values():
            event.set()
        await asyncio.gather(*tasks)
        return served

    assert asyncio.run(run()) == ["a1", "a2", "b1", "a3", "a4"]


def test_a_tenant_past_its_share_of_connections_waits_while_another_is_served() -> None:
    async def run() -> None:
        turns = _TenantTurns(size=4, per_tenant=2, timeout=0.2)
        held = threading.Event()
        async with turns.turn("a"), turns.turn("a"):
            held.set()
            async with turns.turn("b"):
                pass
            with pytest.raises(TimeoutError, match="its share"):
                async with turns.turn("a"):
                    pass
        assert held.is_set()

    asyncio.run(run())


def test_the_bulk_workers_socket_folder_is_the_servers_own(lanes: ServerProcess) -> None:
    folders = {Path(path).parent for path in re.findall(r"(/\S+/bulk-\d+\.sock)", _open_files(lanes))}
    assert folders, "no bulk worker socket found"
    for folder in folders:
        assert folder.stat().st_mode & 0o077 == 0, oct(folder.stat().st_mode)


def _open_files(server: ServerProcess) -> str:
    sockets = []
    for child in psutil.Process(server.process.pid).children(recursive=True):
        try:
            sockets += [connection.laddr for connection in child.net_connections(kind="unix")]
        except psutil.Error:
            continue
    return " ".join(str(address) for address in sockets)


def test_a_bulk_workers_unexpected_error_reaches_the_caller_as_internal_and_an_absent_one_as_unavailable(
    tmp_path: Path,
) -> None:
    """A bug in a bulk call (a servicer that raises, behind the bulk worker's own interceptor on a real gRPC
    socket) ends the caller's call INTERNAL, as it would on the worker, not UNAVAILABLE: retrying a bug
    does not mend it. A bulk worker that cannot be reached is still UNAVAILABLE, retry."""

    async def failing(request: memory_pb2.AddMemoriesRequest, context: grpc.aio.ServicerContext) -> None:
        raise RuntimeError("a bug")

    async def forwarded() -> tuple[Relayed, Unavailable]:
        method = grpc.unary_unary_rpc_method_handler(
            failing,
            request_deserializer=memory_pb2.AddMemoriesRequest.FromString,
            response_serializer=memory_pb2.AddMemoriesResponse.SerializeToString,
        )
        server = grpc.aio.server(interceptors=[BulkCalls()])
        server.add_generic_rpc_handlers(
            (grpc.method_handlers_generic_handler("contextfold.v1.MemoryService", {"AddMemories": method}),)
        )
        server.add_insecure_port(f"unix:{tmp_path / 'bulk.sock'}")
        await server.start()
        lane, absent = (
            BulkLane([str(tmp_path / "bulk.sock")], 4 << 20),
            BulkLane([str(tmp_path / "none.sock")], 4 << 20),
        )
        try:
            with pytest.raises(Relayed) as relayed:
                await lane.unary("/contextfold.v1.MemoryService/AddMemories", b"", 5)
            with pytest.raises(Unavailable) as unavailable:
                await absent.unary("/contextfold.v1.MemoryService/AddMemories", b"", 0.5)
            return relayed.value, unavailable.value
        finally:
            await lane.close()
            await absent.close()
            await server.stop(None)

    relayed, unavailable = asyncio.run(forwarded())
    assert relayed.code is grpc.StatusCode.INTERNAL, relayed.code
    assert relayed.details == "internal error; the server log has the details"
    assert "BULK_WORKER_UNAVAILABLE" in str(unavailable.details())
