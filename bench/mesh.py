"""What memory costs a model call that goes through Envoy with contextfold as its processor.

One run, on loopback: a stand-in model API (answering at once), Envoy in front of it without the
processor and with it, and contextfold (one worker, 200 memories). Each case is one chat completion
at a time over a kept-alive connection, the cases taking turns call by call:
- through Envoy without the processor (the proxy alone);
- through Envoy with the processor, memory folded into the request;
- through Envoy with the processor on a route it does not read (`/v1/embeddings`): once with the filter
  turned off for the route (`ExtProcPerRoute.disabled`, as deploy/envoy/envoy.yaml shows for routes
  that carry no model calls), once with the processor asked and passing the request on;
- `Inject` alone, the same conversation, from the Python client.
Target: the processor adds at most `Inject`'s p50 + 2 ms at p50, and nothing measurable on a route it
does not read.

    .venv/bin/python -m bench.mesh            (make bench)
"""

from __future__ import annotations

import argparse
import http.client
import json
import statistics
import tempfile
import time
from pathlib import Path

from contextfold import Client

from bench import RESULTS
from harness.envoy import Envoy, EnvoySetup, RouteSettings
from harness.servers import start_server
from harness.stand_ins.model_apis import ModelAPIs

QUESTION = "Which city did Ana move to, and when?"


def notes(count: int) -> list[str]:
    places = ["Lisbon", "Porto", "Madrid", "Oslo", "Kyoto", "Quito", "Accra", "Perth"]
    return [f"Note {n}: Ana visited {places[n % len(places)]} in week {n % 52}." for n in range(count)]


class Caller:
    """One HTTP/1.1 connection kept alive to `origin`, as an agent's client keeps one."""

    def __init__(self, origin: str) -> None:
        host, port = origin.removeprefix("http://").split(":")
        self._connection = http.client.HTTPConnection(host, int(port), timeout=30)

    def post(self, path: str, body: bytes, headers: dict[str, str]) -> bytes:
        self._connection.request("POST", path, body=body, headers={"content-type": "application/json", **headers})
        answer = self._connection.getresponse()
        data = answer.read()
        assert answer.status == 200, (answer.status, data[:200])
        return data


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--json", type=Path, default=RESULTS / "mesh.json")
    args = parser.parse_args()
    chat = json.dumps({"model": "m", "messages": [{"role": "user", "content": QUESTION}]}).encode()
    embed = json.dumps({"model": "e", "input": QUESTION}).encode()
    settings = {"x-contextfold-stores": "notes", "x-contextfold-user-id": "ana"}
    with tempfile.TemporaryDirectory() as scratch:
        server = start_server(Path(scratch) / "server.log", "--ext-proc", "on", "--data-dir", f"{scratch}/pgdata")
        model = ModelAPIs()
        port = int(server.address.rsplit(":", 1)[1])
        plain = Envoy(EnvoySetup(model.port, port, processor=False))
        processed = Envoy(
            EnvoySetup(
                model.port, port, routes=[RouteSettings("/v1/embeddings", rewrite="/v1/embeddings", disabled=True)]
            )
        )
        try:
            with Client(server.address, timeout=30) as cf:
                cf.create_store("notes", description="what Ana did")
                cf.add_memories("notes", [{"content": text, "user_id": "ana"} for text in notes(200)])
                conversation = [{"role": "user", "content": [{"text": QUESTION}]}]
                proxied, plain_caller = Caller(processed.origin), Caller(plain.origin)
                cases = {
                    "through Envoy, no processor": lambda: plain_caller.post("/v1/chat/completions", chat, {}),
                    "through Envoy, memory folded": lambda: proxied.post("/v1/chat/completions", chat, settings),
                    "through Envoy, a route the filter is off for": lambda: proxied.post("/v1/embeddings", embed, {}),
                    "through Envoy, a route it is asked about but does not read": lambda: proxied.post(
                        "/v1/models/x", embed, {}
                    ),
                    "through Envoy without the processor, the same route": lambda: plain_caller.post(
                        "/v1/embeddings", embed, {}
                    ),
                    "Inject alone": lambda: cf.inject(conversation, stores=["notes"], scope={"user_id": "ana"}),
                }
                seconds: dict[str, list[float]] = {name: [] for name in cases}
                for call in range(args.calls + 20):
                    for name, case in cases.items():
                        started = time.perf_counter()
                        case()
                        if call >= 20:  # the first calls warm the model, the plans and the connections
                            seconds[name].append(time.perf_counter() - started)
            assert any(b"<memory>" in received.body for received in model.received[-5:]), "memory was folded"
        finally:
            processed.stop()
            plain.stop()
            model.close()
            server.stop()

    rows = {
        name: {
            "p50_ms": statistics.median(values) * 1000,
            "p99_ms": statistics.quantiles(values, n=100)[98] * 1000,
        }
        for name, values in seconds.items()
    }
    print(f"{'case':62} {'p50 ms':>8} {'p99 ms':>8}")
    for name, row in rows.items():
        print(f"{name:62} {row['p50_ms']:8.2f} {row['p99_ms']:8.2f}")
    added = rows["through Envoy, memory folded"]["p50_ms"] - rows["through Envoy, no processor"]["p50_ms"]
    inject = rows["Inject alone"]["p50_ms"]
    alone = rows["through Envoy without the processor, the same route"]["p50_ms"]
    unread = rows["through Envoy, a route the filter is off for"]["p50_ms"] / alone
    asked = rows["through Envoy, a route it is asked about but does not read"]["p50_ms"] / alone
    met = "met" if added <= inject + 2 else "MISSED"
    print(f"\ntargets (this run): the processor adds {added:.2f} ms at p50, Inject alone {inject:.2f} ms:")
    print(f"- added <= Inject + 2 ms: {added:.2f} <= {inject + 2:.2f}, {met}")
    print(f"- a route the filter is off for: {unread:.2f} x the proxy alone at p50")
    print(f"- a route the processor is asked about and passes on: {asked:.2f} x (its headers' round trip)")
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(
        json.dumps({"rows": rows, "added_ms": added, "unread_ratio": unread, "asked_ratio": asked}, indent=2) + "\n"
    )


if __name__ == "__main__":
    main()
