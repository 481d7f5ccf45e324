"""What the framework adapters' tests share: the reports an adapter's calls came back with, the memory
their agents are asked about (Ana's tea and cat, Bob's dog, each under its user), and their pages'
install and example run as printed."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from contextfold import Client
from contextfold.v1 import injection_pb2

from harness.servers import ROOT

from .pages import PAGES, blocks, run_printed
from .test_dist import empty_venv


@dataclass
class Reports:
    """Every report an adapter's calls came back with (its `on_report`): one a call to `Inject`."""

    got: list[injection_pb2.InjectionReport]

    def __call__(self, report: injection_pb2.InjectionReport) -> None:
        self.got.append(report)

    def entries(self, index: int) -> list[str]:
        return [entry.id for entry in self.got[index].entries]


def add_pets_and_tea(client: Client, store: str) -> None:
    """Ana's tea (`{store}-tea`) and cat (`{store}-cat`, Miso), Bob's dog (`{store}-dog`, Rex)."""
    client.add_memories(
        store,
        [
            {"id": f"{store}-tea", "content": "Ana drinks green tea every morning", "user_id": "ana"},
            {"id": f"{store}-cat", "content": "Ana's cat is called Miso", "user_id": "ana"},
            {"id": f"{store}-dog", "content": "Bob's dog is called Rex", "user_id": "bob"},
        ],
    )


def assert_page_installs_and_runs(
    page: str, install: str, example: str, command: str, address: str, folder: Path
) -> None:
    """A framework page's `install` block and the `command` running its `example`, each run as printed in
    `folder`, laid out as the checkout is (its `client` and `examples`) with a `.venv` that holds nothing
    of ours before: the page's first Python block is the example, and it prints exactly the page's first
    text block. (The tests take the blocks with `printed`, literally, as test_pages reads them.)"""
    text = PAGES[page]
    assert blocks(text, "python")[0] == (ROOT / example).read_text()
    assert example in command
    empty_venv(folder / ".venv")
    for linked in ("client", "examples"):
        (folder / linked).symlink_to(ROOT / linked)
    run_printed(install, folder, timeout=600)
    environment = {"PYTHONPATH": "", "VIRTUAL_ENV": "", "CONTEXTFOLD_ADDRESS": address}
    done = run_printed(command, folder, **environment)
    assert done.stdout == blocks(text, "text")[0], done.stderr
