"""`contextfold mcp`: a `recall` over Streamable HTTP against the same over stdio, on one server.

Starts a real server (embedded Postgres, local model), stores two entries, and asks `recall` through
the MCP SDK's own client, 40 calls in one session (after 5 untimed), over stdio and over HTTP in
turn, three rounds: the p50 of each transport and what HTTP adds (target: at most 5 ms over stdio's).

    make bench            # or: .venv/bin/python -m bench.mcp --calls 100
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from contextfold import Client
from mcp.client import Client as McpClient
from mcp.client.stdio import StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from bench import RESULTS
from harness.polling import wait_for
from harness.servers import ROOT, start_server, terminate

TARGET_ADDED_MS = 5.0
ROUNDS = 3


async def recall_p50(client: McpClient, calls: int) -> float:
    """The p50 of `calls` recalls in one session, after 5 untimed."""
    async with client as session:
        for _ in range(5):
            await session.call_tool("recall", {"query": "cat"})
        samples = []
        for _ in range(calls):
            started = time.perf_counter()
            result = await session.call_tool("recall", {"query": "cat"})
            samples.append(time.perf_counter() - started)
            assert not result.is_error, result.content
    return statistics.median(samples)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=40)
    parser.add_argument("--json", type=Path, default=RESULTS / "mcp.json")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        server = start_server(Path(scratch) / "server.log", "--data-dir", str(Path(scratch) / "pgdata"))
        http = None
        try:
            with Client(server.address, timeout=30) as cf:
                cf.create_store("notes")
                cf.add_memories("notes", ["Ana's cat is called Miso", "Bob drinks green tea"])
            command = [sys.executable, "-m", "contextfold.cli", "--address", server.address, "mcp"]
            log = Path(scratch) / "mcp.log"
            with log.open("w") as output:
                http = subprocess.Popen(
                    [*command, "--transport", "http", "--port", "0"], stdout=output, stderr=subprocess.STDOUT, cwd=ROOT
                )
            url = wait_for(lambda: re.search(r"serving on (http://\S+)", log.read_text()), 60, what="mcp").group(1)
            stdio_p50, http_p50 = [], []
            for _ in range(ROUNDS):
                stdio = McpClient(StdioServerParameters(command=command[0], args=command[1:], cwd=str(ROOT)))
                stdio_p50.append(asyncio.run(recall_p50(stdio, args.calls)))
                over_http = McpClient(streamable_http_client(url, http_client=create_mcp_http_client()))
                http_p50.append(asyncio.run(recall_p50(over_http, args.calls)))
        finally:
            if http is not None:
                terminate(http)
            server.stop()
    stdio_ms, http_ms = statistics.median(stdio_p50) * 1000, statistics.median(http_p50) * 1000
    added = http_ms - stdio_ms
    print(f"recall through contextfold mcp ({args.calls} calls a session, {ROUNDS} rounds, median of the rounds' p50)")
    print(f"{'transport':<24} {'p50 ms':>8}")
    print(f"{'stdio':<24} {stdio_ms:8.1f}")
    print(f"{'Streamable HTTP':<24} {http_ms:8.1f}")
    verdict = "met" if added <= TARGET_ADDED_MS else "missed"
    print(f"HTTP adds {added:+.1f} ms over stdio (target: at most +{TARGET_ADDED_MS:g} ms: {verdict})")
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(
        json.dumps(
            {
                "machine": platform.machine(),
                "calls": args.calls,
                "stdio_p50_ms": stdio_ms,
                "http_p50_ms": http_ms,
                "http_added_ms": added,
                "rounds_stdio_ms": [value * 1000 for value in stdio_p50],
                "rounds_http_ms": [value * 1000 for value in http_p50],
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
