"""Shell commands as a reader's terminal runs them: bash, with this environment's tools first on the
PATH, in a process group of their own (what they start in the background is in it), stopped whole."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import IO


def environment(**env: str) -> dict[str, str]:
    """The tests' environment with this environment's tools (contextfold, buf, pip's) on the PATH, as
    `make install` leaves a shell with `.venv/bin` first, and `env` over it."""
    return {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}", **env}


def start(command: str, cwd: Path, stdout: IO[str], stderr: IO[str] | int, **env: str) -> subprocess.Popen:
    """`command` run by bash (stopping at the first command that fails), leading a process group."""
    return subprocess.Popen(
        ["bash", "-euc", command], cwd=cwd, stdout=stdout, stderr=stderr, text=True, env=environment(**env),
        start_new_session=True,
    )  # fmt: skip


def stop_group(leader: subprocess.Popen, sent: signal.Signals = signal.SIGTERM, timeout: float = 30.0) -> None:
    """`sent` to the process group `leader` leads, waiting up to `timeout` for all of it to end; SIGKILL
    to what is left."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(leader.pid, sent)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        leader.poll()  # reaped, the leader leaves the group
        try:
            os.killpg(leader.pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.05)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(leader.pid, signal.SIGKILL)
    leader.wait()
