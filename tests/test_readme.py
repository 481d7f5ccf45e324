"""The README's examples run as printed, and print what the README shows."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()


def section(title: str) -> str:
    return README.split(f"## {title}\n", 1)[1].split("\n## ", 1)[0]


def blocks(text: str, language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", text, flags=re.S)


def test_the_customize_section_shows_the_example_and_exactly_what_it_prints(server) -> None:
    customize = section("Customize")
    example = ROOT / "examples" / "customize.py"
    assert blocks(customize, "python")[0] == example.read_text()

    run = subprocess.run(
        [sys.executable, str(example)],
        env={**os.environ, "CONTEXTFOLD_ADDRESS": server.address},
        capture_output=True,
        text=True,
        timeout=120,
    )

    assert run.returncode == 0, run.stderr
    assert run.stdout == blocks(customize, "text")[0]
