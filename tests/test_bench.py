"""The benchmarks' own plumbing: what a benchmark leaves behind when it is stopped."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

from harness.polling import wait_for
from harness.servers import ROOT

STOPPED_BY_SIGTERM = 128 + signal.SIGTERM


def test_a_benchmark_stopped_by_sigterm_runs_its_finally_blocks(tmp_path: Path) -> None:
    """Its servers and databases, each in a process group of its own, are stopped in `finally` blocks: a
    `timeout` or a `kill` unwinds through them as Ctrl-C does, rather than leaving them running."""
    started, stopped = tmp_path / "started", tmp_path / "stopped"
    benchmark = (
        "import time\n"
        "from pathlib import Path\n"
        "import bench\n"
        "try:\n"
        f"    Path({str(started)!r}).touch()\n"
        "    time.sleep(120)\n"
        "finally:\n"
        f"    Path({str(stopped)!r}).touch()\n"
    )
    process = subprocess.Popen([sys.executable, "-c", benchmark], cwd=ROOT)
    try:
        wait_for(started.exists, timeout=60, what="the benchmark to start")
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=30) == STOPPED_BY_SIGTERM
    finally:
        process.kill()
    assert stopped.exists()
