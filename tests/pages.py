"""The README and the pages in docs/, as tests read them: their sections, their code blocks, and
their shell blocks run as printed.

A test that runs a page's shell block takes it with `printed(page, words)`; tests/test_pages.py
reads every test module for those calls and holds every shell block on every page to being taken
by one, or to a reason it cannot be run here (`NOT_RUN` there).
"""

from __future__ import annotations

import contextlib
import re
import socket
import subprocess
import tempfile
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path

from harness.polling import wait_for
from harness.shell import start, stop_group

ROOT = Path(__file__).resolve().parent.parent
PAGES = {
    str(path.relative_to(ROOT)): path.read_text()
    for path in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
}
# A fenced block, at the margin or indented in a list item (its body is then dedented).
FENCE = re.compile(r"^(?P<indent> *)```(?P<language>\w*)\n(?P<body>.*?)^(?P=indent)```", re.M | re.S)
SHELL = "sh"


def section(title: str) -> str:
    """The section of that title, on whichever page (the README or one in docs/) holds it."""
    (text,) = [page for page in PAGES.values() if re.search(rf"^#+ {re.escape(title)}\n", page, re.M)]
    return re.split(rf"^#+ {re.escape(title)}\n", text, maxsplit=1, flags=re.M)[1].split("\n## ", 1)[0]


def blocks(text: str, language: str) -> list[str]:
    """The bodies of the code blocks of that language, in the order the text shows them."""
    return [textwrap.dedent(block["body"]) for block in FENCE.finditer(text) if block["language"] == language]


def printed(page: str, words: str) -> str:
    """The one shell block on `page` (`README.md`, `docs/NAME.md`) that holds `words`, as printed."""
    found = [block for block in blocks(PAGES[page], SHELL) if words in block]
    assert len(found) == 1, f"{page}: {len(found)} shell blocks hold {words!r}"
    return found[0]


def replacing(command: str, replacements: dict[str, str]) -> str:
    """The command with each of a page's placeholders (an example host, port or id) replaced by what the
    test has; each must be in the command, so a page that changes is not run half replaced."""
    for placeholder, value in replacements.items():
        assert placeholder in command, f"{placeholder!r} is not in {command!r}"
        command = command.replace(placeholder, value)
    return command


def run_printed(command: str, cwd: Path, timeout: float = 300, **env: str) -> subprocess.CompletedProcess[str]:
    """A page's shell block, as printed, run by bash (stopping at the first command that fails); what it
    printed. Whatever it left running in the background (`… &`) is stopped when it ends: the block runs in
    a process group of its own, signalled whole."""
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        process = start(command, cwd, out, err, **env)
        try:
            process.wait(timeout)
        finally:
            stop_group(process)
        out.seek(0)
        err.seek(0)
        done = subprocess.CompletedProcess(command, process.returncode, out.read(), err.read())
    assert done.returncode == 0, f"{command}\nexited {done.returncode}:\n{done.stdout}\n{done.stderr}"
    return done


@contextlib.contextmanager
def running_printed(command: str, cwd: Path, ready: Callable[[], object], **env: str) -> Iterator[subprocess.Popen]:
    """A page's block that starts something to keep running ("in a terminal of its own"), run by bash as
    printed until `ready()` is true; stopped whole after."""
    with tempfile.TemporaryFile("w+") as log:
        process = start(command, cwd, log, subprocess.STDOUT, **env)
        try:

            def started() -> object:
                if process.poll() is not None:
                    log.seek(0)
                    raise AssertionError(f"{command}\nexited {process.returncode}:\n{log.read()}")
                return ready()

            wait_for(started, 60, what=f"{command!r} to be ready")
            yield process
        finally:
            stop_group(process)


def listening(port: int) -> Callable[[], bool]:
    """Whether something accepts connections on that loopback port."""

    def accepts() -> bool:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
        except OSError:
            return False
        return True

    return accepts
