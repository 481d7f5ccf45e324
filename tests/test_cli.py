"""The `contextfold` command against a live server, as a user runs it."""

from __future__ import annotations

import json
import subprocess
import sys

from .conftest import unique


def run_cli(server, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "contextfold.cli", "--address", server.address, *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_stores_memory_and_inject_from_the_command_line(server, tmp_path) -> None:
    store = unique("cli")
    assert run_cli(server, "stores", "create", store, "--description", "from the CLI").returncode == 0
    added = run_cli(server, "memory", "add", "--store", store, "User prefers window seats", "User is vegetarian")
    assert added.returncode == 0, added.stderr
    ids = [entry["id"] for entry in json.loads(added.stdout)]

    found = json.loads(run_cli(server, "memory", "search", "seat on the plane", "--store", store).stdout)
    assert found[0]["memory"]["content"] == "User prefers window seats"

    conversation = tmp_path / "conversation.json"
    conversation.write_text(json.dumps([{"role": "user", "content": [{"text": "Book me a flight seat"}]}]))
    injected = run_cli(server, "inject", "--file", str(conversation), "--store", store, "--max-entries", "1")
    assert injected.returncode == 0, injected.stderr
    folded = json.loads(injected.stdout)
    assert folded[0]["content"][1]["injected"] == {
        "source": "memory",
        "text": f'\n\n<memory>\n<entry source="{store}">User prefers window seats</entry>\n</memory>',
        "entryIds": [ids[0]],
    }
    assert "injected 1 entries into message 0" in injected.stderr

    from_stdin = run_cli(server, "inject", "--file", "-", "--store", store, stdin=conversation.read_text())
    assert json.loads(from_stdin.stdout)[0]["content"][1]["injected"]["source"] == "memory"

    listed = json.loads(run_cli(server, "memory", "list", "--store", store).stdout)
    assert [entry["content"] for entry in listed] == ["User prefers window seats", "User is vegetarian"]
    assert json.loads(run_cli(server, "memory", "delete", *ids).stdout) == {"deleted_count": 2}
    assert json.loads(run_cli(server, "stores", "delete", store).stdout) == {"deleted_memory_count": 0}


def test_errors_print_the_status_and_field_and_exit_1(server) -> None:
    missing = run_cli(server, "memory", "get", "no-such-id")
    assert missing.returncode == 1
    assert missing.stderr.startswith("error: NOT_FOUND: memory 'no-such-id' does not exist")

    bad = run_cli(server, "stores", "create", "x" * 64)
    assert bad.returncode == 1
    assert "INVALID_ARGUMENT" in bad.stderr and "  store.name: must be 1 to 63" in bad.stderr
    assert "Traceback" not in bad.stderr


def test_serve_and_keys_are_found_through_the_entry_points_the_server_registers() -> None:
    shown = subprocess.run(
        [sys.executable, "-m", "contextfold.cli", "serve", "--help"], capture_output=True, text=True, timeout=60
    )
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.startswith("usage: contextfold serve")
    assert "$CONTEXTFOLD_MAX_IN_FLIGHT" in shown.stdout


def test_without_the_server_its_commands_say_how_to_install_it(monkeypatch, capsys) -> None:
    from contextfold import cli

    monkeypatch.setattr(cli, "entry_points", lambda group: [])
    assert cli.main(["keys", "list"]) == 1
    assert "pip install contextfold-server" in capsys.readouterr().err
