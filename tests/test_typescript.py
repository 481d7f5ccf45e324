"""The TypeScript package's own tests (Node's test runner) against this session's live server.

They cover the client (unary calls, errors with details, deadlines), the converters, and a
real Strands TypeScript `Agent` with the plugin and memory store; see client/typescript/test.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from .conftest import run_in_typescript_package
from .servers import ServerProcess


def test_the_typescript_package_typechecks(typescript_package: Path) -> None:
    run_in_typescript_package("npm", "run", "typecheck")


def test_the_typescript_tests_pass_against_the_live_server(typescript_package: Path, server: ServerProcess) -> None:
    output = run_in_typescript_package(
        "npm", "test", env={**os.environ, "CONTEXTFOLD_ADDRESS": server.address}, timeout=600
    )
    passed = int(re.search(r"^\S+ pass (\d+)$", output, flags=re.M).group(1))
    failed = int(re.search(r"^\S+ fail (\d+)$", output, flags=re.M).group(1))
    assert (passed, failed) == (19, 0), output
