"""`make bench`: each module a benchmark (`python -m bench.NAME`), its figures printed and kept in results/."""

from __future__ import annotations

import os

# gRPC's fork handlers off, before gRPC is imported (`python -m bench.NAME` imports this first): a benchmark forks
# with channels busy when it starts a Postgres of its own, as the tests do (tests/conftest.py says why that can abort
# the child).
os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "0")

import argparse
import signal
import threading
from pathlib import Path
from types import FrameType

from contextfold_server.config import available_cores

RESULTS = Path(__file__).resolve().parent / "results"


def _unwind(signum: int, frame: FrameType | None) -> None:
    raise SystemExit(128 + signum)


# A benchmark stopped by SIGTERM (`timeout`, `kill`) unwinds as one stopped by Ctrl-C does: the servers and
# databases it started, each in a process group of its own, are stopped by its `finally` blocks rather than
# left running.
if threading.current_thread() is threading.main_thread() and signal.getsignal(signal.SIGTERM) == signal.SIG_DFL:
    signal.signal(signal.SIGTERM, _unwind)


def sized_run(description: str, calls: int, name: str) -> argparse.Namespace:
    """The options of a benchmark over a store of `--entries` entries with `--calls` timed calls per case
    (`--quick`: 2,000 and 60), on `--workers` workers; its figures go to `--json` (results/NAME.json)."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--entries", type=int, default=10_000)
    parser.add_argument("--calls", type=int, default=calls, help="timed calls per case for one caller (x4 for 16)")
    parser.add_argument("--workers", type=int, default=available_cores())
    parser.add_argument("--quick", action="store_true", help="2,000 entries, 60 calls")
    parser.add_argument("--json", type=Path, default=RESULTS / f"{name}.json")
    args = parser.parse_args()
    if args.quick:
        args.entries, args.calls = 2_000, 60
    RESULTS.mkdir(parents=True, exist_ok=True)
    return args
