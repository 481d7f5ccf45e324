"""What a newcomer meets first, from outside: a mistyped option or an unreachable database is said in a
line or two, never a traceback; a key that cannot be a header is refused before it is sent."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass

import grpc
import pytest
from contextfold import AlreadyExists, Client, InvalidApiKey, InvalidArgument, NotFound
from contextfold.cli import build_parser
from contextfold.convert import message_dict
from contextfold.keys import key_problem
from contextfold.mcp_server import STOP_GRACE_SECONDS
from contextfold_server.postgres.conninfo import described, url_problem
from mcp.client import Client as McpClient
from mcp.client.stdio import StdioServerParameters

from harness.messages import unique
from harness.polling import wait_for
from harness.servers import ROOT, SERVE, ServerProcess, free_port, health_status, serving
from harness.shell import environment

from .pages import listening, printed, replacing, run_printed, running_printed
from .test_mcp import HttpServer, once
from .test_mcp import run as mcp_run


def serve(*args: str, env: dict[str, str] | None = None, timeout: float = 60.0) -> subprocess.CompletedProcess:
    """`contextfold serve` with `args`, open and on loopback ports, run to its end."""
    return subprocess.run(
        [*SERVE, "--auth", "none", "--host", "127.0.0.1", "--port", "0", "--admin-port", "-1", *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=timeout,
        env={**os.environ, **(env or {})},
    )


def test_a_malformed_database_url_is_one_line_naming_the_option_and_exit_2() -> None:
    ended = serve("--database-url", "notaurl")
    assert ended.returncode == 2
    assert ended.stdout == ""
    (line,) = ended.stderr.splitlines()
    assert line.startswith("contextfold serve: error: --database-url ")
    assert 'missing "=" after "notaurl"' in line


def test_a_malformed_database_url_from_the_environment_names_the_variable() -> None:
    ended = serve(env={"CONTEXTFOLD_DATABASE_URL": "postgresql://nobody@127.0.0.1:notaport/nodb"})
    assert ended.returncode == 2
    (line,) = ended.stderr.splitlines()
    assert "CONTEXTFOLD_DATABASE_URL" in line and "notaport" in line, line


def test_a_malformed_read_replica_url_is_refused_as_its_own_option() -> None:
    ended = serve("--database-url", "postgresql://nobody@127.0.0.1/nodb", "--database-read-url", "notaurl")
    assert ended.returncode == 2
    (line,) = ended.stderr.splitlines()
    assert "--database-read-url" in line and "Traceback" not in ended.stderr


def test_a_database_url_given_as_the_data_directory_is_refused_before_a_directory_is_made(tmp_path) -> None:
    """`--data-dir postgresql://…` (an easy slip for `--database-url`) is refused in one line naming the option
    to use, by `contextfold serve` and by the operator's commands, with no directory made of the URL's name,
    and nothing of the URL echoed (it may hold a password)."""
    url = "postgresql://someone:secret@127.0.0.1:5432/memory"
    run = {"capture_output": True, "text": True, "cwd": tmp_path, "timeout": 60}
    served = subprocess.run([*SERVE, "--data-dir", url], **run)
    keys = subprocess.run([*SERVE[:-1], "keys", "--data-dir", url, "list"], **run)
    from_environment = serve(env={"CONTEXTFOLD_DATA_DIR": url})
    refusal = "error: --data-dir is a database URL, not a directory: give it as --database-url\n"
    assert served.returncode == keys.returncode == from_environment.returncode == 2
    assert served.stderr == "contextfold serve: " + refusal
    assert keys.stderr == refusal
    assert from_environment.stderr.startswith("contextfold serve: error: CONTEXTFOLD_DATA_DIR is a database URL")
    assert "secret" not in served.stderr + keys.stderr + from_environment.stderr
    assert list(tmp_path.iterdir()) == []


def test_an_unreachable_database_is_tried_with_backoff_said_in_a_line_each_and_given_up_when_asked(tmp_path) -> None:
    closed = free_port()
    port = free_port()
    log = tmp_path / "server.log"
    with log.open("w") as output:
        process = subprocess.Popen(
            [*SERVE, "--auth", "none", "--host", "127.0.0.1", "--port", str(port), "--admin-port", "-1",
             "--workers", "1", "--log-format", "json", "--database-wait-seconds", "6",
             "--database-url", f"postgresql://nobody@127.0.0.1:{closed}/nodb"],
            stdout=output, stderr=subprocess.STDOUT, cwd=ROOT,
        )  # fmt: skip
        started = time.monotonic()
        statuses = set()
        while process.poll() is None and time.monotonic() - started < 60:
            with contextlib.suppress(grpc.RpcError):  # not listening yet
                statuses.add(health_status(f"127.0.0.1:{port}", timeout=1))
            time.sleep(0.3)
        took = time.monotonic() - started
    assert process.wait(30) == 1
    text = log.read_text()
    assert "Traceback" not in text, text
    assert statuses == {"NOT_SERVING"}, statuses
    assert took < 30, f"gave up after {took:.0f} s, asked to after 6"
    lines = [json.loads(line)["message"] for line in text.splitlines() if line.startswith("{")]
    tries = [line for line in lines if "the database is not reachable" in line]
    # Each try names what it tried and the option it came from, and waits twice as long as the last.
    assert all(f"port={closed}" in line and "(--database-url)" in line for line in tries), tries
    waits = [float(re.search(r"trying again in ([\d.]+) s", line).group(1)) for line in tries]
    assert waits[:3] == [0.5, 1.0, 2.0], waits
    assert len(tries) <= 5, tries
    # The worker or the bulk worker, whichever gives up first (the supervisor then stops the other).
    gave_up = [line for line in lines if "worker cannot start" in line]
    assert gave_up and all("--database-wait-seconds 6" in line and f"port={closed}" in line for line in gave_up), lines


@pytest.mark.parametrize(
    ("url", "problem"),
    [
        ("postgresql://u:secret@db.internal:5432/contextfold", None),
        ("host=a,b port=5432,5433 dbname=cf target_session_attrs=read-write", None),
        ("host=/tmp/socket-folder dbname=cf", None),
        ("notaurl", 'missing "=" after "notaurl"'),
        ("postgresql://h:99999/db", 'the port "99999" is not a number from 1 to 65535'),
        ("host=a,b port=5432,x", 'the port "x"'),
        ("postgresql://h/db?sslmode=on", 'sslmode "on" is not one of disable, allow, prefer'),
        ("host=a target_session_attrs=rw", 'target_session_attrs "rw" is not one of any, read-write'),
    ],
)
def test_a_database_url_libpq_cannot_use_is_told_why_before_connecting(url: str, problem: str | None) -> None:
    found = url_problem(url)
    assert found == problem if problem is None else problem in (found or ""), found
    assert "secret" not in described(url)


@pytest.mark.parametrize(
    ("key", "problem"),
    [
        ("cfk_…", "holds '…' (U+2026) at position 4: it is a page's placeholder (cfk_…), not a key"),
        ("cfk_0011aabb_secret with space", "holds a space (U+0020) at position 19, which a header cannot carry"),
        ("cfk_é", "holds latin small letter e with acute (U+00E9) at position 4"),
        ("cfk_...", "looks like a placeholder"),
        ("<your key>", "looks like a placeholder"),
        ("$CONTEXTFOLD_API_KEY", "looks like a placeholder"),
        ("   ", "is empty"),
    ],
)
def test_the_python_client_refuses_a_key_that_cannot_be_one_before_any_call(
    key: str, problem: str, monkeypatch
) -> None:
    with pytest.raises(InvalidApiKey) as given:
        Client("127.0.0.1:1", api_key=key)
    assert str(given.value).startswith(f"the API key from api_key {problem}"), given.value
    monkeypatch.setenv("CONTEXTFOLD_API_KEY", key)
    with pytest.raises(InvalidApiKey, match=r"^the API key from CONTEXTFOLD_API_KEY "):
        Client("127.0.0.1:1")


def test_a_real_key_shape_passes_the_check() -> None:
    assert key_problem("cfk_0011aabb_" + "A-z_9" * 8) is None


def test_the_cli_names_the_option_or_the_variable_a_bad_key_came_from() -> None:
    def cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-m", "contextfold.cli", "--address", "127.0.0.1:1", *args, "stores", "list"],
            capture_output=True, text=True, cwd=ROOT, timeout=60, env={**os.environ, **(env or {})},
        )  # fmt: skip

    flagged = cli("--api-key", "cfk_…")
    assert flagged.returncode == 1
    assert flagged.stderr.startswith("error: the API key from --api-key holds '…' (U+2026)"), flagged.stderr
    from_environment = cli(env={"CONTEXTFOLD_API_KEY": "cfk_…"})
    assert from_environment.stderr.startswith("error: the API key from CONTEXTFOLD_API_KEY holds"), (
        from_environment.stderr
    )
    assert cli("--api-key", "").stderr.startswith("error: the API key from --api-key is empty")
    for ended in (flagged, from_environment):
        assert "INTERNAL" not in ended.stderr and "Traceback" not in ended.stderr


def test_an_id_another_store_holds_is_refused_naming_that_store_and_nothing_changes(client, make_store) -> None:
    first, second = make_store("clash-a"), make_store("clash-b")
    entry_id = unique("shared-id")
    client.add_memories(first, [{"id": entry_id, "content": "Ada lives in Lisbon"}])
    with pytest.raises(AlreadyExists) as clash:
        client.add_memories(second, [{"id": entry_id, "content": "Ada lives in Lisbon"}])
    assert clash.value.message == (
        f"memories[0].id: memory {entry_id!r} is held by store {first!r}: an id is unique across the namespace's"
        f" stores (add to {first!r}, or give this entry another id)"
    )
    assert clash.value.resource == ("memory", entry_id)
    assert client.get_memory(entry_id).store == first
    assert list(client.list_memories(second)) == []
    # In its own store, what differs is named.
    with pytest.raises(AlreadyExists, match=r"already exists in store '.+' with a different content, user_id \("):
        client.add_memories(first, [{"id": entry_id, "content": "Ada lives in Oslo", "user_id": "ada"}])
    with pytest.raises(AlreadyExists, match=r"with a different metadata \("):
        client.add_memories(first, [{"id": entry_id, "content": "Ada lives in Lisbon", "metadata": {"n": 1}}])


def test_a_printed_error_shows_its_status_reason_and_fields_decoded(client) -> None:
    with pytest.raises(InvalidArgument) as bad:
        client.search_memories("  ")
    (field, why) = bad.value.field_violations[0]
    assert str(bad.value) == f"INVALID_ARGUMENT: {bad.value.message} ({field}: {why})"
    missing = unique("no-such-entry")
    with pytest.raises(NotFound) as absent:
        client.get_memory(missing)
    assert str(absent.value).endswith(f"(resource: memory {missing})"), str(absent.value)


def test_the_first_install_says_what_it_installs_and_shows_pips_progress() -> None:
    planned = subprocess.run(
        ["make", "-n", "-B", ".venv/.server-installed"], capture_output=True, text=True, cwd=ROOT, timeout=60
    ).stdout.splitlines()
    installs = [line for line in planned if " install " in line]
    said = next(index for index, line in enumerate(planned) if line.startswith("echo ") and "installing" in line)
    assert installs and all(planned.index(line) > said for line in installs), planned
    assert not any("--quiet" in line or " -q " in line for line in installs), installs


@dataclass
class MadeRun:
    """An open server of its own, as `make run` is, holding the store docs/mcp.md's commands name (its
    own: the suite's shared server keeps the name `notes` free for the pages that create it)."""

    server: ServerProcess
    ana: str


@pytest.fixture(scope="module")
def made_run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MadeRun]:
    with serving(tmp_path_factory.mktemp("made-run")) as server, Client(server.address, timeout=30) as cf:
        cf.create_store("notes")
        (ana,) = cf.add_memories("notes", [{"content": "Ana parks on level 3", "user_id": "ana"}])
        yield MadeRun(server, ana.id)


def test_the_mcp_pages_stdio_block_runs_against_make_run_as_printed(made_run: MadeRun) -> None:
    server, notes = made_run.server, made_run.ana
    line = replacing(
        printed("docs/mcp.md", ".venv/bin/contextfold --address localhost:50051 mcp --store notes --user-id ana"),
        {"localhost:50051": server.address},
    )
    host = McpClient(StdioServerParameters(command="bash", args=["-euc", line], env=environment(), cwd=str(ROOT)))
    found = mcp_run(once(host, "recall", query="Where does Ana park?"))
    assert notes in [item["id"] for item in found["entries"]]


def test_the_mcp_pages_http_block_runs_against_make_run_as_printed(made_run: MadeRun) -> None:
    server, notes = made_run.server, made_run.ana
    port = free_port()
    line = replacing(
        printed("docs/mcp.md", ".venv/bin/contextfold --address localhost:50051 mcp --transport http"),
        {"localhost:50051": server.address, "--port 8765": f"--port {port}"},
    )
    with running_printed(line, ROOT, listening(port)) as process:
        served = HttpServer(f"http://127.0.0.1:{port}/mcp", process)
        found = mcp_run(once(served.client(None), "recall", query="Where does Ana park?"))
    assert notes in [item["id"] for item in found["entries"]]


def test_the_mcp_pages_first_install_runs_in_the_checkouts_venv_as_printed() -> None:
    """Its first block, pasted in the checkout after `make run`: the extra lands in `.venv`, which then
    has the MCP SDK `contextfold mcp` imports."""
    run_printed(printed("docs/mcp.md", ".venv/bin/pip install -e './client/python[mcp]'"), ROOT)
    imported = subprocess.run(
        [str(ROOT / ".venv/bin/python"), "-c", "import contextfold.mcp_server, mcp; print('ok')"],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert imported.stdout == "ok\n", imported.stderr


def test_the_strands_pages_first_blocks_run_against_make_run_as_printed(made_run: MadeRun) -> None:
    """docs/strands.md's first blocks, pasted in the checkout one after the other: the extra goes into
    `.venv`, the store is made, and the memory store the agent's MemoryManager uses adds the fact and
    finds it, printing its score and content."""
    address = {"localhost:50051": made_run.server.address}
    run_printed(replacing(printed("docs/strands.md", ".venv/bin/pip install -e"), address), ROOT)
    found = run_printed(replacing(printed("docs/strands.md", 'ContextfoldMemoryStore("prefs"'), address), ROOT)
    (line,) = found.stdout.splitlines()
    score, content = line.split(" ", 1)
    assert content == "Ada wants distances in kilometres"
    assert float(score) > 0.3, line
    with Client(made_run.server.address) as cf:
        (held,) = list(cf.list_memories("prefs", scope={"user_id": "ada"}))
    assert held.content == content and held.id.startswith("strands-")


def test_every_cli_command_and_subcommand_says_what_it_does() -> None:
    def unsaid(parser: argparse.ArgumentParser, path: str) -> list[str]:
        missing = []
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                helped = {choice.dest for choice in action._choices_actions if choice.help}
                for name, sub in action.choices.items():
                    if name not in helped:
                        missing.append(f"{path} {name}")
                    missing += unsaid(sub, f"{path} {name}")
        return missing

    assert unsaid(build_parser(), "contextfold") == []


def test_whole_numbers_in_metadata_come_back_whole_from_the_client_and_the_cli(server, client, make_store) -> None:
    store = make_store("whole")
    metadata = {"rating": 5, "ratio": 0.5, "place": {"floor": 3, "rooms": [1, 2.5]}, "big": 2**53 + 2}
    (added,) = client.add_memories(store, [{"content": "Ada's flat", "metadata": metadata}])
    shown = message_dict(added)["metadata"]
    assert shown == {"rating": 5, "ratio": 0.5, "place": {"floor": 3, "rooms": [1, 2.5]}, "big": float(2**53 + 2)}
    assert type(shown["rating"]) is int and type(shown["place"]["rooms"][0]) is int
    got = subprocess.run(
        [sys.executable, "-m", "contextfold.cli", "--address", server.address, "memory", "get", added.id],
        capture_output=True, text=True, cwd=ROOT, timeout=60,
    )  # fmt: skip
    # As JSON readers read it (the keys in whatever order the Struct keeps them): 5, not 5.0.
    printed_metadata = json.loads(got.stdout)["metadata"]
    assert printed_metadata["rating"] == 5 and type(printed_metadata["rating"]) is int, got.stdout
    assert type(printed_metadata["place"]["floor"]) is int and printed_metadata["ratio"] == 0.5, got.stdout


def test_mcp_over_http_stops_on_sigterm_within_its_grace_and_says_so(server, tmp_path) -> None:
    log = tmp_path / "mcp.log"
    with log.open("w") as output:
        process = subprocess.Popen(
            [sys.executable, "-m", "contextfold.cli", "--address", server.address, "mcp", "--transport", "http",
             "--port", "0"],
            stderr=output, stdout=subprocess.DEVNULL, cwd=ROOT,
        )  # fmt: skip
    url = wait_for(lambda: re.search(r"serving on (http://\S+)", log.read_text()), 60, what="mcp to serve").group(1)
    served = HttpServer(url, process)
    mcp_run(once(served.client(None), "list_stores"))
    asked = time.monotonic()
    process.send_signal(signal.SIGTERM)
    assert process.wait(30) == 0
    took = time.monotonic() - asked
    assert took < STOP_GRACE_SECONDS + 1, f"stopped {took:.1f} s after SIGTERM"
    said = log.read_text().splitlines()
    assert "contextfold mcp: stopping (SIGTERM): calls in flight finish" in said, said
    assert said[-1].startswith("contextfold mcp: stopped"), said


def test_start_up_says_what_the_data_directory_holds_and_how_to_start_clean(tmp_path) -> None:
    with serving(tmp_path) as first, Client(first.address, timeout=30) as cf:
        assert f"data directory {tmp_path / 'pgdata'} (the embedded Postgres): no stores yet" in first.log()
        cf.create_store("notes")
        cf.add_memories("notes", ["Ada likes tea", "Ada lives in Lisbon"])
    with serving(tmp_path) as second:
        said = [line for line in second.log().splitlines() if "data directory" in line]
    assert len(said) == 1, said
    assert f"data directory {tmp_path / 'pgdata'} (the embedded Postgres) holds 1 store and 2 entries" in said[0]
    assert "to start clean, give --data-dir a new folder" in said[0]
