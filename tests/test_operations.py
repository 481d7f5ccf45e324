"""What an SRE relies on, each read from the real output: health, drain, limits, metrics, traces, logs, TLS.

Each server here has its own Postgres (the embedded package's), so a test may
stop the database, and a fake OpenTelemetry collector receives the spans.
"""

from __future__ import annotations

import concurrent.futures
import json
import os
import re
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from contextfold import Client, InvalidArgument
from contextfold.errors import ResourceExhausted, Unavailable
from contextfold.v1 import conversation_pb2, injection_pb2, injection_pb2_grpc
from contextfold_server.access.keys import OPEN_NAMESPACE

from harness.messages import unique, user
from harness.polling import wait_for
from harness.servers import ROOT, SERVE, Postgres, ServerProcess, health_status, provider_fixtures, sample, start_server
from harness.stand_ins.otlp_collector import FakeCollector

from .certs import make_certificates

LISTENING = re.compile(r"listening on [^:]+:(\d+)")


@pytest.fixture(scope="module")
def providers() -> Iterator[dict[str, int]]:
    with provider_fixtures() as ports:
        yield ports


@pytest.fixture(scope="module")
def collector() -> Iterator[FakeCollector]:
    with FakeCollector() as fake:
        yield fake


@pytest.fixture(scope="module")
def ops(tmp_path_factory: pytest.TempPathFactory, collector: FakeCollector) -> Iterator[ServerProcess]:
    """A server with small limits, exporting its spans to the fake collector."""
    root = tmp_path_factory.mktemp("ops")
    database = Postgres(root / "pgdata")
    env = {"OTEL_EXPORTER_OTLP_ENDPOINT": collector.endpoint, "OTEL_BSP_SCHEDULE_DELAY": "100"}
    process = start_server(
        root / "server.log",
        "--database-url",
        database.url,
        "--max-in-flight",
        "4",
        "--max-message-bytes",
        str(256 * 1024),
        env=env,
    )
    yield process
    assert process.stop() == 0, process.log()
    database.cleanup()


@pytest.fixture(scope="module")
def cf(ops: ServerProcess) -> Iterator[Client]:
    with Client(ops.address, timeout=30) as client:
        yield client


def test_limits_name_the_limit_and_store_nothing(cf: Client) -> None:
    store = unique("limits")
    cf.create_store(store)
    with pytest.raises(InvalidArgument) as too_many:
        cf.inject([user("hi")] * 2001)
    assert too_many.value.field_violations == [("messages", "holds 2001 messages; the limit is 2000")]
    with pytest.raises(InvalidArgument) as too_long:
        cf.add_memories(store, ["ok", "x" * 16_385])
    assert too_long.value.field_violations == [("memories[1].content", "holds 16385 characters; the limit is 16384")]
    with pytest.raises(InvalidArgument) as too_big_a_batch:
        cf.add_memories(store, [f"fact {n}" for n in range(1001)])
    assert too_big_a_batch.value.field_violations[0][0] == "memories"
    with pytest.raises(ResourceExhausted) as too_large:
        cf.add_memories(store, ["y" * 300_000])
    assert "larger than max" in too_large.value.message
    assert list(cf.list_memories(store)) == []


def test_past_the_in_flight_limit_calls_are_shed_not_queued(ops: ServerProcess, cf: Client, providers) -> None:
    slow = unique("slow")
    cf.register_provider(slow, f"127.0.0.1:{providers['scripted']}", timeout=10)
    shed_before = sample(ops.scrape(), "contextfold_calls_shed_total")

    def call(_: int) -> str:
        try:
            cf.inject([user("hi")], max_entries=0, providers=[slow], app_state={"delays": {slow: 1.5}})
        except ResourceExhausted as error:
            assert error.details[0].reason == "TOO_MANY_CALLS_IN_FLIGHT"
            return "shed"
        return "served"

    with concurrent.futures.ThreadPoolExecutor(10) as pool:
        outcomes = list(pool.map(call, range(10)))

    assert outcomes.count("served") >= 4 and outcomes.count("shed") >= 1, outcomes
    assert outcomes.count("served") + outcomes.count("shed") == 10
    assert sample(ops.scrape(), "contextfold_calls_shed_total") - shed_before == outcomes.count("shed")
    cf.delete_provider(slow)


def test_metrics_show_calls_stages_providers_and_the_pool(ops: ServerProcess, cf: Client, providers) -> None:
    store = unique("metrics")
    cf.create_store(store)
    cf.add_memories(store, ["The user likes tea"])
    clock = unique("clock")
    cf.register_provider(clock, f"127.0.0.1:{providers['scripted']}")
    says = {"texts": {clock: "<now>noon</now>"}}
    for _ in range(3):
        cf.inject([user("what do I like to drink?")], stores=[store], providers=[clock], app_state=says)
    with pytest.raises(InvalidArgument):
        cf.search_memories("  ")

    # A failed call's status reaches the caller a moment before its metrics are recorded.
    search = "/contextfold.v1.MemoryService/SearchMemories"

    def with_the_refusal() -> str:
        text = ops.scrape()
        return text if f'code="INVALID_ARGUMENT",method="{search}"' in text else ""

    metrics = wait_for(with_the_refusal, 10, what="the refused search in the metrics")

    inject = "/contextfold.v1.InjectionService/Inject"
    assert sample(metrics, "contextfold_calls_total", method=inject, code="OK") >= 3
    assert sample(metrics, "contextfold_calls_total", method=search, code="INVALID_ARGUMENT") >= 1
    assert sample(metrics, "contextfold_call_duration_seconds_count", method=inject) >= 3
    for stage in ("embed", "search", "fold", "total"):
        assert sample(metrics, "contextfold_inject_stage_duration_seconds_count", stage=stage) >= 3
    assert sample(metrics, "contextfold_provider_outcomes_total", provider=clock, outcome="injected") == 3
    assert sample(metrics, "contextfold_provider_duration_seconds_count", provider=clock) == 3
    assert sample(metrics, "contextfold_db_pool_connections", state="size") >= 1
    assert sample(metrics, "contextfold_calls_in_flight") == 0
    # The entry went to the bulk lane's model, the question to the queries' lane; its two repeats came from
    # the cache.
    for lane in ("bulk", "queries"):
        assert sample(metrics, "contextfold_embedding_model_calls_total", lane=lane) >= 1
        assert sample(metrics, "contextfold_embedding_texts_total", lane=lane) >= 1
    assert sample(metrics, "contextfold_embedding_cache_hits_total", lane="queries") >= 2
    cf.delete_provider(clock)


def test_traces_join_the_callers_trace_and_reach_the_providers(
    ops: ServerProcess, cf: Client, providers, collector: FakeCollector
) -> None:
    name = unique("traced")
    cf.register_provider(name, f"127.0.0.1:{providers['traceparent']}")
    trace_id, parent_id = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
    with grpc.insecure_channel(ops.address) as channel:
        response = injection_pb2_grpc.InjectionServiceStub(channel).Inject(
            injection_pb2.InjectRequest(
                messages=[conversation_pb2.Message(role=conversation_pb2.ROLE_USER, content=[{"text": "hello"}])],
                providers=[name],
            ),
            metadata=[("traceparent", f"00-{trace_id}-{parent_id}-01")],
            timeout=30,
        )
    # The provider's call carried the trace on, its parent the provider span.
    (block,) = [b.injected for b in response.messages[0].content if b.injected.source == name]
    seen = re.fullmatch(r"(?:\n\n)?00-([0-9a-f]{32})-([0-9a-f]{16})-01", block.text)
    assert seen and seen.group(1) == trace_id, block.text

    def exported() -> dict:
        spans = {span.name: span for span in collector.spans if span.trace_id == trace_id}
        wanted = {"contextfold.v1.InjectionService/Inject", "contextfold.embed", "contextfold.search"}
        provided = any(n.startswith("contextfold.provider ") for n in spans)
        return spans if wanted <= set(spans) and provided else {}

    spans = wait_for(exported, 10, what="the call's spans at the collector")
    server = spans["contextfold.v1.InjectionService/Inject"]
    assert server.parent_span_id == parent_id
    assert server.kind == 2  # SERVER
    assert spans["contextfold.embed"].parent_span_id == server.span_id
    assert spans["contextfold.search"].parent_span_id == server.span_id
    provider = spans[f"contextfold.provider {name}"]
    assert provider.kind == 3  # CLIENT
    assert provider.parent_span_id == server.span_id
    assert provider.span_id == seen.group(2)
    cf.delete_provider(name)


def test_one_json_log_line_per_call_with_a_request_id_and_no_bodies(ops: ServerProcess) -> None:
    secret = f"the password is {unique('xyzzy')}"
    with grpc.insecure_channel(ops.address) as channel:
        stub = injection_pb2_grpc.InjectionServiceStub(channel)
        _, call = stub.Inject.with_call(
            injection_pb2.InjectRequest(
                messages=[conversation_pb2.Message(role=conversation_pb2.ROLE_USER, content=[{"text": secret}])]
            ),
            metadata=[("x-request-id", "req-ops-1")],
            timeout=30,
        )
        assert ("x-request-id", "req-ops-1") in call.initial_metadata()
        _, generated = stub.Inject.with_call(injection_pb2.InjectRequest(), timeout=30)
        new_id = dict(generated.initial_metadata())["x-request-id"]

    def logged_lines() -> list[dict]:
        lines = [json.loads(line) for line in ops.log().splitlines() if line.startswith("{")]
        ids = {line.get("request_id") for line in lines}
        return lines if {"req-ops-1", new_id} <= ids else []

    lines = wait_for(logged_lines, 10, what="both calls' log lines")
    (logged,) = [line for line in lines if line.get("request_id") == "req-ops-1"]
    assert logged["message"] == "call"
    assert logged["method"] == "/contextfold.v1.InjectionService/Inject"
    assert logged["code"] == "OK"
    assert logged["namespace"] == OPEN_NAMESPACE
    assert logged["duration_ms"] > 0
    assert {"time", "level", "logger", "peer", "trace_id"} <= set(logged)
    # What the injection did, in the same line: memory was injected, or skipped with its reason.
    assert set(logged["injected"]) | set(logged["skipped"]) == {"memory"}
    assert (logged["tokens"] > 0) == (logged["injected"] == ["memory"])
    (empty,) = [line for line in lines if line.get("request_id") == new_id]
    assert empty["code"] == "OK"
    assert (empty["injected"], empty["skipped"], empty["tokens"]) == ([], {"memory": "SKIP_REASON_NOT_TRIGGERED"}, 0)
    assert secret not in ops.log()


def test_health_waits_for_the_database_and_sigterm_drains(fresh_postgres: Postgres, tmp_path: Path, providers) -> None:
    fresh_postgres.kill()
    log = tmp_path / "server.log"
    process = subprocess.Popen(
        [
            *SERVE,
            "--host",
            "127.0.0.1",
            "--port",
            "0",
            "--admin-port",
            "0",
            "--database-url",
            fresh_postgres.url,
            "--drain-seconds",
            "3",
            "--auth",
            "none",
            "--grace-seconds",
            "10",
        ],
        cwd=ROOT,
        stdout=log.open("w"),
        stderr=subprocess.STDOUT,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
    )
    try:
        listening = wait_for(lambda: LISTENING.search(log.read_text()), 60, what="the server to listen")
        address = f"127.0.0.1:{listening.group(1)}"

        # Up, but not ready: health says so, and calls are refused with the reason.
        assert health_status(address) == "NOT_SERVING"
        with Client(address, timeout=10) as early, pytest.raises(Unavailable) as refused:
            list(early.list_stores())
        assert refused.value.reason == "STARTING"
        wait_for(
            lambda: "the database is not reachable" in log.read_text(),
            30,
            what="the server to find no database",
        )
        assert health_status(address) == "NOT_SERVING"

        fresh_postgres.restart()
        wait_for(lambda: health_status(address) == "SERVING", 120, what="SERVING once the database is back")
        server = ServerProcess(process, address, log)

        with Client(address, timeout=30) as cf:
            slow = unique("slow")
            cf.register_provider(slow, f"127.0.0.1:{providers['scripted']}", timeout=10)
            says = {"texts": {slow: "<finished/>"}, "delays": {slow: 2.5}}
            with concurrent.futures.ThreadPoolExecutor(1) as pool:
                in_flight = pool.submit(cf.inject, [user("hi")], max_entries=0, providers=[slow], app_state=says)
                wait_for(lambda: sample(server.scrape(), "contextfold_calls_in_flight") >= 1, 10, what="the call")
                process.send_signal(signal.SIGTERM)
                # Draining: health flips at once, and calls are still served.
                wait_for(lambda: health_status(address) == "NOT_SERVING", 1.0, what="NOT_SERVING at once")
                cf.create_store("written-while-draining")
                assert [store.name for store in cf.list_stores()] == ["written-while-draining"]
                result = in_flight.result(timeout=30)
            assert "<finished/>" in json.dumps(result.messages)

        assert process.wait(30) == 0
        assert "draining" in log.read_text()
        with Client(address, timeout=2) as late, pytest.raises(Unavailable):
            list(late.list_stores())
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


@pytest.fixture(scope="module")
def certificates(tmp_path_factory: pytest.TempPathFactory):
    return make_certificates(tmp_path_factory.mktemp("certs"))


@pytest.mark.parametrize("mutual", [False, True], ids=["TLS", "mutual TLS"])
def test_tls_and_mutual_tls(fresh_postgres: Postgres, tmp_path: Path, certificates, mutual: bool) -> None:
    tls = ["--tls-cert-file", str(certificates.server_cert), "--tls-key-file", str(certificates.server_key)]
    if mutual:
        tls += ["--tls-client-ca-file", str(certificates.ca)]
    ca = certificates.ca.read_bytes()
    trusted = grpc.ssl_channel_credentials(
        root_certificates=ca,
        private_key=certificates.client_key.read_bytes() if mutual else None,
        certificate_chain=certificates.client_cert.read_bytes() if mutual else None,
    )
    server = start_server(tmp_path / "server.log", "--database-url", fresh_postgres.url, *tls, credentials=trusted)
    try:
        with Client(server.address, credentials=trusted, timeout=30) as cf:
            assert cf.create_store("over-tls").name == "over-tls"
            assert [store.name for store in cf.list_stores()] == ["over-tls"]
        with Client(server.address, timeout=5) as plaintext, pytest.raises(Unavailable):
            list(plaintext.list_stores())
        if mutual:
            anonymous = grpc.ssl_channel_credentials(root_certificates=ca)
            with Client(server.address, credentials=anonymous, timeout=5) as stranger, pytest.raises(Unavailable):
                list(stranger.list_stores())
        assert ("mutual TLS" if mutual else "(TLS)") in server.log()
    finally:
        assert server.stop() == 0, server.log()


def test_the_session_server_runs_open_because_it_was_told_to_and_says_so(server: ServerProcess) -> None:
    assert "the service is OPEN (--auth none)" in server.log()


def test_ctrl_c_in_a_terminal_stops_the_server_and_its_workers_cleanly(
    tmp_path: Path, fresh_postgres: Postgres
) -> None:
    """Ctrl-C signals the whole process group: the server and its sandbox workers at once."""
    server = start_server(tmp_path / "server.log", "--database-url", fresh_postgres.url)
    try:
        os.killpg(server.process.pid, signal.SIGINT)
        assert server.process.wait(60) == 0, server.log()
        assert "Traceback" not in server.log()
        assert '"message": "stopped"' in server.log()
    finally:
        server.stop()


def test_a_fresh_worker_warms_up_before_it_serves_so_its_first_inject_waits_on_nothing_to_load(
    tmp_path: Path, fresh_postgres: Postgres
) -> None:
    """The tokens' encoding (about 150 ms to load), the model's first runs and each pooled connection's
    first plans happen before health says SERVING, not in the first caller's time."""
    server = start_server(tmp_path / "server.log", "--database-url", fresh_postgres.url)
    try:
        log = server.log()
        assert "warmed up" in log and log.index("warmed up") < log.index("serving on"), log
        with Client(server.address, timeout=30) as cf:
            cf.create_store("notes")
            cf.add_memories("notes", ["Ana's dog is Biscuit."])
            first = cf.inject([{"role": "user", "content": [{"text": "What is Ana's dog called?"}]}], stores=["notes"])
        assert first.injected
        stages = {name: value.ToNanoseconds() / 1e6 for name, value in first.report.stage_durations.items()}
        # Loose bounds (the first call used to load the encoding in its fold, 150 ms or more).
        assert stages["fold"] < 50, stages
        assert stages["total"] < 250, stages
    finally:
        server.stop()
