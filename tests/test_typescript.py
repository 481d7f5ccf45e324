"""The TypeScript package's own tests (Node's test runner) against this session's live server.

They cover the client (unary calls, errors with details, deadlines), the converters, and a
real Strands TypeScript `Agent` with the plugin and memory store; see client/typescript/test.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from harness.servers import ServerProcess

from .conftest import run_in_typescript_package


def test_the_typescript_package_typechecks(typescript_package: Path) -> None:
    run_in_typescript_package("npm", "run", "typecheck")


def test_the_typescript_tests_pass_against_the_live_server(typescript_package: Path, server: ServerProcess) -> None:
    output = run_in_typescript_package(
        "npm", "test", env={**os.environ, "CONTEXTFOLD_ADDRESS": server.address}, timeout=600
    )
    # node's test runner closes with its counts: every test it found passed, or skipped itself (the read
    # replica's needs a replicated server: tests/test_replicas.py runs it there).
    counts = {
        name: int(count)
        for name, count in re.findall(r"^\S+ (tests|pass|fail|skipped|todo|cancelled) (\d+)$", output, flags=re.M)
    }
    assert counts["pass"] > 0 and counts["pass"] + counts["skipped"] == counts["tests"], output
    assert counts["fail"] == counts["cancelled"] == counts["todo"] == 0, output
