"""Expressions and templates within the caller's deadline, and the sandbox shared fairly between tenants."""

from __future__ import annotations

import contextlib
import json
import subprocess
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import psutil
import pytest
from contextfold import Client
from contextfold.errors import Unavailable
from contextfold.v1 import injection_pb2

from harness.messages import user
from harness.polling import wait_for
from harness.servers import ROOT, SERVE, ServerProcess, live_children, sample, start_server

SKIP = injection_pb2.SkipReason
# Runs until the sandbox's time limit (1 s here) stops it.
OVERRUNNING = "{% for a in range(10000) %}{% for b in range(10000) %}{% endfor %}{% endfor %}"
QUICK = "{% for e in entries %}* {{ e.content }}\n{% endfor %}"
VECTOR = [1.0, 0.0] * 192


@dataclass
class Tenants:
    server: ServerProcess
    flooding: str
    bystander: str


@pytest.fixture(scope="module")
def tenants(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Tenants]:
    root = tmp_path_factory.mktemp("sandbox-sharing")
    server = start_server(
        root / "server.log", "--data-dir", str(root / "pgdata"), "--sandbox-time-limit-ms", "1000", "--auth", "keys"
    )
    try:

        def key(namespace: str) -> str:
            # `contextfold keys` joins the running server's embedded Postgres.
            done = subprocess.run(
                [*SERVE[:-1], "keys", "--data-dir", str(root / "pgdata"), "create", "--namespace", namespace,
                 "--role", "admin"],
                cwd=ROOT, capture_output=True, text=True, timeout=60,
            )  # fmt: skip
            assert done.returncode == 0, done.stderr
            return json.loads(done.stdout)["key"]

        tenants = Tenants(server, key("flooding"), key("bystander"))
        for api_key in (tenants.flooding, tenants.bystander):
            with Client(server.address, api_key=api_key) as cf:
                cf.create_store("facts")
                cf.add_memories("facts", [{"content": "The user drinks green tea", "vector": VECTOR}])
        yield tenants
    finally:
        assert server.stop() == 0, server.log()


def inject(address: str, api_key: str, template: str, timeout: float) -> tuple[float, object]:
    started = time.monotonic()
    with Client(address, api_key=api_key) as cf:
        result = cf.inject(
            [user("what do I drink?")], stores=["facts"], query_vector=VECTOR, format_template=template, timeout=timeout
        )
    return time.monotonic() - started, result


def test_one_tenants_overrunning_templates_do_not_hold_up_another_tenants(tenants: Tenants) -> None:
    address = tenants.server.address
    # The bystander's template, as an agent sends it each call: checked (compiled) once, then known.
    assert inject(address, tenants.bystander, QUICK, 10)[1].injected
    with ThreadPoolExecutor(max_workers=24) as pool:
        # Eight overruns queue for the sandbox's two workers: four seconds of work, from one tenant.
        flood = [pool.submit(inject, address, tenants.flooding, OVERRUNNING, 30) for _ in range(8)]
        wait_for(
            lambda: sample(tenants.server.scrape(), "contextfold_calls_in_flight") >= len(flood),
            10,
            what="the flood to be in the server",
        )
        # The flooding tenant's own next call waits behind its queue, within its deadline, and fails open.
        own = pool.submit(inject, address, tenants.flooding, QUICK, 1.0)
        elapsed, result = inject(address, tenants.bystander, QUICK, 10)
        assert result.injected, result.report
        assert result.report.sources[0].detail == ""
        # Its turn comes at the next free worker (within one overrun), not after the flood.
        assert elapsed < 1.6, f"the bystander's template waited {elapsed:.2f}s behind another tenant's"

        # An answer at all means it came within the deadline (past it, the call ends DEADLINE_EXCEEDED).
        _, own_result = own.result()
        assert not own_result.injected and own_result.report.skip_reason == SKIP.SKIP_REASON_TIMEOUT
        assert "caller's deadline" in own_result.report.detail
        for done in flood:
            _, flooded = done.result()
            assert flooded.report.skip_reason == SKIP.SKIP_REASON_TIMEOUT


def test_a_template_cut_off_by_the_callers_deadline_fails_open_before_it(tenants: Tenants) -> None:
    # The sandbox would give it 1 s; the caller gives 0.6 s.
    _, result = inject(tenants.server.address, tenants.bystander, OVERRUNNING, 0.6)
    assert not result.injected and result.report.skip_reason == SKIP.SKIP_REASON_TIMEOUT
    assert "the caller's deadline came" in result.report.detail


def sandbox_workers(server: ServerProcess) -> list[psutil.Process]:
    return [
        process
        for process, command in live_children(psutil.Process(server.process.pid), recursive=True)
        if "contextfold_server.customize.worker" in command
    ]


def test_a_check_the_machine_kept_from_running_is_no_verdict_on_the_expression(tenants: Tenants) -> None:
    """A sandbox worker that gets no CPU (here it is stopped, as a machine too busy would leave it) runs
    past the time limit without running: that says nothing of the expression. Its registration is told
    to retry (UNAVAILABLE), never that a valid expression is invalid; an Inject with it goes on."""
    workers = sandbox_workers(tenants.server)
    assert workers
    for worker in workers:
        worker.suspend()
    try:
        with Client(tenants.server.address, api_key=tenants.bystander, timeout=30) as cf:
            with pytest.raises(Unavailable) as refused:
                cf.register_provider("stalled", "127.0.0.1:9", trigger_expression="size(messages) > 7")
            assert refused.value.reason == "SANDBOX_FAILED" and "the machine is busy" in str(refused.value)
            result = cf.inject(
                [user("what do I drink?")],
                stores=["facts"],
                query_vector=VECTOR,
                trigger_expression="size(messages) > 8",
                timeout=10,
            )
            assert result.report.sources, "the Inject went on, with its report"
    finally:
        for worker in workers:
            with contextlib.suppress(psutil.NoSuchProcess):
                worker.resume()
    with Client(tenants.server.address, api_key=tenants.bystander, timeout=30) as cf:
        # Once the sandbox runs again, the same expression is checked, and stored.
        wait_for(
            lambda: cf.register_provider("stalled", "127.0.0.1:9", trigger_expression="size(messages) > 7"),
            20,
            what="the registration to be checked",
            retrying=(Unavailable,),
        )
