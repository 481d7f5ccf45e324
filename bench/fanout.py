"""Fan-out benchmark: `Inject` with memory and two 100 ms providers takes about the slowest, not the sum.

Starts a real server (embedded Postgres, local model) and the test suite's
provider fixtures, then times `Inject` for memory alone, each provider alone,
and all three together, in one run so the ratios hold on any machine.

    make bench            # or: .venv/bin/python -m bench.fanout --calls 50
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from contextfold import Client

from harness.servers import provider_fixtures, start_server

ROOT = Path(__file__).resolve().parent.parent
PROVIDER_DELAY = 0.1


def percentile(samples: list[float], share: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, round(share * (len(ordered) - 1)))]


def time_calls(cf: Client, calls: int, **options: Any) -> list[float]:
    conversation = [{"role": "user", "content": [{"text": "What do I like to drink in the morning?"}]}]
    cf.inject(conversation, **options)  # warm: channels, caches, the model's first run
    samples = []
    for _ in range(calls):
        started = time.perf_counter()
        result = cf.inject(conversation, **options)
        samples.append(time.perf_counter() - started)
        assert all(s.skip_reason == 0 for s in result.report.sources if s.source in options.get("providers", ())), (
            result.report
        )
    return samples


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=30, help="timed calls per configuration")
    parser.add_argument("--json", type=Path, default=ROOT / "bench" / "results" / "fanout.json")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as scratch:
        server = start_server(Path(scratch) / "server.log", "--data-dir", str(Path(scratch) / "pgdata"))
        try:
            with provider_fixtures() as ports, Client(server.address, timeout=30) as cf:
                port = ports["scripted"]
                cf.create_store("drinks")
                cf.add_memories("drinks", [f"The user drinks {kind} in the morning" for kind in ("tea", "coffee")])
                cf.add_memories("drinks", [f"Unrelated fact number {n}" for n in range(200)])
                runs = {"memory alone": time_calls(cf, args.calls)}
                for name in ("a", "b"):
                    cf.register_provider(name, f"127.0.0.1:{port}", timeout=2)
                app_state = {"texts": {"a": "<a/>", "b": "<b/>"}, "delays": {"a": PROVIDER_DELAY, "b": PROVIDER_DELAY}}
                runs |= {
                    "provider a alone": time_calls(cf, args.calls, max_entries=0, providers=["a"], app_state=app_state),
                    "provider b alone": time_calls(cf, args.calls, max_entries=0, providers=["b"], app_state=app_state),
                    "memory + a + b": time_calls(cf, args.calls, providers=["a", "b"], app_state=app_state),
                }
        finally:
            server.stop()

    p50 = {name: statistics.median(samples) for name, samples in runs.items()}
    parts = p50["memory alone"] + p50["provider a alone"] + p50["provider b alone"]
    print(
        f"Inject fan-out, {args.calls} calls each, {platform.processor() or platform.machine()}, two 100 ms providers"
    )
    print(f"{'configuration':<20} {'p50 ms':>8} {'p95 ms':>8}")
    for name, samples in runs.items():
        print(f"{name:<20} {p50[name] * 1000:8.1f} {percentile(samples, 0.95) * 1000:8.1f}")
    slowest = max(p50["memory alone"], p50["provider a alone"], p50["provider b alone"])
    ratio = p50["memory + a + b"] / parts
    print(f"sum of the parts' p50: {parts * 1000:.1f} ms; slowest part: {slowest * 1000:.1f} ms")
    print(f"together / sum = {ratio:.2f} (1.00 would be one after another)")
    print(f"together / slowest = {p50['memory + a + b'] / slowest:.2f} (1.00 is the floor: all at once)")

    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(
        json.dumps(
            {
                "calls": args.calls,
                "p50_ms": {name: value * 1000 for name, value in p50.items()},
                "p95_ms": {name: percentile(samples, 0.95) * 1000 for name, samples in runs.items()},
                "together_over_sum": ratio,
                "together_over_slowest": p50["memory + a + b"] / slowest,
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
