"""The Go client (client/go), built with Debian's Go and gRPC-Go packages, against live servers.

The package's own tests (`go test`) run against this session's server and one that requires API
keys; the README's example runs as printed. GOPATH mode, from /usr/share/gocode, so nothing is
downloaded; `make test` installs the packages (see the Makefile's GO_PACKAGES).
"""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from contextfold import Client
from contextfold.errors import Unauthenticated

from harness.polling import wait_for
from harness.servers import ROOT, Postgres, ServerProcess, start_server

from .pages import blocks, printed, run_printed, section
from .test_tenancy import keys

GO_CLIENT = ROOT / "client" / "go"
IMPORT_PATH = "contextfold.dev/go"
REPLICA_TEST = "TestAClientReadsItsOwnWritesWhileTheReplicaLags"


@pytest.fixture(scope="module")
def go_env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    return gopath_env(tmp_path_factory.mktemp("gopath"))


def gopath_env(gopath: Path) -> dict[str, str]:
    """A GOPATH holding the package under its import path, beside Debian's Go sources."""
    (gopath / "src" / "contextfold.dev").mkdir(parents=True)
    (gopath / "src" / IMPORT_PATH).symlink_to(GO_CLIENT)
    return {
        **os.environ,
        "GO111MODULE": "off",
        "GOPATH": f"{gopath}:/usr/share/gocode",
        "GOPROXY": "off",
        "GOFLAGS": "",
    }


def makefile_go_packages() -> list[str]:
    """The Makefile's GO_PACKAGES, the Debian packages `make test` installs for the Go client."""
    text = (ROOT / "Makefile").read_text().replace("\\\n", " ")
    (line,) = re.findall(r"^GO_PACKAGES := (.+)$", text, re.M)
    return line.split()


def go(env: dict[str, str], *args: str, timeout: float = 300) -> str:
    done = subprocess.run(
        ["go", *args], cwd=GO_CLIENT, env=env, capture_output=True, text=True, timeout=timeout
    )  # fmt: skip
    assert done.returncode == 0, f"go {' '.join(args)} failed:\n{done.stdout}\n{done.stderr}"
    return done.stdout


@pytest.fixture(scope="module")
def keyed(postgres: Postgres, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ServerProcess, str]]:
    """A server that requires keys, and a key it accepts."""
    log = tmp_path_factory.mktemp("go-keyed-server") / "server.log"
    server = start_server(log, "--database-url", postgres.url, "--auth", "keys", "--cache-reload-seconds", "1")
    key = keys(postgres.url, "create", "--namespace", "go", "--role", "admin")["key"]

    def accepted() -> bool:
        with Client(server.address, api_key=key, timeout=10) as cf:
            try:
                list(cf.list_stores())
            except Unauthenticated:
                return False
        return True

    wait_for(accepted, 15, what="the new key to work")
    yield server, key
    assert server.stop() == 0, server.log()


def test_the_go_client_is_formatted_and_vetted(go_env: dict[str, str]) -> None:
    unformatted = subprocess.run(
        ["gofmt", "-l", "."], cwd=GO_CLIENT, capture_output=True, text=True, check=True
    ).stdout  # fmt: skip
    assert unformatted == "", f"gofmt would change: {unformatted}"
    go(go_env, "vet", IMPORT_PATH, f"{IMPORT_PATH}/gen/contextfold/v1", f"{IMPORT_PATH}/examples/inject")


def test_the_go_tests_pass_against_live_servers(
    go_env: dict[str, str], server: ServerProcess, keyed: tuple[ServerProcess, str]
) -> None:
    keyed_server, key = keyed
    env = {
        **go_env,
        "CONTEXTFOLD_ADDRESS": server.address,
        "CONTEXTFOLD_KEYED_ADDRESS": keyed_server.address,
        "CONTEXTFOLD_TEST_KEY": key,
    }
    env.pop("CONTEXTFOLD_API_KEY", None)
    output = go(env, "test", "-count=1", "-v", IMPORT_PATH)
    passed = re.findall(r"^--- PASS: (\w+)", output, flags=re.M)
    # Every test of the file passes here but the replica's, which tests/test_replicas.py runs.
    written = re.findall(r"^func (Test\w+)", (GO_CLIENT / "contextfold_test.go").read_text(), flags=re.M)
    assert sorted(passed) == sorted(set(written) - {REPLICA_TEST}) and "--- FAIL" not in output, output


def test_the_readmes_go_example_runs_as_printed_and_prints_what_typescript_and_python_print(
    server: ServerProcess,
) -> None:
    text = section("From any language")
    assert blocks(text, "go")[0] == (GO_CLIENT / "examples" / "inject" / "main.go").read_text()
    command = printed("docs/clients.md", "go run contextfold.dev/go/examples/inject")
    # The packages it installs are the ones `make test` installs.
    packages = re.search(r'^GO_PACKAGES="([^"]+)"$', command, re.M)
    assert packages and set(packages.group(1).split()) <= set(makefile_go_packages()), command
    # As printed, from the checkout: its GOPATH is the checkout's own (build/gopath).
    run = run_printed(command, ROOT, CONTEXTFOLD_ADDRESS=server.address, GOPATH="", GO111MODULE="")
    assert run.stdout == blocks(text, "text")[0]
