"""Generate the stubs for the protos in `protos/` into the client packages.

Python (grpc_tools) goes to `client/python/contextfold/v1`; TypeScript (buf with
protoc-gen-es, configured in `client/typescript/buf.gen.yaml`) to
`client/typescript/src/gen`; Go (buf with protoc-gen-go and protoc-gen-go-grpc, configured in
`client/go/buf.gen.yaml`) to `client/go/gen`; the server's own subset of Envoy's external processing
API (`server/contextfold_server/mesh/ext_proc.proto`, messages only) beside it. The stubs are
checked in and never edited by hand.
`--check` regenerates them into a scratch folder and fails when the result
differs from what is checked in, so a proto change without `make proto` cannot
land. The TypeScript generator comes from the package's node_modules (`npm ci`); the Go ones
from PATH (Debian's protoc-gen-go and protoc-gen-go-grpc, which the Makefile installs).
"""

from __future__ import annotations

import argparse
import filecmp
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from grpc_tools import protoc

ROOT = Path(__file__).resolve().parent.parent
PROTOS = ROOT / "protos"
PACKAGE_ROOT = ROOT / "client" / "python"
GENERATED = PACKAGE_ROOT / "contextfold" / "v1"
TYPESCRIPT = ROOT / "client" / "typescript"
TYPESCRIPT_GENERATED = TYPESCRIPT / "src" / "gen"
GO = ROOT / "client" / "go"
GO_GENERATED = GO / "gen"
BUF = Path(sys.executable).parent / "buf"
MESH = ROOT / "server" / "contextfold_server" / "mesh"


def generate(out_root: Path) -> Path:
    out_root.mkdir(parents=True, exist_ok=True)
    protos = sorted(str(path.relative_to(PROTOS)) for path in PROTOS.rglob("*.proto"))
    well_known = Path(protoc.__file__).parent / "_proto"
    status = protoc.main(
        [
            "grpc_tools.protoc",
            f"-I{PROTOS}",
            f"-I{well_known}",
            f"--python_out={out_root}",
            f"--pyi_out={out_root}",
            f"--grpc_python_out={out_root}",
            *protos,
        ]
    )
    if status != 0:
        sys.exit(f"protoc failed with status {status}")
    package = out_root / "contextfold" / "v1"
    (package / "__init__.py").write_text('"""Generated from protos/contextfold/v1 by `make proto`; do not edit."""\n')
    return package


def generate_mesh(out_root: Path) -> Path:
    """The processor's messages (`mesh/ext_proc.proto`), generated into `out_root`."""
    out_root.mkdir(parents=True, exist_ok=True)
    status = protoc.main(
        ["grpc_tools.protoc", f"-I{MESH}", f"--python_out={out_root}", f"--pyi_out={out_root}", "ext_proc.proto"]
    )
    if status != 0:
        sys.exit(f"protoc failed with status {status}")
    return out_root


def generate_with_buf(package: Path, generated: Path, out_root: Path) -> Path:
    """Run buf generate with `package`'s template, writing under `out_root`; returns the folder
    there that stands for `generated`."""
    subprocess.run([str(BUF), "generate", "--output", str(out_root)], cwd=package, check=True)
    return out_root / generated.relative_to(package)


def differences(left: Path, right: Path, pattern: str) -> list[str]:
    names = {str(path.relative_to(root)) for root in (left, right) for path in root.glob(pattern)}
    return sorted(
        name
        for name in names
        if not (left / name).exists()
        or not (right / name).exists()
        or not filecmp.cmp(left / name, right / name, shallow=False)
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--check", action="store_true", help="fail when the checked-in stubs are stale")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        fresh = generate(Path(scratch) / "python")
        fresh_typescript = generate_with_buf(TYPESCRIPT, TYPESCRIPT_GENERATED, Path(scratch) / "typescript")
        fresh_go = generate_with_buf(GO, GO_GENERATED, Path(scratch) / "go")
        fresh_mesh = generate_mesh(Path(scratch) / "mesh")
        if args.check:
            stale = (
                differences(fresh, GENERATED, "*.py*")
                + differences(fresh_mesh, MESH, "ext_proc_pb2.py*")
                + differences(fresh_typescript, TYPESCRIPT_GENERATED, "**/*.ts")
                + differences(fresh_go, GO_GENERATED, "**/*.go")
            )
            if stale:
                sys.exit(f"generated stubs are stale, run `make proto`: {', '.join(stale)}")
            print("generated stubs are current")
            return
        for old in GENERATED.glob("*.py*"):
            old.unlink()
        GENERATED.mkdir(parents=True, exist_ok=True)
        for new in fresh.iterdir():
            if new.is_file():
                shutil.copy2(new, GENERATED / new.name)
        for new in fresh_mesh.iterdir():
            shutil.copy2(new, MESH / new.name)
        for fresh_tree, checked_in in ((fresh_typescript, TYPESCRIPT_GENERATED), (fresh_go, GO_GENERATED)):
            shutil.rmtree(checked_in, ignore_errors=True)
            shutil.copytree(fresh_tree, checked_in)
    places = (GENERATED, TYPESCRIPT_GENERATED, GO_GENERATED, MESH)
    print(f"generated stubs in {', '.join(str(place.relative_to(ROOT)) for place in places)}")


if __name__ == "__main__":
    main()
