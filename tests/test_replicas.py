"""Read replicas: a primary and a streaming standby, both the embedded Postgres, set up here
(`pg_basebackup -R`), and a server pointed at both.

Searches are answered by the replica (its own statistics count them) and writes land on the
primary; a caller reads its own writes while the replica's replay is paused (its token sends it to
the primary), while another caller, with no token, reads the replica; a replica further behind
than the bound is not read; a replica that stops leaves the primary to answer, and is read again
when it returns.
"""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from contextfold import Client
from contextfold.v1 import memory_pb2, memory_pb2_grpc
from contextfold_server.postgres.consistency import ReadAfterTokens, lsn_value

from harness.messages import unique
from harness.polling import wait_for
from harness.servers import Postgres, ServerProcess, sample, start_server

from .conftest import run_in_typescript_package
from .test_go import GO_CLIENT, IMPORT_PATH, go, gopath_env

# Long enough for a client's test suite to start and run within it while replay is paused.
MAX_LAG = 6.0


@pytest.fixture(scope="module")
def primary(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Postgres]:
    database = Postgres(tmp_path_factory.mktemp("replication") / "primary")
    yield database
    database.cleanup()


@pytest.fixture(scope="module")
def standby(primary: Postgres, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Postgres]:
    database = primary.standby(tmp_path_factory.mktemp("replication-standby") / "standby")
    assert database.query("SELECT pg_is_in_recovery()") == [(True,)]
    yield database
    database.cleanup()


@pytest.fixture(scope="module")
def server(primary: Postgres, standby: Postgres, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    log = tmp_path_factory.mktemp("replicated-server") / "server.log"
    process = start_server(
        log,
        "--database-url", primary.url,
        "--database-read-url", standby.url,
        "--replica-check-seconds", "0.2",
        "--replica-max-lag-seconds", str(MAX_LAG),
    )  # fmt: skip
    yield process
    assert process.stop() == 0, process.log()


def memories_read(database: Postgres) -> int:
    """How many times `database` read the entries table, by its own statistics."""
    ((count,),) = database.query(
        "SELECT coalesce(sum(coalesce(seq_scan, 0) + coalesce(idx_scan, 0)), 0)::bigint"
        " FROM pg_stat_all_tables WHERE schemaname = 'contextfold' AND relname = 'memories'"
    )
    return count


@pytest.fixture
def store(server: ServerProcess, standby: Postgres) -> str:
    name = unique("replicated")
    with Client(server.address, timeout=10) as cf:
        cf.create_store(name)
        cf.add_memories(name, ["The office is in Lisbon", "Standup is at ten"])
    # Replayed on the standby, and seen there by the server's checks.
    served_by_the_replica(server, name, 15, "the replica to serve the store")
    return name


def fresh_search(server: ServerProcess, store: str, query: str = "where is the office") -> tuple[str, list[str]]:
    """A search by a caller that has written nothing (no token): the database that answered, and what it found."""
    with grpc.insecure_channel(server.address) as channel:
        response = memory_pb2_grpc.MemoryServiceStub(channel).SearchMemories(
            memory_pb2.SearchMemoriesRequest(query=query, stores=[store], max_results=10), timeout=10
        )
    return response.database, [result.memory.content for result in response.results]


def asked(cf: Client, store: str, question: str) -> tuple[str, list[str]]:
    """Inject through the client (which sends its token): the database that answered, and the ids injected."""
    result = cf.inject([{"role": "user", "content": [{"text": question}]}], stores=[store], max_entries=10)
    return result.report.database, [entry.id for entry in result.report.entries]


def lag_metric(server: ServerProcess) -> float:
    return sample(server.scrape(), "contextfold_replica_lag_seconds", replica="replica-1")


def served_by_the_replica(server: ServerProcess, store: str, timeout: float, what: str) -> None:
    """Wait until a caller with no token is answered by the replica: it is caught up, and checked. (A
    replica that has not replayed the store's creation yet answers that it does not exist.)"""

    def answered_by_the_replica() -> bool:
        try:
            return fresh_search(server, store)[0] == "replica-1"
        except grpc.RpcError as error:
            if error.code() != grpc.StatusCode.NOT_FOUND:  # type: ignore[attr-defined]
                raise
            return False

    wait_for(answered_by_the_replica, timeout, what=what)


@contextlib.contextmanager
def paused_replay(standby: Postgres, server: ServerProcess, store: str, timeout: float = 20) -> Iterator[None]:
    """Replay paused on the standby, once the replica is caught up and read; resumed, and caught up, after."""
    served_by_the_replica(server, store, timeout, "the replica to catch up")
    standby.query("SELECT pg_wal_replay_pause()")
    try:
        yield
    finally:
        standby.query("SELECT pg_wal_replay_resume()")
    served_by_the_replica(server, store, timeout, "the replica to catch up")


def test_searches_are_answered_by_the_replica_and_writes_land_on_the_primary(
    server: ServerProcess, primary: Postgres, standby: Postgres, store: str
) -> None:
    before = memories_read(standby)
    for _ in range(5):
        database, found = fresh_search(server, store)
        assert database == "replica-1" and found[0] == "The office is in Lisbon"
    wait_for(lambda: memories_read(standby) >= before + 5, 10, what="the standby's statistics to count the reads")

    with Client(server.address, timeout=10) as cf:
        (added,) = cf.add_memories(store, ["Lunch is at one"])
    assert primary.query("SELECT content FROM contextfold.memories WHERE id = %s", (added.id,)) == [
        ("Lunch is at one",)
    ]
    # A standby takes no writes: it has the entry only by replaying the primary's.
    wait_for(
        lambda: standby.query("SELECT count(*) FROM contextfold.memories WHERE id = %s", (added.id,)) == [(1,)],
        10,
        what="the standby to replay the write",
    )


def test_a_caller_reads_its_own_writes_while_replication_is_paused(
    server: ServerProcess, standby: Postgres, store: str
) -> None:
    with paused_replay(standby, server, store, timeout=15), Client(server.address, timeout=10) as writer:
        (moved,) = writer.add_memories(store, ["The office moved to Porto"])
        # The client sends the token its write returned: the replica has not replayed that far.
        database, injected = asked(writer, store, "Where is the office now?")
        assert database == "primary" and moved.id in injected
        # Another caller, who wrote nothing, is served by the replica, which has not replayed it yet.
        database, contents = fresh_search(server, store, "where is the office now")
        assert database == "replica-1" and "The office moved to Porto" not in contents

        # Past the bound, the replica is read by no one until it catches up.
        wait_for(lambda: lag_metric(server) > MAX_LAG, 15, what="the lag to pass the bound")
        database, contents = fresh_search(server, store, "where is the office now")
        assert database == "primary" and "The office moved to Porto" in contents
    assert lag_metric(server) < MAX_LAG


def test_reads_fall_back_to_the_primary_while_the_replica_is_down_and_return_to_it(
    server: ServerProcess, standby: Postgres, store: str
) -> None:
    standby.kill()
    try:
        for _ in range(3):
            database, found = fresh_search(server, store)
            assert database == "primary" and found[0] == "The office is in Lisbon"
        with Client(server.address, timeout=10) as cf:
            database, injected = asked(cf, store, "Where is the office?")
        assert database == "primary" and injected
    finally:
        standby.restart()
    served_by_the_replica(server, store, 20, "the replica to be read again")
    assert "read replica in use" in server.log()


def test_a_token_that_is_not_one_is_refused_naming_the_header(server: ServerProcess) -> None:
    with grpc.insecure_channel(server.address) as channel:
        stub = memory_pb2_grpc.MemoryServiceStub(channel)
        with pytest.raises(grpc.RpcError) as refused:
            stub.ListStores(
                memory_pb2.ListStoresRequest(), metadata=(("x-contextfold-read-after", "yesterday"),), timeout=10
            )
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "x-contextfold-read-after" in refused.value.details()


def written_token(server: ServerProcess, store: str, contents: list[str]) -> str:
    """The read-after token an add of `contents` answers with (the trailer, as any client reads it)."""
    with grpc.insecure_channel(server.address) as channel:
        memories = [memory_pb2.Memory(content=content) for content in contents]
        request = memory_pb2.AddMemoriesRequest(store=store, memories=memories)
        _, call = memory_pb2_grpc.MemoryServiceStub(channel).AddMemories.with_call(request, timeout=30)
    (token,) = [value for key, value in call.trailing_metadata() if key == "x-contextfold-read-after"]
    return token


def tokens_of(primary: Postgres) -> ReadAfterTokens:
    """Read-after tokens as the server makes them: sealed with its secret, read off its database."""
    ((secret,),) = primary.query("SELECT value FROM contextfold.service_secrets WHERE name = 'page_tokens'")
    return ReadAfterTokens(bytes(secret))


def search_with(server: ServerProcess, store: str, token: str) -> str:
    """The database that answered a search sent with `token`."""
    with grpc.insecure_channel(server.address) as channel:
        response = memory_pb2_grpc.MemoryServiceStub(channel).SearchMemories(
            memory_pb2.SearchMemoriesRequest(query="where is the office", stores=[store], max_results=5),
            metadata=(("x-contextfold-read-after", token),),
            timeout=10,
        )
    return response.database


def test_a_token_reveals_nothing_of_the_writes_between_two_of_them(
    server: ServerProcess, primary: Postgres, store: str
) -> None:
    started = time.time()
    first = written_token(server, store, ["The printer is on the second floor"])
    lsn = primary.query("SELECT pg_current_wal_lsn()::text")[0][0]
    # Another writer's 200 entries: hundreds of kilobytes of the primary's log between two of the tokens.
    with Client(server.address, timeout=60) as other:
        other.add_memories(store, [f"Another caller's note {n}" for n in range(200)])
    second = written_token(server, store, ["The printer moved to the third floor"])
    third = written_token(server, store, ["The printer is back on the second floor"])
    assert len(first) == len(second) == len(third) == 75
    # What a token shows is the primary's clock (microseconds): not a position in its log.
    for token in (first, second, third):
        assert started - 60 < int(token[:16], 16) / 1e6 < time.time() + 60
        assert lsn_value(lsn).to_bytes(8, "big").hex() not in token and lsn.split("/")[1].lower() not in token.lower()
    assert first < second < third
    assert int(third[:16], 16) - int(first[:16], 16) < (time.time() - started + 1) * 1e6


def test_a_token_of_another_namespace_or_not_made_by_the_service_is_refused(
    server: ServerProcess, primary: Postgres, store: str
) -> None:
    elsewhere = tokens_of(primary).token("another-tenant", 1 << 40, int(time.time() * 1e6))
    ours = written_token(server, store, ["The kitchen closes at three"])
    forged = ours[:-4] + ("AAAA" if not ours.endswith("AAAA") else "BBBB")
    for token in (elsewhere, forged):
        with pytest.raises(grpc.RpcError) as refused:
            search_with(server, store, token)
        assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "x-contextfold-read-after" in refused.value.details()


def test_a_token_past_what_the_primary_reached_is_capped_and_pins_no_read_to_it(
    server: ServerProcess, primary: Postgres, store: str
) -> None:
    ((now,),) = primary.query("SELECT (extract(epoch FROM clock_timestamp()) * 1000000)::bigint")
    # A position the primary never reached (as a standby promoted before it replayed a write would see).
    unreached = tokens_of(primary).token("~open", (1 << 64) - 1, int(now))
    # Once a check after the token's time finds the primary short of it, the token asks no more than that.
    wait_for(lambda: search_with(server, store, unreached) == "replica-1", 15, what="the replica to serve the token")
    # A token of earlier releases, the position in clear, is read as none: it pins nothing either.
    assert search_with(server, store, "ffffffffffffffff") == "replica-1"


def test_the_replica_never_receives_ddl(standby: Postgres, server: ServerProcess) -> None:
    """The server migrated the primary, which the standby replays; nothing failed on the standby."""
    log = standby.log()
    assert "read-only transaction" not in log and "ERROR" not in log, log[-2000:]


def test_the_typescript_and_go_clients_send_the_token_their_writes_returned(
    server: ServerProcess, standby: Postgres, store: str, typescript_package: Path, tmp_path: Path
) -> None:
    env = {**os.environ, "CONTEXTFOLD_ADDRESS": server.address, "CONTEXTFOLD_REPLICATED": "1"}
    with paused_replay(standby, server, store):
        output = run_in_typescript_package(
            "node", "--import", "tsx", "--test", "--test-reporter", "spec",
            "--test-name-pattern", "reads its own writes while the replica lags", "test/client.test.ts",
            env=env, timeout=300,
        )  # fmt: skip
    assert re.search(r"^\S+ pass 1$", output, flags=re.M) and re.search(r"^\S+ fail 0$", output, flags=re.M), output

    # Built before replay pauses: a build on a cold cache could outlast the lag a replica may have, and
    # the paused window must hold the test's calls alone.
    binary = tmp_path / "contextfold.test"
    go({**gopath_env(tmp_path / "gopath"), **env}, "test", "-c", "-o", str(binary), IMPORT_PATH)
    with paused_replay(standby, server, store):
        done = subprocess.run(
            [str(binary), "-test.count=1", "-test.v", "-test.run", "TestAClientReadsItsOwnWritesWhileTheReplicaLags"],
            cwd=GO_CLIENT, env=env, capture_output=True, text=True, timeout=300,
        )  # fmt: skip
    assert "--- PASS: TestAClientReadsItsOwnWritesWhileTheReplicaLags" in done.stdout, done.stdout + done.stderr
