"""Every core: `contextfold serve` runs one worker per core on one port, with one embedded Postgres,
one scrape of metrics for all of them, a drain that stops them all, and a worker that dies replaced."""

from __future__ import annotations

import json
import os
import re
import signal
from collections.abc import Iterator
from pathlib import Path

import grpc
import psutil
import pytest
from contextfold import Client
from contextfold_server.config import available_cores

from harness.messages import unique, user
from harness.polling import wait_for
from harness.servers import ServerProcess, health_status, running, sample, server_processes, start_server

WORKERS = 2


@pytest.fixture(scope="module")
def workers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    root = tmp_path_factory.mktemp("workers")
    process = start_server(root / "server.log", "--data-dir", str(root / "pgdata"), workers=WORKERS)
    yield process
    assert process.stop() == 0, process.log()


def injects_served(metrics: str) -> float:
    inject = "/contextfold.v1.InjectionService/Inject"
    return (
        sample(metrics, "contextfold_calls_total", method=inject, code="OK") if f'method="{inject}"' in metrics else 0
    )


def log_lines(server: ServerProcess) -> list[dict]:
    return [json.loads(line) for line in server.log().splitlines() if line.startswith("{")]


def separate_connections(address: str, count: int) -> list[Client]:
    """Clients on connections of their own: the kernel spreads connections, not calls, over workers."""
    return [
        Client(channel=grpc.insecure_channel(address, options=[("grpc.use_local_subchannel_pool", 1)]), timeout=30)
        for _ in range(count)
    ]


def test_the_default_is_one_worker_per_core(tmp_path: Path) -> None:
    server = start_server(tmp_path / "server.log", "--data-dir", str(tmp_path / "pgdata"), workers=None)
    try:
        assert f"workers=<{available_cores()}>" in server.log()
    finally:
        assert server.stop() == 0
    assert 1 <= available_cores() <= len(os.sched_getaffinity(0))


def test_every_worker_serves_and_one_scrape_counts_them_all(workers: ServerProcess) -> None:
    count = WORKERS
    assert f"workers=<{count}>" in workers.log()
    store = unique("shared")
    with Client(workers.address, timeout=30) as admin:
        admin.create_store(store)
        admin.add_memories(store, ["The user's favourite colour is green"])
    before = injects_served(workers.scrape())
    clients = separate_connections(workers.address, 8 * count)
    try:
        for cf in clients:
            # An expression too, so every worker's sandbox runs one.
            result = cf.inject([user("What colour do I like?")], stores=[store], query_expression="latest_user_text")
            assert "green" in json.dumps(result.messages)
    finally:
        for cf in clients:
            cf.close()

    def served_by() -> set[int]:
        return {line["worker"] for line in log_lines(workers) if line.get("method", "").endswith("/Inject")}

    assert wait_for(lambda: len(served_by()) == count, 10, what="every worker to serve an Inject")

    def counted_all() -> str:
        text = workers.scrape()
        return text if injects_served(text) - before == 8 * count else ""

    metrics = wait_for(counted_all, 10, what="every Inject in one scrape")
    for worker in range(count):
        assert sample(metrics, "contextfold_event_loop_lag_seconds_count", worker=str(worker)) > 0
    assert len(re.findall(r"^# TYPE contextfold_calls_total counter$", metrics, flags=re.M)) == 1


def test_one_embedded_postgres_and_a_worker_that_dies_is_replaced(workers: ServerProcess) -> None:
    assert workers.log().count("embedded Postgres ready") == 1
    children, bulk = server_processes(psutil.Process(workers.process.pid))
    assert len(children) == WORKERS and len(bulk) == 1
    victim = children[0]
    victim.send_signal(signal.SIGKILL)
    wait_for(lambda: "a worker died | starting another" in workers.log(), 10, what="the supervisor to see it")
    # Health speaks for every worker: while one is replaced, the server is not all there.
    wait_for(lambda: health_status(workers.address) == "NOT_SERVING", 5, what="NOT_SERVING while a worker starts")
    wait_for(lambda: workers.log().count("serving on") >= 2, 60, what="the replacement to serve")
    wait_for(lambda: health_status(workers.address) == "SERVING", 5, what="SERVING once it serves")
    with Client(workers.address, timeout=30) as cf:
        assert cf.inject([user("still there?")], max_entries=0).report.skip_reason


def test_sigterm_drains_every_worker_and_stops_the_embedded_postgres(tmp_path: Path) -> None:
    server = start_server(tmp_path / "server.log", "--data-dir", str(tmp_path / "pgdata"), "--workers", "2")
    postmaster = int((tmp_path / "pgdata" / "postmaster.pid").read_text().split()[0])
    assert server.stop() == 0, server.log()
    lines = log_lines(server)
    assert {line["worker"] for line in lines if line["message"].startswith("stopped | worker")} == {0, 1}
    assert lines[-1]["message"] == "stopped"
    assert not running(postmaster), "the embedded Postgres stops with the server"


def test_workers_and_the_embedded_postgres_do_not_outlive_a_killed_supervisor(tmp_path: Path) -> None:
    server = start_server(tmp_path / "server.log", "--data-dir", str(tmp_path / "pgdata"), workers=WORKERS)
    postmaster = psutil.Process(int((tmp_path / "pgdata" / "postmaster.pid").read_text().split()[0]))
    supervisor = psutil.Process(server.process.pid)
    try:
        workers, bulk = server_processes(supervisor)
        sandboxes = [grandchild for worker in workers for grandchild in worker.children(recursive=True)]
        assert len(workers) == WORKERS and len(bulk) == 1 and sandboxes
    finally:
        # Killed whatever the checks found: a server this test started never outlives it.
        supervisor.kill()
        supervisor.wait(10)
    _, alive = psutil.wait_procs([*workers, *bulk, *sandboxes, postmaster], timeout=30)
    assert alive == [], "every worker, bulk worker, sandbox and the embedded Postgres stop when the supervisor dies"
    assert "the supervisor is gone" in server.log()
