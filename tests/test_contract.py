"""The contract and the packaging: protos lint clean, stubs are current, the client stays light."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_generated_stubs_match_the_protos() -> None:
    check = subprocess.run(
        [sys.executable, "scripts/gen_protos.py", "--check"], cwd=ROOT, capture_output=True, text=True
    )
    assert check.returncode == 0, check.stdout + check.stderr


def test_protos_pass_buf_lint_standard() -> None:
    buf = shutil.which("buf", path=os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")]))
    assert buf, "buf is installed with the dev dependencies (buf-bin)"
    lint = subprocess.run([buf, "lint"], cwd=ROOT, capture_output=True, text=True)
    assert lint.returncode == 0, lint.stdout + lint.stderr


def test_the_client_package_depends_on_grpcio_and_protobuf_only() -> None:
    project = tomllib.loads((ROOT / "client" / "python" / "pyproject.toml").read_text())["project"]
    names = sorted(requirement.split(">")[0].split("=")[0].split("<")[0] for requirement in project["dependencies"])
    assert names == ["grpcio", "protobuf"]


def test_importing_the_client_loads_nothing_of_the_server() -> None:
    probe = (
        "import sys, contextfold, contextfold.cli; "
        "heavy = {'torch', 'psycopg', 'sentence_transformers', 'contextfold_server', 'google.rpc'}; "
        "print(sorted(heavy & set(sys.modules)))"
    )
    loaded = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert loaded.stdout.strip() == "[]"


def test_a_breaking_change_to_the_protos_fails_the_breaking_check(tmp_path: Path) -> None:
    buf = str(Path(sys.executable).parent / "buf")
    assert subprocess.run([buf, "breaking", "--against", "protos/v1.image.json"], cwd=ROOT).returncode == 0

    changed = tmp_path / "protos"
    shutil.copytree(ROOT / "protos", changed)
    memory = changed / "contextfold" / "v1" / "memory.proto"
    memory.write_text(memory.read_text().replace("string session_id = 3;", "string session = 3;", 1))
    check = subprocess.run(
        [buf, "breaking", str(changed), "--against", str(ROOT / "protos" / "v1.image.json")],
        capture_output=True,
        text=True,
    )
    assert check.returncode != 0
    assert 'Field "3" with name "session" on message "Scope" changed option "json_name"' in check.stdout + check.stderr
