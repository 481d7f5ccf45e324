"""Shared fixtures: one real server (embedded Postgres, local model) for the session, and helpers."""

from __future__ import annotations

import os
import sys

# Before gRPC is imported, which reads it once: gRPC's fork handlers off. This process forks with channels busy
# whenever a module starts or restarts a Postgres of its own (its programs run as a system user, so `subprocess`
# forks where it would otherwise vfork), and gRPC (1.80 on) then restarts its poller in the child, which aborts
# before it execs when `subprocess` closes the poller's descriptor: a module's Postgres failed to start, about one
# fork in thirty (grpc/grpc#43055). Nothing here uses gRPC in a forked child: every child execs.
os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "0")
if "grpc" in sys.modules:
    raise RuntimeError("gRPC was imported before tests/conftest.py could turn its fork handlers off")

import contextlib
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from contextfold import Client, NotFound

from harness.messages import unique
from harness.servers import Postgres, ServerProcess, serving

# What tests measured (the failover's seconds without writes, say): printed after the run's results.
MEASURED: list[str] = []


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if MEASURED:
        terminalreporter.section("measured")
        for line in MEASURED:
            terminalreporter.write_line(line)


@pytest.fixture(scope="session")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    with serving(tmp_path_factory.mktemp("server")) as process:
        yield process


@pytest.fixture(scope="module")
def postgres(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Postgres]:
    """A Postgres of the test module's own (the server's embedded one, run by the test), removed after it."""
    database = Postgres(tmp_path_factory.mktemp(request.module.__name__.rsplit(".", 1)[-1]) / "pgdata")
    yield database
    database.cleanup()


@pytest.fixture
def fresh_postgres(tmp_path: Path) -> Iterator[Postgres]:
    """A Postgres of the test's own, for a test that stops it, migrates it by hand or fills it from zero."""
    database = Postgres(tmp_path / "pgdata")
    yield database
    database.cleanup()


@pytest.fixture(scope="session")
def client(server: ServerProcess) -> Iterator[Client]:
    with Client(server.address, timeout=30) as cf:
        yield cf


TYPESCRIPT = Path(__file__).resolve().parent.parent / "client" / "typescript"


def run_in_typescript_package(*command: str, env: dict[str, str] | None = None, timeout: float = 300) -> str:
    """Run a command in client/typescript; fail with its output unless it succeeds."""
    done = subprocess.run(command, cwd=TYPESCRIPT, capture_output=True, text=True, timeout=timeout, env=env)
    assert done.returncode == 0, f"{' '.join(command)} failed:\n{done.stdout}\n{done.stderr}"
    return done.stdout


@pytest.fixture(scope="session")
def typescript_package() -> Path:
    """client/typescript, installed (`make test` runs `npm ci`; a bare pytest run does it here) and built."""
    if not (TYPESCRIPT / "node_modules" / ".package-lock.json").exists():
        run_in_typescript_package("npm", "ci", "--no-audit", "--no-fund", "--loglevel=error")
    run_in_typescript_package("npm", "run", "build")
    return TYPESCRIPT


@pytest.fixture
def make_store(client: Client) -> Iterator[Callable[..., str]]:
    """Create stores with unique names for one test; they are deleted after it."""
    created: list[str] = []

    def make(prefix: str = "store", name: str | None = None, **options) -> str:
        store = name or unique(prefix)
        client.create_store(store, **options)
        created.append(store)
        return store

    yield make
    for store in created:
        with contextlib.suppress(NotFound):
            client.delete_store(store, force=True)
