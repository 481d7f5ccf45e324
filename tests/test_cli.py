"""The `contextfold` command against a live server, as a user runs it."""

from __future__ import annotations

import json
import subprocess
import sys

from harness.messages import unique


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


def test_a_replayed_question_s_time_of_asking_and_bad_times_from_the_command_line(server, tmp_path) -> None:
    """`--asked-time` reads the days a question names by when it is asked against that time; a time that is no
    ISO 8601 time is a usage error naming the option, not a traceback."""
    store = unique("cli-asked")
    run_cli(server, "stores", "create", store)
    decisions = {"2023-05-02": "We agreed to a blue-green rollout.", "2023-05-09": "We agreed to freeze the branch."}
    for day, text in decisions.items():
        run_cli(server, "memory", "add", "--store", store, text, "--metadata", json.dumps({"date": day}))
    ask = "What did we agree about the release yesterday?"
    for asked, said in (("2023-05-03T09:00:00", decisions["2023-05-02"]), ("2023-05-10", decisions["2023-05-09"])):
        found = run_cli(server, "memory", "search", ask, "--store", store, "--asked-time", asked)
        assert json.loads(found.stdout)[0]["memory"]["content"] == said, found.stderr
        conversation = tmp_path / "asked.json"
        conversation.write_text(json.dumps([{"role": "user", "content": [{"text": ask}]}]))
        injected = run_cli(server, "inject", "--file", str(conversation), "--store", store, "--asked-time", asked)
        block = json.loads(injected.stdout)[0]["content"][1]["injected"]["text"]
        assert said in next(line for line in block.splitlines() if line.startswith("<entry")), block
    for command in (
        ("memory", "search", ask, "--asked-time", "yesterday"),
        ("memory", "update", "x", "--expire-time", "soon"),
    ):
        bad = run_cli(server, *command)
        assert bad.returncode == 2 and "not an ISO 8601 time" in bad.stderr and "Traceback" not in bad.stderr
    run_cli(server, "stores", "delete", store, "--force")


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


def test_export_and_import_as_json_lines_with_a_progress_bar_on_a_terminal(server, tmp_path) -> None:
    import os
    import pty

    store = unique("cli-export")
    run_cli(server, "stores", "create", store)
    for n in range(3):
        memory = json.dumps({"topic": "trips" if n else "food"})
        assert run_cli(server, "memory", "add", "--store", store, f"Fact {n}", "--metadata", memory).returncode == 0
    dump = tmp_path / "memories.jsonl"
    exported = run_cli(server, "memory", "export", "--store", store, "-o", str(dump))
    assert exported.returncode == 0, exported.stderr
    lines = [json.loads(line) for line in dump.read_text().splitlines()]
    assert [next(iter(line)) for line in lines] == ["store", "memory", "memory", "memory"]
    assert len(lines[1]["memory"]["vector"]) == 384 and "\r" not in exported.stderr, "no bar off a terminal"

    filtered = run_cli(server, "memory", "list", "--store", store, "--filter", '{"topic": "trips"}')
    assert [m["content"] for m in json.loads(filtered.stdout)] == ["Fact 1", "Fact 2"]

    assert run_cli(server, "stores", "delete", store, "--force").returncode == 0
    # On a terminal, the import draws its bar on stderr.
    primary, secondary = pty.openpty()
    done = subprocess.run(
        [sys.executable, "-m", "contextfold.cli", "--address", server.address, "memory", "import", str(dump)],
        stdout=subprocess.PIPE,
        stderr=secondary,
        text=True,
        timeout=60,
    )
    os.close(secondary)
    drawn = os.read(primary, 65536).decode()
    os.close(primary)
    assert done.returncode == 0
    assert json.loads(done.stdout) == {"created_store_count": "1", "added_count": "3"}
    assert "[" + "#" * 30 + "] 3/3 entries imported" in drawn
    listed = json.loads(run_cli(server, "memory", "list", "--store", store).stdout)
    assert [m["content"] for m in listed] == ["Fact 0", "Fact 1", "Fact 2"]
    run_cli(server, "stores", "delete", store, "--force")


def test_update_versions_and_erase_from_the_command_line(server) -> None:
    store = unique("cli-update")
    run_cli(server, "stores", "create", store)
    (added,) = json.loads(
        run_cli(server, "memory", "add", "--store", store, "Lives in Denver", "--user-id", "u9").stdout
    )
    updated = run_cli(server, "memory", "update", added["id"], "--content", "Lives in Lisbon", "--etag", added["etag"])
    assert updated.returncode == 0, updated.stderr
    assert json.loads(updated.stdout)["content"] == "Lives in Lisbon", updated.stderr
    stale = run_cli(server, "memory", "update", added["id"], "--content", "Lives in Oslo", "--etag", added["etag"])
    assert stale.returncode == 1 and "ABORTED" in stale.stderr
    # An etag is URL-safe base64: one may begin with "-", which is still read as the etag.
    dashed = run_cli(server, "memory", "update", added["id"], "--content", "Oslo", "--etag", "-" + added["etag"])
    assert dashed.returncode == 1 and "ABORTED" in dashed.stderr, dashed.stderr
    versions = json.loads(run_cli(server, "memory", "versions", added["id"]).stdout)
    assert [v["memory"]["content"] for v in versions] == ["Lives in Denver"]
    counted = run_cli(server, "memory", "erase", "--user-id", "u9", "--validate-only")
    assert json.loads(counted.stdout) == {"would_erase_count": 1}
    erased = run_cli(server, "memory", "erase", "--user-id", "u9")
    assert json.loads(erased.stdout) == {"erased_count": 1}
    run_cli(server, "stores", "delete", store, "--force")
