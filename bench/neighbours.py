"""No request makes another wait: health latency from another connection under each heavy request.

One server with one worker (so the heavy request and the probe share an event loop, the
case that matters), and for each kind of heavy request the service accepts or refuses
(harness/heavy_requests.py), that request made again and again for a few seconds while a
probe in a process of its own checks health over a connection of its own. Prints each
case's health latency (p50, p99, max) against the target: p99 <= 50 ms.

    .venv/bin/python -m bench.neighbours
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

from contextfold import Client

from bench.fanout import percentile
from harness.heavy_requests import HEAVY, probing, registered_large_providers
from harness.servers import start_server

RESULTS = Path(__file__).resolve().parent / "results"
TARGET_P99_MS = 50.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=5.0, help="how long each kind of request is made")
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as scratch:
        server = start_server(Path(scratch) / "server.log", "--data-dir", str(Path(scratch) / "pgdata"), workers=1)
        try:
            with Client(server.address, timeout=60) as cf, registered_large_providers(cf) as large:
                with probing(server) as idle:
                    time.sleep(args.seconds)
                rows.append(("no load (the probe alone)", 0, idle))
                for name, heavy in HEAVY.items():
                    with probing(server) as latencies:
                        started, calls = time.perf_counter(), 0
                        while calls < 2 or time.perf_counter() - started < args.seconds:
                            heavy(cf, server, large)
                            calls += 1
                    rows.append((name, calls, latencies))
        finally:
            server.stop()

    print("health latency from another connection while one worker serves each heavy request (ms)")
    print(f"{'request':56} {'calls':>6} {'checks':>7} {'p50':>7} {'p99':>7} {'max':>7}")
    results = []
    missed = []
    for name, calls, latencies in rows:
        p50, p99, worst = (percentile(latencies, q) * 1000 for q in (0.5, 0.99, 1.0))
        print(f"{name:56} {calls:>6} {len(latencies):>7} {p50:>7.2f} {p99:>7.2f} {worst:>7.2f}")
        results.append({"request": name, "calls": calls, "checks": len(latencies), "p50_ms": p50, "p99_ms": p99})
        if p99 > TARGET_P99_MS:
            missed.append(name)
    print(
        f"target: health p99 <= {TARGET_P99_MS:g} ms under every request: "
        + ("met" if not missed else f"missed by {missed}")
    )
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "neighbours.json").write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
