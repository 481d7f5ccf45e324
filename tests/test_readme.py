"""The README's and the docs' examples run as printed, and print what the pages show."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()
PAGES = {path: path.read_text() for path in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]}


def section(title: str) -> str:
    """The section of that title, on whichever page (the README or one in docs/) holds it."""
    (text,) = [page for page in PAGES.values() if re.search(rf"^#+ {re.escape(title)}\n", page, re.M)]
    return re.split(rf"^#+ {re.escape(title)}\n", text, maxsplit=1, flags=re.M)[1].split("\n## ", 1)[0]


def run_printed(command: str, cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    """A page's shell block, as printed, with the environment's tools (buf among them) on the PATH."""
    done = subprocess.run(
        ["bash", "-euc", command],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}", **env},
    )
    assert done.returncode == 0, done.stderr
    return done


def test_the_readme_is_short_and_links_every_page() -> None:
    """A newcomer's page (what it is, the two commands, five minutes with it, where to go next); the
    manual is in docs/, every page of it linked from the README."""
    assert len(README.splitlines()) <= 250
    linked = set(re.findall(r"\]\(docs/([\w-]+\.md)\)", README))
    assert linked == {path.name for path in (ROOT / "docs").glob("*.md")}


def test_every_link_between_the_pages_reaches_a_file_and_a_heading() -> None:
    def anchors(text: str) -> set[str]:
        titles = re.findall(r"^#{1,4} (.+)$", text, re.M)
        return {re.sub(r"[^\w\- ]", "", title.strip().lower()).replace(" ", "-") for title in titles}

    broken = []
    for path, text in PAGES.items():
        for target in re.findall(r"\]\(([^)\s]+)\)", re.sub(r"```.*?```", "", text, flags=re.S)):
            if re.match(r"^[a-z]+://", target):
                continue
            file, _, anchor = target.partition("#")
            reached = (path.parent / file).resolve() if file else path
            if not reached.exists() or (anchor and anchor not in anchors(reached.read_text())):
                broken.append(f"{path.relative_to(ROOT)}: {target}")
    assert not broken, broken


def blocks(text: str, language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", text, flags=re.S)


def assert_runs_as_printed(text: str, example: Path, server) -> None:
    """The section's first Python block is the example, and running it prints the section's first text block."""
    assert blocks(text, "python")[0] == example.read_text()
    run = subprocess.run(
        [sys.executable, str(example)],
        env={**os.environ, "CONTEXTFOLD_ADDRESS": server.address},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout == blocks(text, "text")[0]


def test_the_customize_section_shows_the_example_and_exactly_what_it_prints(server) -> None:
    customize = section("Customize")
    assert_runs_as_printed(customize, ROOT / "examples" / "customize.py", server)


def test_from_any_language_typescript_and_python_run_as_printed_and_print_the_same(
    server, typescript_package: Path
) -> None:
    text = section("From any language")
    typescript_example = typescript_package / "examples" / "inject.ts"
    python_example = ROOT / "examples" / "inject.py"
    assert blocks(text, "ts")[0] == typescript_example.read_text()
    assert blocks(text, "python")[0] == python_example.read_text()
    commands = blocks(text, "sh")
    assert commands[0] == "cd client/typescript && npm ci && npm run build\nnpx tsx examples/inject.ts\n"
    assert commands[1] == ".venv/bin/python examples/inject.py\n"
    env = {**os.environ, "CONTEXTFOLD_ADDRESS": server.address}

    typescript = subprocess.run(
        ["npx", "tsx", "examples/inject.ts"],
        cwd=typescript_package,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    python = subprocess.run(
        [sys.executable, str(python_example)], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )

    assert typescript.returncode == 0, typescript.stderr
    assert python.returncode == 0, python.stderr
    assert typescript.stdout == python.stdout == blocks(text, "text")[0]


def test_from_any_language_the_reflection_call_runs_as_printed(server) -> None:
    text = section("From any language")
    (command,) = [block for block in blocks(text, "sh") if "buf curl" in block]
    subprocess.run(
        [sys.executable, str(ROOT / "examples" / "inject.py")],
        check=True,
        capture_output=True,
        env={**os.environ, "CONTEXTFOLD_ADDRESS": server.address},
    )

    # As printed: buf on the PATH (pip's buf-bin), the address from the clients' variable.
    done = run_printed(command, ROOT, CONTEXTFOLD_ADDRESS=server.address)
    response = json.loads(done.stdout)
    assert response["messages"] == json.loads(blocks(text, "json")[0])["messages"]
    assert [entry["id"] for entry in response["report"]["entries"]] == ["ada-theme"]


def test_keeping_memory_right_runs_as_printed_and_prints_what_the_readme_shows(server) -> None:
    assert_runs_as_printed(section("Keeping memory right"), ROOT / "examples" / "lifecycle.py", server)


def test_stubs_for_another_language_generate_offline_as_printed(tmp_path: Path) -> None:
    """The Java template and commands, as printed, in a folder laid out as the checkout (its protos):
    offline, from Debian's protoc and gRPC's Java plugin, every service gets its stub."""
    text = section("Stubs for any other language")
    (template,) = blocks(text, "yaml")
    (command,) = [block for block in blocks(text, "sh") if "buf generate" in block]
    (tmp_path / "protos").symlink_to(ROOT / "protos")
    (tmp_path / "java.gen.yaml").write_text(template)
    run_printed(command, tmp_path)
    generated = tmp_path / "build" / "java" / "dev" / "contextfold" / "v1"
    services = {path.name for path in generated.glob("*Grpc.java")}
    assert services == {
        f"{name}Grpc.java" for name in ("InjectionService", "MemoryService", "ProviderService", "ContextProvider")
    }
    assert (generated / "InjectRequest.java").exists()
