"""One tenant never stalls another: each has a share of the calls in flight, streams that move
nothing are ended, a call that sets no deadline still has one, and the work of one tenant's
heaviest calls is done in turns with another's."""

from __future__ import annotations

import random
import statistics
import threading
import time
from collections.abc import Iterator

import grpc
import pytest
from contextfold import Client, ResourceExhausted
from contextfold.v1 import memory_pb2, memory_pb2_grpc
from google.rpc import error_details_pb2
from grpc_status import rpc_status

from harness.heavy_requests import a_hundred_long_entries, long_entries, probing
from harness.messages import unique, user
from harness.polling import wait_for
from harness.servers import Postgres, ServerProcess, health_status, provider_fixtures, sample, start_server

from .test_tenancy import keys, works

SHARE = 3
# A stall no call should see, however loaded the machine (`make bench` has the targets).
STALL = 0.25
IDLE = 3.0
USAGE = "contextfold_tenant_usage_total"


@pytest.fixture(scope="module")
def providers() -> Iterator[dict[str, int]]:
    with provider_fixtures() as ports:
        yield ports


@pytest.fixture(scope="module")
def shared(postgres: Postgres, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    process = start_server(
        tmp_path_factory.mktemp("fairness") / "server.log",
        "--database-url", postgres.url, "--auth", "keys",
        "--max-in-flight", "16", "--max-in-flight-per-tenant", str(SHARE),
        "--stream-idle-seconds", str(IDLE), "--max-call-seconds", "1.5",
    )  # fmt: skip
    yield process
    assert process.stop() == 0, process.log()


@pytest.fixture(scope="module")
def tenants(shared: ServerProcess, postgres: Postgres) -> Iterator[tuple[str, str]]:
    flooding = keys(postgres.url, "create", "--namespace", "flooding", "--role", "admin")["key"]
    bystander = keys(postgres.url, "create", "--namespace", "bystander", "--role", "admin")["key"]
    for key in (flooding, bystander):
        with Client(shared.address, api_key=key, timeout=30) as cf:
            wait_for(lambda cf=cf: works(cf), 10, what="the key to work")
            cf.create_store("notes")
            cf.add_memories("notes", [{"id": "n1", "content": "The user drinks green tea"}])
    yield flooding, bystander


class IdleImports:
    """Import streams that send nothing: each holds a call's slot until the server ends it."""

    def __init__(self, address: str, key: str) -> None:
        self._channel = grpc.insecure_channel(address)
        self._stub = memory_pb2_grpc.MemoryServiceStub(self._channel)
        self._key = key
        self._release = threading.Event()
        self.calls: list[grpc.Future] = []

    def _nothing(self) -> Iterator[memory_pb2.ImportMemoriesRequest]:
        self._release.wait(60)
        return
        yield

    def open(self, count: int) -> None:
        metadata = (("authorization", f"Bearer {self._key}"),)
        self.calls += [self._stub.ImportMemories.future(self._nothing(), metadata=metadata) for _ in range(count)]

    def __enter__(self) -> IdleImports:
        return self

    def __exit__(self, *exc: object) -> None:
        self._release.set()
        self._channel.close()


def test_a_tenant_at_its_share_is_refused_with_the_limit_named_and_the_others_are_served(
    shared: ServerProcess, tenants: tuple[str, str]
) -> None:
    flooding, bystander = tenants
    with IdleImports(shared.address, flooding) as idle:
        idle.open(SHARE)
        wait_for(lambda: sample(shared.scrape(), "contextfold_calls_in_flight") >= SHARE, 10, what="the streams")
        with Client(shared.address, api_key=flooding, timeout=10) as own, pytest.raises(ResourceExhausted) as refused:
            own.get_memory("n1")
        assert refused.value.reason == "TENANT_CALLS_IN_FLIGHT"
        with grpc.insecure_channel(shared.address) as channel:
            try:
                memory_pb2_grpc.MemoryServiceStub(channel).GetMemory(
                    memory_pb2.GetMemoryRequest(id="n1"), metadata=(("authorization", f"Bearer {flooding}"),)
                )
            except grpc.RpcError as error:
                details = {type(detail).__name__: detail for detail in _details(error)}
        assert details["QuotaFailure"].violations[0].subject == "namespace:flooding"
        assert details["RetryInfo"].retry_delay.ToMilliseconds() == 100
        # The other tenant is served meanwhile, call after call.
        with Client(shared.address, api_key=bystander, timeout=10) as other:
            for _ in range(20):
                assert other.get_memory("n1").content == "The user drinks green tea"
            result = other.inject([user("What do I drink?")], stores=["notes"])
            assert [entry.id for entry in result.report.entries] == ["n1"]
        metrics = shared.scrape()
        assert sample(metrics, "contextfold_calls_shed_total", limit="tenant") >= 2


def _details(error: grpc.RpcError) -> list:
    status = rpc_status.from_call(error)
    unpacked = []
    for packed in status.details if status else ():
        for kind in (error_details_pb2.QuotaFailure, error_details_pb2.RetryInfo, error_details_pb2.ErrorInfo):
            if packed.Is(kind.DESCRIPTOR):
                detail = kind()
                packed.Unpack(detail)
                unpacked.append(detail)
    return unpacked


def test_a_stream_that_sends_nothing_is_ended_and_its_slot_freed(
    shared: ServerProcess, tenants: tuple[str, str]
) -> None:
    flooding, _ = tenants
    with IdleImports(shared.address, flooding) as idle:
        started = time.monotonic()
        idle.open(SHARE)
        for call in idle.calls:
            error = call.exception(timeout=IDLE + 10)
            assert error is not None and error.code() == grpc.StatusCode.DEADLINE_EXCEEDED
            assert "moved nothing" in error.details()
        assert time.monotonic() - started < IDLE + 5
        # The tenant's slots are its own again.
        with Client(shared.address, api_key=flooding, timeout=10) as own:
            assert own.get_memory("n1").content == "The user drinks green tea"
        assert sample(shared.scrape(), "contextfold_streams_ended_idle_total") >= SHARE


def test_an_export_nobody_reads_is_ended(shared: ServerProcess, tenants: tuple[str, str]) -> None:
    flooding, _ = tenants
    with Client(shared.address, api_key=flooding, timeout=30) as cf:
        store = unique("big")
        cf.create_store(store, dimension=256)
        big = "x" * 16_000
        # 27 MB to export: more than the connection's windows and the sockets' buffers hold unread.
        for batch in range(8):
            cf.add_memories(store, [{"content": f"{big} {batch}-{n}", "vector": [1.0] * 256} for n in range(200)])
    # A reader that does not read: its window stays at its first 64 KB (no probing for a larger one).
    with grpc.insecure_channel(shared.address, options=[("grpc.http2.bdp_probe", 0)]) as channel:
        stream = memory_pb2_grpc.MemoryServiceStub(channel).ExportMemories(
            memory_pb2.ExportMemoriesRequest(stores=[store]), metadata=(("authorization", f"Bearer {flooding}"),)
        )
        next(stream)  # the stores; then nothing is read, and the server's writes fill the window
        wait_for(
            lambda: sample(shared.scrape(), "contextfold_streams_ended_idle_total") >= 1 + SHARE,
            IDLE + 15,
            what="the unread export to be ended",
        )
        with pytest.raises(grpc.RpcError) as ended:
            for _ in stream:
                pass
        assert ended.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED


def test_a_call_that_sets_no_deadline_still_has_one(
    shared: ServerProcess, tenants: tuple[str, str], providers: dict[str, int]
) -> None:
    _, bystander = tenants
    with Client(shared.address, api_key=bystander, timeout=30) as cf:
        slow = unique("slow")
        cf.register_provider(slow, f"127.0.0.1:{providers['scripted']}", timeout=10)
    with grpc.insecure_channel(shared.address) as channel:
        from contextfold.v1 import conversation_pb2, injection_pb2, injection_pb2_grpc

        request = injection_pb2.InjectRequest(
            messages=[conversation_pb2.Message(role=conversation_pb2.ROLE_USER, content=[{"text": "hi"}])],
            providers=[slow],
        )
        request.memory.max_entries = 0
        request.app_state.update({"delays": {slow: 8}})
        started = time.monotonic()
        # No deadline: the server's longest (1.5 s) bounds it, and injection fails open within it.
        response = injection_pb2_grpc.InjectionServiceStub(channel).Inject(
            request, metadata=(("authorization", f"Bearer {bystander}"),)
        )
        assert time.monotonic() - started < 4
    (source,) = [s for s in response.report.sources if s.source == slow]
    assert source.skip_reason == injection_pb2.SKIP_REASON_TIMEOUT


@pytest.fixture(scope="module")
def hurried(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """A server whose statements may run 50 ms."""
    root = tmp_path_factory.mktemp("hurried")
    process = start_server(
        root / "server.log", "--data-dir", str(root / "pgdata"), "--statement-timeout-seconds", "0.05"
    )
    yield process
    assert process.stop() == 0, process.log()


def _added(cf: Client, store: str, entries: list[dict]) -> bool:
    try:
        cf.add_memories(store, entries)
    except ResourceExhausted as cut:
        assert cut.reason == "STATEMENT_TIMEOUT"
        return False
    return True


def test_a_legal_filter_that_would_run_long_is_cut_by_the_statement_timeout_with_a_clear_status(
    hurried: ServerProcess,
) -> None:
    import random

    rng = random.Random(7)
    with Client(hurried.address, timeout=60) as cf:
        store = unique("heavy")
        cf.create_store(store, dimension=8)
        for batch in range(80):
            # Metadata near its limit, of text that does not compress: each condition reads it again.
            entries = [
                {
                    "id": f"{store}-{batch}-{n}",
                    "content": f"entry {batch}-{n}",
                    "vector": [rng.random() for _ in range(8)],
                    "metadata": {"blob": "".join(rng.choices("abcdefghijklmnopqrstuvwxyz0123456789", k=15_000))},
                }
                for n in range(20)
            ]
            # Small batches, each well within the 50 ms (by ids: one cut off on a busy machine is added again).
            wait_for(lambda entries=entries: _added(cf, store, entries), 30, what="a batch added")
        heavy = {"any": [{f"k{n}": {"gte": n}} for n in range(64)]}
        started = time.monotonic()
        with pytest.raises(ResourceExhausted) as cut:
            list(cf.list_memories(store, filter=heavy))
        assert cut.value.reason == "STATEMENT_TIMEOUT"
        assert time.monotonic() - started < 5
        with pytest.raises(ResourceExhausted) as searching:
            cf.search_memories("entry", query_vector=[1.0] * 8, stores=[store], filter=heavy)
        assert searching.value.reason == "STATEMENT_TIMEOUT"
        # Injection fails open, saying why; and the next call is served as ever.
        result = cf.inject([user("entry?")], stores=[store], query_vector=[1.0] * 8, filter=heavy)
        assert not result.report.injected and "passed its time" in result.report.detail
        assert len(list(cf.list_memories(store, filter={"k1": {"exists": False}}, page_size=5))) >= 5


def test_an_entry_keeps_its_newest_versions_only(tmp_path) -> None:
    server = start_server(tmp_path / "server.log", "--data-dir", str(tmp_path / "pgdata"), "--versions-per-entry", "3")
    try:
        with Client(server.address, timeout=30) as cf:
            cf.create_store("notes", dimension=2)
            (entry,) = cf.add_memories("notes", [{"content": "version 1", "vector": [1.0, 0.0]}])
            for version in range(2, 8):
                cf.update_memory(entry.id, content=f"version {version}", vector=[1.0, 0.0])
            kept = [v.memory.content for v in cf.list_memory_versions(entry.id)]
            assert kept == ["version 6", "version 5", "version 4"]
            assert cf.get_memory(entry.id).content == "version 7"
    finally:
        assert server.stop() == 0, server.log()


@pytest.fixture(scope="module")
def narrow(postgres: Postgres, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """One worker taking 4 calls at a time, which one tenant may take whole; usage labelled for one tenant."""
    process = start_server(
        tmp_path_factory.mktemp("narrow") / "server.log",
        "--database-url", postgres.url, "--auth", "keys",
        "--max-in-flight", "4", "--max-in-flight-per-tenant", "4", "--stream-idle-seconds", "30",
        "--metrics-tenants", "flooding",
        workers=1,
    )  # fmt: skip
    yield process
    assert process.stop() == 0, process.log()


def test_health_says_not_serving_while_no_worker_can_admit_and_serving_once_one_can(
    narrow: ServerProcess, tenants: tuple[str, str]
) -> None:
    flooding, bystander = tenants
    with IdleImports(narrow.address, flooding) as idle:
        idle.open(4)
        wait_for(lambda: sample(narrow.scrape(), "contextfold_calls_in_flight") >= 4, 10, what="the streams")
        assert health_status(narrow.address) == "SERVING", "full, but no call refused yet"
        other = Client(narrow.address, api_key=bystander, timeout=10)
        with other, pytest.raises(ResourceExhausted) as refused:
            other.get_memory("n1")
        assert refused.value.reason == "TOO_MANY_CALLS_IN_FLIGHT"
        wait_for(lambda: health_status(narrow.address) == "NOT_SERVING", 5, what="health to say the worker is full")
        assert sample(narrow.scrape(), "contextfold_worker_full", worker="0") == 1
        assert "every worker is full" in narrow.log()
    # The streams end with the block: the worker admits again, and says so.
    wait_for(lambda: health_status(narrow.address) == "SERVING", 10, what="health to say SERVING again")
    assert sample(narrow.scrape(), "contextfold_worker_full", worker="0") == 0
    with Client(narrow.address, api_key=bystander, timeout=10) as other:
        assert other.get_memory("n1").content == "The user drinks green tea"


def counted(metrics: str, tenant: str) -> float:
    """The tenant's GetMemory calls in the usage metric: 0 before its first."""
    try:
        return sample(metrics, USAGE, tenant=tenant, kind="calls:GetMemory")
    except AssertionError:
        return 0.0


def test_usage_metrics_name_only_the_tenants_the_operator_allows(
    narrow: ServerProcess, tenants: tuple[str, str]
) -> None:
    flooding, bystander = tenants
    before = narrow.scrape()
    for key in (flooding, bystander, bystander):
        with Client(narrow.address, api_key=key, timeout=10) as cf:
            cf.get_memory("n1")
    metrics = narrow.scrape()

    def grew(tenant: str) -> float:
        return counted(metrics, tenant) - counted(before, tenant)

    assert grew("flooding") == 1
    assert grew("other") == 2, "the tenants not named are summed"
    assert 'tenant="bystander"' not in metrics


def test_one_tenant_s_heaviest_injects_make_another_s_inject_wait_for_a_turn_at_most(
    postgres: Postgres, tmp_path
) -> None:
    """Twelve callers of one tenant each ask `Inject` for a hundred entries of 16,000 characters, none gated, again and
    again (500 long candidates weighed, a block of 1.6 MB counted and sent back), while another tenant asks
    `Inject` of its own store (a block of about 10,000 characters, counted off the event loop too) every 50 ms,
    from a process of its own. One worker serves both. The heavy tenant's weighing and counting take turns with
    the other's on the worker's thread, a piece of a block at a turn: the other's calls wait for a turn of it at
    most. Before, asyncio's threads took every count first come first, and the other's calls waited for a
    queue of 1.6 MB counts: fewer than ten of them in 8 s."""
    process = start_server(tmp_path / "server.log", "--database-url", postgres.url, "--auth", "keys")
    try:
        heavy = keys(postgres.url, "create", "--namespace", "heavy-injects", "--role", "admin")["key"]
        other = keys(postgres.url, "create", "--namespace", "heavy-bystander", "--role", "admin")["key"]
        chosen = random.Random(7)
        with Client(process.address, api_key=other, timeout=60) as cf:
            wait_for(lambda: works(cf), 10, what="the key to work")
            cf.create_store("topics", dimension=384)
            cf.add_memories(
                "topics",
                [
                    {
                        "content": f"Topic {n}: " + "the user explained a view at length. " * 55,
                        "vector": [chosen.gauss(0, 1) for _ in range(384)],
                    }
                    for n in range(100)
                ],
            )
        with Client(process.address, api_key=heavy, timeout=120) as cf:
            wait_for(lambda: works(cf), 10, what="the key to work")
            long_entries(cf)
        stop = threading.Event()

        def flood() -> None:
            with Client(process.address, api_key=heavy, timeout=120) as cf:
                while not stop.is_set():
                    a_hundred_long_entries(cf)

        flooders = [threading.Thread(target=flood) for _ in range(12)]
        for flooder in flooders:
            flooder.start()
        try:
            time.sleep(2.0)
            with probing(process, other, "topics") as latencies:
                time.sleep(8.0)
        finally:
            stop.set()
            for flooder in flooders:
                flooder.join(120)
        assert len(latencies) >= 10, f"the other tenant made {len(latencies)} Injects in 8 s: {latencies}"
        slow = sorted(latencies)[int(len(latencies) * 0.9)]
        assert slow < STALL, (
            f"the other tenant's Inject p90 {slow * 1000:.0f} ms, median {statistics.median(latencies) * 1000:.0f} ms"
        )
    finally:
        assert process.stop() == 0, process.log()
