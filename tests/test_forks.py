"""The suite's own process forks while its channels are busy (a module starting its Postgres, whose programs run
as a system user): each child runs its program (tests/conftest.py turns gRPC's fork handlers off for this)."""

from __future__ import annotations

import subprocess
import threading

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from harness.servers import ServerProcess

# With gRPC's fork handlers on, about one child in thirty aborted before it ran its program, and some hung: one
# in a few hundred runs of this test would pass by chance.
CHILDREN = 300


def _starts_a_child_that_forks() -> int | str:
    """A program started as Postgres' are (`preexec_fn` and `user` make `subprocess` fork rather than vfork): its
    exit code, or "hung" for a child that never ran it (a child stuck in gRPC's fork handler is killed)."""
    try:
        return subprocess.run(["/bin/true"], preexec_fn=lambda: None, capture_output=True, timeout=10).returncode
    except subprocess.TimeoutExpired:
        return "hung"


def test_children_forked_while_channels_are_busy_run_their_programs(server: ServerProcess) -> None:
    stop = threading.Event()
    checked = [0, 0]

    def check_health(index: int) -> None:
        with grpc.insecure_channel(server.address) as channel:
            health = health_pb2_grpc.HealthStub(channel)
            while not stop.is_set():
                health.Check(health_pb2.HealthCheckRequest(), timeout=10)
                checked[index] += 1

    callers = [threading.Thread(target=check_health, args=(index,)) for index in range(2)]
    for caller in callers:
        caller.start()
    try:
        exit_codes = [_starts_a_child_that_forks() for _ in range(CHILDREN)]
    finally:
        stop.set()
        for caller in callers:
            caller.join(timeout=30)
    assert all(count > 0 for count in checked), checked
    assert [code for code in exit_codes if code != 0] == []
