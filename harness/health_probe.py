"""A health probe in a process of its own: `python -m harness.health_probe ADDRESS`.

It checks health over a connection of its own, again and again, until its stdin
closes, then prints each check's latency in seconds, as JSON. Being a process of
its own, what it measures is the server's answer, not the test process's work.
"""

from __future__ import annotations

import json
import sys
import time

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from harness.polling import stdin_closed


def main(address: str) -> None:
    done = stdin_closed()
    latencies: list[float] = []
    with grpc.insecure_channel(address, options=[("grpc.use_local_subchannel_pool", 1)]) as channel:
        check = health_pb2_grpc.HealthStub(channel).Check
        check(health_pb2.HealthCheckRequest(), timeout=30, wait_for_ready=True)
        print("probing", flush=True)
        while not done.wait(0.01):
            started = time.perf_counter()
            check(health_pb2.HealthCheckRequest(), timeout=30)
            latencies.append(time.perf_counter() - started)
    print(json.dumps(latencies), flush=True)


if __name__ == "__main__":
    main(sys.argv[1])
