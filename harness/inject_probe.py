"""Another tenant's `Inject` in a process of its own: `python -m harness.inject_probe ADDRESS KEY STORE`.

It asks `Inject` a new question of STORE with KEY every 50 ms, over a connection of its own, until
its stdin closes, then prints each call's latency in seconds, as JSON. Being a process of its own,
what it measures is the server's answer, not the test process's work.
"""

from __future__ import annotations

import json
import sys
import time

from contextfold import Client

from harness.messages import user
from harness.polling import stdin_closed

PACE = 0.05


def main(address: str, key: str, store: str) -> None:
    done = stdin_closed()
    latencies: list[float] = []
    with Client(address, api_key=key, timeout=30) as cf:

        def ask(n: int) -> None:
            cf.inject([user(f"What does the user think of topic {n}?")], stores=[store])

        ask(-1)
        print("probing", flush=True)
        n = 0
        while not done.is_set():
            started = time.perf_counter()
            ask(n)
            latencies.append(time.perf_counter() - started)
            n += 1
            done.wait(max(0.0, PACE - (time.perf_counter() - started)))
    print(json.dumps(latencies), flush=True)


if __name__ == "__main__":
    main(*sys.argv[1:4])
