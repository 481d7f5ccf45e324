"""Generate the Python stubs for the protos in `protos/` into the client package.

The stubs are checked in and never edited by hand. `--check` regenerates them
into a scratch folder and fails when the result differs from what is checked
in, so a proto change without `make proto` cannot land.
"""

from __future__ import annotations

import argparse
import filecmp
import shutil
import sys
import tempfile
from pathlib import Path

from grpc_tools import protoc

ROOT = Path(__file__).resolve().parent.parent
PROTOS = ROOT / "protos"
PACKAGE_ROOT = ROOT / "client" / "python"
GENERATED = PACKAGE_ROOT / "contextfold" / "v1"


def generate(out_root: Path) -> Path:
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


def differences(left: Path, right: Path) -> list[str]:
    names = {p.name for p in left.glob("*.py*")} | {p.name for p in right.glob("*.py*")}
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
        fresh = generate(Path(scratch))
        if args.check:
            stale = differences(fresh, GENERATED)
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
    print(f"generated stubs in {GENERATED.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
