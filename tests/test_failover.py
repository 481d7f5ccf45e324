"""When the primary fails: a primary and a streaming standby (the embedded Postgres, as the replica
tests build them) with synchronous replication, a server whose URL names both hosts
(`target_session_attrs` is the server's: read-write), and 8 callers mixing adds with ids, `Inject`
and searches while the primary is killed (SIGKILL, every process of it) or stopped cleanly, and the
standby promoted as an operator would (`pg_promote()`, as `pg_ctl promote` asks).

What must hold: every add that was acknowledged is on the new primary afterwards; no call answers
INTERNAL (or anything but OK and UNAVAILABLE, the retryable answer docs/deploy.md promises for the
switch); every `Inject` answers (folded, or failed open with its reason); writes come back within
5 s of the promotion; no `Inject` waits a second; health says SERVING once writes are back. The seconds
without writes are printed.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import pytest
from contextfold import Client
from contextfold.errors import from_rpc_error
from contextfold.v1 import conversation_pb2, injection_pb2, injection_pb2_grpc, memory_pb2, memory_pb2_grpc

from harness.messages import unique
from harness.polling import wait_for
from harness.servers import Postgres, ServerProcess, health_status, start_server

from .conftest import MEASURED

CALLERS = 8
# Each caller's deadline for a call: an `Inject` fails open well within it.
CALL_SECONDS = 5.0
# Load before the primary fails, the seconds it is gone before an operator promotes the standby, and load after.
BEFORE, GONE, AFTER = 3.0, 3.0, 8.0
# What the docs promise: writes are taken again within this of the promotion.
WRITES_BACK_WITHIN = 5.0


@dataclass
class Calls:
    """What the callers saw: each call's kind, when it ended and its status; the ids whose adds were OK."""

    ended: list[tuple[str, float, grpc.StatusCode]] = field(default_factory=list)
    inject_seconds: list[float] = field(default_factory=list)
    acknowledged: list[str] = field(default_factory=list)
    injects_failed_open: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def note(self, kind: str, code: grpc.StatusCode) -> None:
        with self.lock:
            self.ended.append((kind, time.monotonic(), code))

    def codes(self) -> Counter[tuple[str, str]]:
        return Counter((kind, code.name) for kind, _, code in self.ended)

    def writes_ok(self) -> list[float]:
        return [at for kind, at, code in self.ended if kind == "add" and code == grpc.StatusCode.OK]


@pytest.fixture
def primary(fresh_postgres: Postgres) -> Postgres:
    return fresh_postgres


@pytest.fixture
def standby(primary: Postgres, tmp_path: Path) -> Iterator[Postgres]:
    database = primary.standby(tmp_path / "standby")
    # Synchronous replication, set on the primary once its copy is made (a standby holding the setting
    # would, once promoted, wait for a standby of its own): an OK means the standby has the write.
    primary.query("ALTER SYSTEM SET synchronous_standby_names = '*'")
    primary.query("SELECT pg_reload_conf()")
    wait_for(
        lambda: primary.query("SELECT sync_state FROM pg_stat_replication") == [("sync",)],
        30,
        what="the standby to be synchronous",
    )
    yield database
    database.cleanup()


@pytest.fixture
def server(primary: Postgres, standby: Postgres, tmp_path: Path) -> Iterator[ServerProcess]:
    both = f"postgresql://postgres:@/postgres?host={primary.socket_dir},{standby.socket_dir}"
    process = start_server(
        tmp_path / "server.log",
        "--database-url", both,
        "--database-read-url", standby.url,
        "--replica-check-seconds", "0.2",
    )  # fmt: skip
    yield process
    assert process.stop() == 0, process.log()


def _code(error: grpc.RpcError) -> grpc.StatusCode:
    return error.code()  # type: ignore[attr-defined,no-any-return]


def _called(calls: Calls, kind: str, method: Callable[..., Any], request: Any) -> Any:
    """One call, its status noted as `kind`'s: its response, or None when it failed."""
    try:
        response = method(request, timeout=CALL_SECONDS)
    except grpc.RpcError as error:
        calls.note(kind, _code(error))
        return None
    calls.note(kind, grpc.StatusCode.OK)
    return response


def _caller(number: int, address: str, store: str, stop: threading.Event, calls: Calls) -> None:
    """Add an entry with an id, ask through `Inject`, search; again until `stop`."""
    question = conversation_pb2.Message(role=conversation_pb2.ROLE_USER, content=[{"text": "Where is the office?"}])
    asked = injection_pb2.InjectRequest(messages=[question])
    asked.memory.stores.append(store)
    search = memory_pb2.SearchMemoriesRequest(query="office", stores=[store], max_results=5)
    with grpc.insecure_channel(address) as channel:
        memory, inject = memory_pb2_grpc.MemoryServiceStub(channel), injection_pb2_grpc.InjectionServiceStub(channel)
        turn = 0
        while not stop.is_set():
            entry_id = f"caller-{number}-{turn}"
            add = memory_pb2.AddMemoriesRequest(
                store=store, memories=[memory_pb2.Memory(id=entry_id, content=f"Caller {number} wrote note {turn}")]
            )
            if _called(calls, "add", memory.AddMemories, add) is not None:
                with calls.lock:
                    calls.acknowledged.append(entry_id)
            started = time.monotonic()
            if (answered := _called(calls, "inject", inject.Inject, asked)) is not None:
                failed_open = any(s.skip_reason == injection_pb2.SKIP_REASON_FAILED for s in answered.report.sources)
                with calls.lock:
                    calls.inject_seconds.append(time.monotonic() - started)
                    calls.injects_failed_open += failed_open
            _called(calls, "search", memory.SearchMemories, search)
            turn += 1
            time.sleep(0.02)


def _switch(
    server: ServerProcess, primary: Postgres, standby: Postgres, stop_primary: Callable[[], None]
) -> tuple[Calls, float, str]:
    """The callers at work while `stop_primary` ends the primary and the standby is promoted: what they saw,
    the time of the promotion, and the store they wrote to."""
    store = unique("failover")
    with Client(server.address, timeout=30) as cf:
        cf.create_store(store)
        cf.add_memories(store, [{"id": unique("office"), "content": "The office is in Lisbon"}])
    calls, stop = Calls(), threading.Event()
    callers = [
        threading.Thread(target=_caller, args=(number, server.address, store, stop, calls), daemon=True)
        for number in range(CALLERS)
    ]
    for caller in callers:
        caller.start()
    try:
        time.sleep(BEFORE)
        stop_primary()
        time.sleep(GONE)
        standby.promote()
        promoted = time.monotonic()
        time.sleep(AFTER)
    finally:
        stop.set()
        for caller in callers:
            caller.join(CALL_SECONDS * 3 + 5)
    return calls, promoted, store


def _holds(calls: Calls, promoted: float, standby: Postgres, server: ServerProcess, what: str) -> None:
    """Every acknowledged add is on the new primary, every call answered OK or UNAVAILABLE, and writes came
    back within `WRITES_BACK_WITHIN` of the promotion (printed with the gap around the switch)."""
    codes = calls.codes()
    assert set(code for _, code in codes) <= {"OK", "UNAVAILABLE"}, codes
    # Every Inject answered: folded, or failed open, none refused.
    assert codes[("inject", "UNAVAILABLE")] == 0, codes
    acknowledged = list(calls.acknowledged)
    assert len(acknowledged) > CALLERS, codes
    found = standby.query("SELECT id FROM contextfold.memories WHERE id = ANY(%s)", (acknowledged,))
    stored = {entry_id for (entry_id,) in found}
    assert sorted(set(acknowledged) - stored) == [], "acknowledged adds lost"
    writes = calls.writes_ok()
    back = min(at for at in writes if at > promoted) - promoted
    before = [at for at in writes if at < promoted]
    gap = min(at for at in writes if at > promoted) - max(before)
    MEASURED.append(
        f"failover, {what}: {len(acknowledged)} adds acknowledged, all on the new primary; writes back"
        f" {back:.2f} s after the promotion, {gap:.2f} s without writes in all; calls {dict(sorted(codes.items()))};"
        f" Injects failed open {calls.injects_failed_open}, the slowest Inject {max(calls.inject_seconds):.2f} s"
    )
    assert back <= WRITES_BACK_WITHIN, f"writes came back {back:.2f} s after the promotion"
    # No model call waits for the database: an Inject answers at once, folded or failed open.
    assert max(calls.inject_seconds) < 1.0
    assert health_status(server.address) == "SERVING"


@pytest.mark.parametrize(
    ("stop", "what"),
    [("crash", "primary killed (SIGKILL)"), ("kill", "primary stopped cleanly")],
    ids=["killed", "planned"],
)
def test_a_primary_lost_or_switched_over_loses_no_acknowledged_add_and_no_call_waits(
    server: ServerProcess, primary: Postgres, standby: Postgres, stop: str, what: str
) -> None:
    """Killed (SIGKILL) or stopped cleanly for a planned switchover: no call answers beyond the retryable
    ones the docs name."""
    calls, promoted, _ = _switch(server, primary, standby, getattr(primary, stop))
    _holds(calls, promoted, standby, server, what)
    assert "Traceback" not in server.log()


@pytest.fixture
def lone(fresh_postgres: Postgres) -> Postgres:
    return fresh_postgres


def _add(address: str, store: str) -> tuple[str, str | None]:
    """One add, tried once: its status and reason."""
    with grpc.insecure_channel(address) as channel:
        request = memory_pb2.AddMemoriesRequest(
            store=store, memories=[memory_pb2.Memory(id=unique("note"), content="A note written now")]
        )
        try:
            memory_pb2_grpc.MemoryServiceStub(channel).AddMemories(request, timeout=CALL_SECONDS)
        except grpc.RpcError as error:
            refused = from_rpc_error(error)
            return refused.code.name, refused.reason
    return "OK", None


def test_a_primary_that_turns_read_only_is_left_and_writes_return_when_one_takes_them(
    lone: Postgres, tmp_path: Path
) -> None:
    """A primary demoted under the server (here: every transaction read-only by default, as a demoted
    primary's are) refuses writes with read_only_sql_transaction: each is UNAVAILABLE, never INTERNAL;
    an `Inject` answers at once (reads are still served); the server takes writes again, with new
    connections, once the database does (the old ones would have refused writes for as long as they
    lived)."""
    server = start_server(tmp_path / "server.log", "--database-url", lone.url)
    try:
        store = unique("demoted")
        with Client(server.address, timeout=30) as cf:
            cf.create_store(store)
            assert _add(server.address, store) == ("OK", None)
            lone.query("ALTER SYSTEM SET default_transaction_read_only = on")
            lone.query("SELECT pg_reload_conf()")
            # The first write says why; the next ones are refused at once while no database takes writes.
            refused = [_add(server.address, store) for _ in range(5)]
            assert refused[0] == ("UNAVAILABLE", "PRIMARY_READ_ONLY"), refused
            assert set(refused[1:]) == {("UNAVAILABLE", "DEPENDENCY_UNAVAILABLE")}, refused
            started = time.monotonic()
            # Answered at once: from the read-only database, which still serves reads, or failed open.
            cf.inject([{"role": "user", "content": [{"text": "Any notes?"}]}], stores=[store])
            assert time.monotonic() - started < 1.0
            lone.query("ALTER SYSTEM RESET default_transaction_read_only")
            lone.query("SELECT pg_reload_conf()")
            wait_for(lambda: _add(server.address, store) == ("OK", None), 5, what="writes to be taken again")
        assert "Traceback" not in server.log()
    finally:
        assert server.stop() == 0, server.log()


def test_health_says_not_serving_while_no_database_answers_and_serving_once_one_does(
    lone: Postgres, tmp_path: Path
) -> None:
    """With its only database gone (stopped), a call finds it unreachable: health says NOT_SERVING, an
    `Inject` still answers at once (failed open, saying why); once the database is back, health says
    SERVING and writes are taken, without a restart."""
    server = start_server(tmp_path / "server.log", "--database-url", lone.url)
    try:
        store = unique("gone")
        with Client(server.address, timeout=30) as cf:
            cf.create_store(store)
            lone.kill()
            started = time.monotonic()
            result = cf.inject([{"role": "user", "content": [{"text": "Any notes?"}]}], stores=[store])
            assert time.monotonic() - started < 1.0
            assert not result.injected
            (memory,) = [source for source in result.report.sources if source.source == "memory"]
            assert memory.skip_reason == injection_pb2.SKIP_REASON_FAILED
            assert "database unavailable" in memory.detail
            wait_for(lambda: health_status(server.address) == "NOT_SERVING", 5, what="health to say NOT_SERVING")
            lone.restart()
            wait_for(lambda: health_status(server.address) == "SERVING", 10, what="health to say SERVING")
            # The bulk worker that adds finds its connections lost on its first add, as a retrying client would.
            wait_for(lambda: _add(server.address, store) == ("OK", None), 5, what="writes to be taken again")
        assert "Traceback" not in server.log()
    finally:
        assert server.stop() == 0, server.log()
