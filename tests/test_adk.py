"""Google ADK (`google-adk` 2.13) with contextfold's plugin and memory service.

ADK pins an OpenTelemetry older than the server's, so it runs in an environment of its own: the one
docs/adk.md prints, built as printed (nothing of ours in it but the client it installs). There
tests/adk_checks.py drives ADK's own `Runner` with a scripted `BaseLlm` against this session's server
and prints what each model call received; the tests below assert on it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from contextfold import Client

from harness.servers import ROOT, ServerProcess

from .adapters import add_pets_and_tea
from .pages import PAGES, blocks, printed, run_printed

INSTALL = printed("docs/adk.md", "client/python[adk]")
EXAMPLE = printed("docs/adk.md", "examples/adk_agent.py")


@pytest.fixture(scope="module")
def adk(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder laid out as the checkout is (its `client` and `examples`), with the page's `.venv-adk`."""
    folder = tmp_path_factory.mktemp("adk")
    for linked in ("client", "examples"):
        (folder / linked).symlink_to(ROOT / linked)
    run_printed(INSTALL, folder, timeout=900)
    return folder


@pytest.fixture(scope="module")
def seen(adk: Path, server: ServerProcess, client: Client) -> dict[str, Any]:
    store = f"adk-{id(adk):x}"
    client.create_store(store)
    add_pets_and_tea(client, store)
    python = adk / ".venv-adk" / "bin" / "python"
    checks = f"{python} {ROOT / 'tests' / 'adk_checks.py'} {server.address} {store}"
    done = run_printed(checks, adk, timeout=300, PYTHONPATH="", VIRTUAL_ENV="")
    return {"store": store, **json.loads(done.stdout)}


def test_the_model_gets_the_block_in_the_latest_user_message_and_the_session_keeps_the_message(seen) -> None:
    (asked,) = seen["block"]["asked"]
    assert asked.startswith("What do I drink in the morning?\n\n<memory>") and "green tea" in asked, asked
    assert seen["block"]["kept"] == ["What do I drink in the morning?"]


def test_a_ten_step_tool_loop_searches_once_and_shows_the_block_at_every_step(seen) -> None:
    loop = seen["tool_loop"]
    assert loop["calls"] == 11 and loop["responses"] == 10
    assert len(loop["reports"]) == 1, "one search for the user's turn"
    for (asked,) in loop["asked"]:
        assert "Ana's cat is called Miso" in asked


def test_a_later_turn_gets_new_entries_only_and_the_earlier_block_is_shown_again(seen) -> None:
    store = seen["store"]
    assert seen["later_turn"]["reports"] == [[f"{store}-tea"], [f"{store}-cat"]]
    earlier, latest = seen["later_turn"]["asked"]
    assert "Ana drinks green tea every morning" in earlier, "the first turn's block, shown again"
    assert "Ana's cat is called Miso" in latest and "green tea" not in latest.split("<memory>")[1]


def test_a_later_turn_through_another_plugin_and_runner_gets_new_entries_only_from_the_sessions_state(seen) -> None:
    store = seen["store"]
    assert seen["another_process"]["reports"] == [[f"{store}-tea"], [f"{store}-cat"]]
    earlier, latest = seen["another_process"]["asked"]
    assert "Ana drinks green tea every morning" in earlier, "the first turn's block, shown again from the state"
    assert "Ana's cat is called Miso" in latest and "green tea" not in latest.split("<memory>")[1]
    assert seen["another_process"]["state"] == ["contextfold:contextfold"]


def test_an_outage_changes_nothing_and_warns_once(seen) -> None:
    assert seen["outage"] == {"asked": [["What time is it?"], ["What time is it?"]], "warnings": 1}


def test_two_users_each_see_their_own_memory_by_the_sessions_user(seen) -> None:
    (ana,), (bob,) = seen["two_users"]["ana"], seen["two_users"]["bob"]
    assert "Miso" in ana and "Rex" not in ana
    assert "Rex" in bob and "Miso" not in bob


def test_the_memory_service_keeps_a_session_once_and_finds_it_for_its_user_only(seen) -> None:
    memory = seen["memory_service"]
    assert memory["found"][0] == "My flight to Lisbon leaves on Friday"
    assert memory["found"].count("My flight to Lisbon leaves on Friday") == 1, "a session added twice is kept once"
    first = memory["found_first"]
    assert first["id"].startswith("adk-") and first["author"] == "user" and first["timestamp"].endswith("Z")
    assert memory["others"] == [] and memory["other_app"] == [], "another user's, another app's search"
    seat = memory["seat"]
    assert seat["content"]["parts"][0]["text"] == "Ana prefers the window seat"
    assert seat["custom_metadata"]["topic"] == "travel"
    assert "<PAST_CONVERSATIONS>" in memory["preloaded"][0] and "Lisbon leaves on Friday" in memory["preloaded"][0]
    assert "My flight to Lisbon leaves on Friday" not in memory["after_delete"]


def test_the_page_installs_in_an_environment_of_its_own_and_its_example_prints_what_it_shows(
    adk: Path, server: ServerProcess
) -> None:
    text = PAGES["docs/adk.md"]
    assert blocks(text, "python")[0] == (ROOT / "examples" / "adk_agent.py").read_text()
    done = run_printed(EXAMPLE, adk, CONTEXTFOLD_ADDRESS=server.address, PYTHONPATH="", VIRTUAL_ENV="")
    assert done.stdout == blocks(text, "text")[0], done.stderr
