"""A real Strands Python `Agent` (strands-agents 1.62) with contextfold's plugin and memory store.

The agent's model is scripted: it answers from a list and records the exact
input of every call, so each test asserts what the model saw.
"""

from __future__ import annotations

import asyncio
import json
import logging
import socket
import time
from typing import Any

import psutil
import pytest
from contextfold import Client
from contextfold.strands import ContextfoldMemoryStore, ContextInjection, from_state
from strands import Agent, tool
from strands.memory import InvocationTrigger, MemoryManager, ModelExtractor

from harness.messages import unique
from harness.polling import wait_for
from harness.relay import relayed
from harness.servers import free_port
from harness.strands_model import ScriptedModel


def texts(message: dict) -> list[str]:
    return [block["text"] for block in message["content"] if "text" in block]


@pytest.fixture
def prefs(client: Client, make_store) -> str:
    store = make_store("prefs")
    client.add_memories(
        store,
        [
            {"content": "User prefers dark mode in every editor", "user_id": "ana"},
            {"content": "User likes the Solarized theme", "user_id": "ana"},
            {"content": "User edits code in vim", "user_id": "ana"},
            {"content": "Bob prefers light themes", "user_id": "bob"},
        ],
    )
    return store


def test_the_model_sees_the_memory_block_and_history_stays_clean_and_the_next_turn_gets_new_entries(
    server, client: Client, prefs: str
) -> None:
    model = ScriptedModel(["Solarized Dark, then.", "vim, as always."])
    ids = {memory.content.split()[-1]: memory.id for memory in client.list_memories(prefs)}
    reports = []
    injection = ContextInjection(
        target=server.address, stores=[prefs], scope={"user_id": "ana"}, max_entries=2, on_report=reports.append
    )
    agent = Agent(model=model, plugins=[injection], callback_handler=None)

    result = agent("Which editor theme should I pick?")

    assert str(result).strip() == "Solarized Dark, then."
    (first,) = model.inputs
    assert texts(first[-1]) == [
        "Which editor theme should I pick?",
        f'\n\n<memory>\n<entry source="{prefs}">User prefers dark mode in every editor</entry>\n'
        f'<entry source="{prefs}">User likes the Solarized theme</entry>\n</memory>',
    ]
    (report,) = reports
    assert report.injected
    assert report.query == "Which editor theme should I pick?"
    assert [entry.store for entry in report.entries] == [prefs, prefs]
    # The fold is per call: the agent's own conversation holds only what was said.
    assert [texts(message) for message in agent.messages] == [
        ["Which editor theme should I pick?"],
        ["Solarized Dark, then."],
    ]

    agent("Which editor do I use?")
    second = model.inputs[1]
    # What was injected stays with its message, as an InjectedBlock kept in the history would,
    # and the service leaves those entries out: the new turn gets the one not yet shown.
    assert texts(second[0]) == texts(first[-1])
    assert texts(second[-1]) == [
        "Which editor do I use?",
        f'\n\n<memory>\n<entry source="{prefs}">User edits code in vim</entry>\n</memory>',
    ]
    assert [entry.id for entry in reports[1].entries] == [ids["vim"]]
    assert [texts(message) for message in agent.messages][2] == ["Which editor do I use?"]
    ledger = agent.state.get("contextfold")["contextfold:injection"]
    assert [(record["index"], [block["entryIds"] for block in record["blocks"]]) for record in ledger] == [
        (0, [[entry.id for entry in report.entries]]),
        (2, [[ids["vim"]]]),
    ]


def test_with_the_service_down_what_was_injected_before_is_still_shown_and_nothing_new_is(
    server, prefs: str, caplog
) -> None:
    model = ScriptedModel(["Solarized Dark, then.", "vim, as always."])
    with relayed(server.address) as service:
        injection = ContextInjection(target=service.address, stores=[prefs], scope={"user_id": "ana"}, max_entries=2)
        agent = Agent(model=model, plugins=[injection], callback_handler=None)
        agent("Which editor theme should I pick?")
        injected = texts(model.inputs[0][-1])
        assert "<memory>" in injected[1]

        service.cut()
        agent("Which editor do I use?")
    second = model.inputs[1]
    assert texts(second[0]) == injected, "the first turn's block, shown again from the agent's state"
    assert texts(second[-1]) == ["Which editor do I use?"]
    assert "contextfold inject failed" in caplog.text
    assert [record["index"] for record in agent.state.get("contextfold")["contextfold:injection"]] == [0]


@pytest.mark.parametrize("user_turn, every_turn", [("user_turn", "every_turn"), ("userTurn", "everyTurn")])
def test_a_tool_result_turn_is_not_a_user_turn(server, prefs: str, user_turn: str, every_turn: str) -> None:
    """Python's trigger names and the Strands SDKs' (as the TypeScript plugin takes them) alike."""

    @tool
    def weather(city: str) -> str:
        """The weather in a city."""
        return "rain, 12C"

    # Which turn is searched is the point, not what is relevant to it: a min_score in place of the silence gate.
    plugin = ContextInjection(
        target=server.address, stores=[prefs], scope={"user_id": "ana"}, trigger=user_turn, min_score=-1.0
    )
    model = ScriptedModel([{"tool": "weather", "input": {"city": "Lisbon"}}, "Take a coat."])
    agent = Agent(model=model, tools=[weather], plugins=[plugin], callback_handler=None)

    agent("What should I wear in Lisbon today?")

    first, second = model.inputs
    assert "<memory>" in texts(first[-1])[-1]
    assert [list(block) for block in second[-1]["content"]] == [["toolResult"]]

    # Every turn: the tool-result turn is searched with the assistant's last words.
    say = "Let me check the weather, and what you like to wear."
    model = ScriptedModel([{"say": say, "tool": "weather", "input": {"city": "Lisbon"}}, "Take a coat."])
    reports = []
    every_turn = ContextInjection(
        target=server.address,
        stores=[prefs],
        scope={"user_id": "ana"},
        trigger=every_turn,
        max_entries=1,
        min_score=-1.0,
        on_report=reports.append,
    )
    Agent(model=model, tools=[weather], plugins=[every_turn], callback_handler=None)("What should I wear?")
    assert [report.query for report in reports] == ["What should I wear?", say]
    second = model.inputs[1]
    assert [list(block) for block in second[-1]["content"]] == [["toolResult"], ["text"]]
    assert second[-1]["content"][1]["text"].startswith("<memory>\n")


def test_a_listener_that_raises_does_not_keep_the_memory_from_the_model(server, prefs: str, caplog) -> None:
    def broken(report: Any) -> None:
        raise RuntimeError("the listener's own bug")

    model = ScriptedModel(["Dark it is."])
    injection = ContextInjection(target=server.address, stores=[prefs], scope={"user_id": "ana"}, on_report=broken)
    agent = Agent(model=model, plugins=[injection], callback_handler=None)
    with caplog.at_level(logging.WARNING, logger="contextfold.strands"):
        assert str(agent("Which editor theme should I pick?")).strip() == "Dark it is."
    assert "User prefers dark mode in every editor" in texts(model.inputs[0][-1])[1]
    assert "the listener's own bug" in caplog.text


def test_several_instances_each_fold_their_own_block_and_never_search_with_the_others(
    server, client: Client, make_store, prefs: str
) -> None:
    travel = make_store("travel")
    client.add_memories(travel, ["User flies from Lisbon airport", "User prefers aisle seats on planes"])
    prefs_reports: list[Any] = []
    travel_reports: list[Any] = []
    plugins = [
        ContextInjection(
            name="contextfold:prefs",
            target=server.address,
            stores=[prefs],
            scope={"user_id": "ana"},
            max_entries=1,
            on_report=prefs_reports.append,
        ),
        ContextInjection(
            name="contextfold:travel",
            target=server.address,
            stores=[travel],
            max_entries=1,
            format="bullets",
            on_report=travel_reports.append,
        ),
    ]
    model = ScriptedModel(["Booked.", "Done."])
    agent = Agent(model=model, plugins=plugins, callback_handler=None)

    ask = "Book my flight and set up the editor theme on my laptop"
    agent(ask)
    first = texts(model.inputs[0][-1])
    assert first[0] == ask and first[1].startswith("\n\n<memory>") and first[2].startswith("\n\n- ")
    # The second instance searched with the user's words, not with the first one's block.
    assert [report.query for report in prefs_reports + travel_reports] == [ask, ask]

    agent("Anything else I should know about my flights or my editor theme?")
    second = model.inputs[1]
    assert texts(second[0]) == first, "both blocks stay with the message they were folded into"
    new = texts(second[-1])
    assert len(new) == 3 and all(block not in first for block in new[1:])
    for reports in (prefs_reports, travel_reports):
        assert {entry.id for entry in reports[0].entries}.isdisjoint(entry.id for entry in reports[1].entries)

    with pytest.raises(ValueError, match="already registered"):
        Agent(model=model, plugins=[plugins[0], ContextInjection(name="contextfold:prefs")], callback_handler=None)


def test_scope_and_stores_come_from_the_agents_state_at_each_call(server, client: Client, prefs: str) -> None:
    bobs = [memory.id for memory in client.list_memories(prefs, scope={"user_id": "bob"})]
    reports: list[Any] = []
    injection = ContextInjection(
        target=server.address,
        stores=lambda agent: agent.state.get("stores"),
        scope=from_state("user"),
        max_entries=1,
        on_report=reports.append,
    )
    agent = Agent(
        model=ScriptedModel(["Light.", "Dark."]),
        plugins=[injection],
        state={"user": {"user_id": "bob"}, "stores": [prefs]},
        callback_handler=None,
    )
    agent("Which themes do I like?")
    agent.state.set("user", {"user_id": "ana"})
    agent("Which themes do I like, again?")
    assert [entry.id for entry in reports[0].entries] == bobs
    assert reports[1].entries and reports[1].entries[0].id not in bobs


def test_a_message_trimmed_from_the_history_takes_its_record_with_it(server, prefs: str) -> None:
    reports: list[Any] = []
    injection = ContextInjection(
        target=server.address, stores=[prefs], scope={"user_id": "ana"}, max_entries=1, on_report=reports.append
    )
    model = ScriptedModel(["Solarized.", "Still Solarized."])
    agent = Agent(model=model, plugins=[injection], callback_handler=None)
    agent("Which editor theme should I pick?")
    del agent.messages[:2]  # as a conversation manager trims the history
    agent("Tell me again, which editor theme should I pick?")

    # The model no longer sees the first block, so its entry may come back.
    assert [texts(message)[0] for message in model.inputs[1]] == ["Tell me again, which editor theme should I pick?"]
    assert reports[1].entries[0].id == reports[0].entries[0].id
    (record,) = agent.state.get("contextfold")["contextfold:injection"]
    assert record["index"] == 0 and record["blocks"][0]["entryIds"] == [reports[1].entries[0].id]


def established(port: int) -> int:
    """This process's open connections to `port`."""
    return sum(
        1
        for connection in psutil.Process().net_connections("tcp")
        if connection.raddr and connection.raddr.port == port and connection.status == psutil.CONN_ESTABLISHED
    )


def test_an_agent_on_one_event_loop_keeps_one_connection_which_close_ends(server, prefs: str) -> None:
    port = int(server.address.rsplit(":", 1)[1])
    before = established(port)

    async def converse() -> None:
        injection = ContextInjection(target=server.address, stores=[prefs], scope={"user_id": "ana"})
        agent = Agent(model=ScriptedModel(["One.", "Two.", "Three."]), plugins=[injection], callback_handler=None)
        for ask in ("Which theme?", "Which editor?", "Which editor theme?"):
            await agent.invoke_async(ask)
        assert established(port) == before + 1
        await injection.close()
        wait_for(lambda: established(port) == before, 5, what="the plugin's connection to close")

    asyncio.run(converse())


@pytest.fixture
def silent_port() -> Any:
    """A port that accepts connections and never answers: a service that hangs."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(16)
        yield listener.getsockname()[1]


@pytest.mark.parametrize("service", ["down", "hanging"])
def test_the_agent_works_when_the_service_is_down_or_slow(service: str, silent_port: int, caplog) -> None:
    address = f"127.0.0.1:{free_port() if service == 'down' else silent_port}"
    model = ScriptedModel(["Hello!"])
    agent = Agent(model=model, plugins=[ContextInjection(target=address, timeout=0.3)], callback_handler=None)

    started = time.monotonic()
    with caplog.at_level(logging.WARNING, logger="contextfold.strands"):
        result = agent("Hi there")
    elapsed = time.monotonic() - started

    assert str(result).strip() == "Hello!"
    assert model.inputs == [[{"role": "user", "content": [{"text": "Hi there"}]}]]
    assert "contextfold inject failed" in caplog.text
    # The user's timeout bounds the wait (the client's default would be 10 s).
    assert elapsed < 5


def test_memory_tools_and_extraction_use_the_service(server, client: Client, make_store) -> None:
    store = make_store("notes")
    scope = {"user_id": unique("user")}

    def notes(**options: Any) -> ContextfoldMemoryStore:
        return ContextfoldMemoryStore(store, target=server.address, description="Notes", scope=scope, **options)

    # add_memory writes through the service.
    writer = ScriptedModel([{"tool": "add_memory", "input": {"entries": ["User's cat is named Miso"]}}, "Noted."])
    Agent(
        model=writer,
        memory_manager=MemoryManager(stores=[notes()], add_tool_config=True, injection=False),
        callback_handler=None,
    )("My cat is named Miso.")
    stored = [memory.content for memory in client.list_memories(store, scope=scope)]
    assert stored == ["User's cat is named Miso"]

    # search_memory, in another agent, reads it back: the model sees it in the tool result.
    reader = ScriptedModel([{"tool": "search_memory", "input": {"query": "what is my cat called"}}, "Miso."])
    Agent(
        model=reader,
        memory_manager=MemoryManager(stores=[notes()], injection=False),
        callback_handler=None,
    )("What's my cat called?")
    (result,) = [block["toolResult"] for block in reader.inputs[1][-1]["content"]]
    found = json.loads(result["content"][0]["text"]) if "text" in result["content"][0] else result["content"][0]["json"]
    assert [item["content"] for item in found] == ["User's cat is named Miso"]
    assert found[0]["store_name"] == store

    # Extraction distills the turn with the agent's model and stores the facts in the service,
    # once each even when the same fact is extracted twice.
    def extract(messages: list[dict], system_prompt: str | None) -> str:
        assert "Return ONLY a JSON array" in (system_prompt or "")
        return json.dumps([{"content": "User lives in Lisbon"}])

    extractor = ScriptedModel(["Lovely city.", extract, "Indeed.", extract])
    agent = Agent(
        model=extractor,
        memory_manager=MemoryManager(
            stores=[notes(extraction={"trigger": [InvocationTrigger()], "extractor": ModelExtractor()})],
            injection=False,
        ),
        callback_handler=None,
    )
    agent("I live in Lisbon.")
    agent("Lisbon is sunny.")
    stored = sorted(memory.content for memory in client.list_memories(store, scope=scope))
    assert stored == ["User lives in Lisbon", "User's cat is named Miso"]


def test_an_entry_id_is_the_one_the_typescript_store_derives() -> None:
    store = ContextfoldMemoryStore("shared-notes", target="127.0.0.1:1", scope={"user_id": "ana"})
    # client/typescript/test/strands.test.ts asserts the TypeScript store derives this same id.
    assert store.entry_id("User likes tea", {"topic": "drinks"}) == "strands-2259686f58e2d1f61f0cf695152d9310"


def test_server_side_extraction_remembers_the_users_turns_once(server, client: Client, make_store) -> None:
    """A store without an extractor of the agent's takes the raw conversation (`add_messages`): the
    service's Remember keeps the user's turns, each once, and the assistant's replies not at all."""
    store = make_store("turns")
    scope = {"user_id": unique("user")}
    memories = ContextfoldMemoryStore(
        store, target=server.address, scope=scope, extraction={"trigger": [InvocationTrigger()]}
    )
    agent = Agent(
        model=ScriptedModel(["Noted, Porto it is.", "Got it."]),
        memory_manager=MemoryManager(stores=[memories], injection=False),
        callback_handler=None,
    )
    agent("I am moving to Porto in May.")
    agent("I will need a two-bedroom flat.")

    def stored() -> list[str]:
        return sorted(memory.content for memory in client.list_memories(store, scope=scope))

    wanted = ["I am moving to Porto in May.", "I will need a two-bedroom flat."]
    wait_for(lambda: stored() == wanted, 10, what="the turns to be remembered")
    assert all(memory.user_id == scope["user_id"] for memory in client.list_memories(store, scope=scope))


def test_a_store_filter_narrows_every_search(server, client: Client, make_store) -> None:
    store = make_store("filtered-notes")
    client.add_memories(
        store,
        [
            {"content": "Standup moved to 10am", "metadata": {"team": "core"}},
            {"content": "Standup for design is at 11am", "metadata": {"team": "design"}},
        ],
    )
    core = ContextfoldMemoryStore(store, target=server.address, filter={"team": "core"})
    found = asyncio.run(core.search("when is standup"))
    assert [entry.content for entry in found] == ["Standup moved to 10am"]
