"""The README's and the docs' examples run as printed, and print what the pages show."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

from .pages import PAGES, ROOT, blocks, printed, run_printed, section
from .test_dist import empty_venv, first_on_path

README = PAGES["README.md"]


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
    for page, text in PAGES.items():
        path = ROOT / page
        for target in re.findall(r"\]\(([^)\s]+)\)", re.sub(r"```.*?```", "", text, flags=re.S)):
            if re.match(r"^[a-z]+://", target):
                continue
            file, _, anchor = target.partition("#")
            reached = (path.parent / file).resolve() if file else path
            if not reached.exists() or (anchor and anchor not in anchors(reached.read_text())):
                broken.append(f"{path.relative_to(ROOT)}: {target}")
    assert not broken, broken


def assert_runs_as_printed(text: str, example: Path, command: str, server) -> None:
    """The section's first Python block is the example, and its command, run as printed, prints the
    section's first text block."""
    assert blocks(text, "python")[0] == example.read_text()
    assert str(example.relative_to(ROOT)) in command
    run = run_printed(command, ROOT, CONTEXTFOLD_ADDRESS=server.address)
    assert run.stdout == blocks(text, "text")[0]


def test_the_customize_section_shows_the_example_and_exactly_what_it_prints(server) -> None:
    customize = section("Customize")
    command = printed("docs/customize.md", "examples/customize.py")
    assert_runs_as_printed(customize, ROOT / "examples" / "customize.py", command, server)


def test_from_any_language_typescript_and_python_run_as_printed_and_print_the_same(
    server, typescript_package: Path
) -> None:
    """Each page's program is the example in the checkout, and its commands, run as printed (the
    TypeScript one installs and builds the client first), print what the page shows."""
    text = section("From any language")
    assert blocks(text, "ts")[0] == (typescript_package / "examples" / "inject.ts").read_text()
    assert blocks(text, "python")[0] == (ROOT / "examples" / "inject.py").read_text()
    typescript = run_printed(
        printed("docs/clients.md", "npx tsx examples/inject.ts"), ROOT, CONTEXTFOLD_ADDRESS=server.address
    )
    python = run_printed(
        printed("docs/clients.md", ".venv/bin/python examples/inject.py"), ROOT, CONTEXTFOLD_ADDRESS=server.address
    )
    shown = blocks(text, "text")[0]
    assert python.stdout == shown
    assert typescript.stdout.endswith(f"\n{shown}"), typescript.stdout  # after what npm printed


def test_from_any_language_the_reflection_call_runs_as_printed(server, tmp_path: Path) -> None:
    text = section("From any language")
    command = printed("docs/clients.md", "buf curl")
    subprocess.run(
        [sys.executable, str(ROOT / "examples" / "inject.py")],
        check=True,
        capture_output=True,
        env={**os.environ, "CONTEXTFOLD_ADDRESS": server.address},
    )

    # As printed: buf alone, installed by the page's line into a clean venv first on the PATH, and the
    # address from the clients' variable.
    bin_dir = empty_venv(tmp_path / "buf")
    path = first_on_path(bin_dir)
    run_printed(printed("docs/clients.md", "pip install buf-bin"), tmp_path, PATH=path)
    assert (bin_dir / "buf").exists()
    done = run_printed(command, ROOT, CONTEXTFOLD_ADDRESS=server.address, PATH=path)
    response = json.loads(done.stdout)
    assert response["messages"] == json.loads(blocks(text, "json")[0])["messages"]
    assert [entry["id"] for entry in response["report"]["entries"]] == ["ada-theme"]


def test_keeping_memory_right_runs_as_printed_and_prints_what_the_readme_shows(server) -> None:
    command = printed("docs/lifecycle.md", "examples/lifecycle.py")
    assert_runs_as_printed(section("Keeping memory right"), ROOT / "examples" / "lifecycle.py", command, server)


def test_stubs_for_another_language_generate_offline_as_printed(tmp_path: Path) -> None:
    """The Java template and commands, as printed, in a folder laid out as the checkout (its protos):
    offline, from Debian's protoc and gRPC's Java plugin, every service gets its stub."""
    text = section("Stubs for any other language")
    (template,) = blocks(text, "yaml")
    command = printed("docs/clients.md", "buf generate")
    (tmp_path / "protos").symlink_to(ROOT / "protos")
    (tmp_path / "java.gen.yaml").write_text(template)
    run_printed(command, tmp_path)
    generated = tmp_path / "build" / "java" / "dev" / "contextfold" / "v1"
    services = {path.name for path in generated.glob("*Grpc.java")}
    assert services == {
        f"{name}Grpc.java" for name in ("InjectionService", "MemoryService", "ProviderService", "ContextProvider")
    }
    assert (generated / "InjectRequest.java").exists()
