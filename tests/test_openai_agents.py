"""The OpenAI Agents SDK with contextfold's injection (`contextfold.openai_agents.ContextfoldInputFilter`),
against a real server, with the SDK's own `Runner` and a scripted model of the tests' own (the SDK's
`Model` interface: it answers with the output items it is given, function calls included, and keeps
the input of every call).

Each behaviour the filter promises: the block folded into the latest user message, the run's items
untouched; a ten-step tool loop searching once; a later turn bringing new entries only, the earlier
block shown again; an outage changing nothing; two users (by the run's context) each seeing their own
memory.
"""

from __future__ import annotations

import asyncio
import json
import logging
from dataclasses import dataclass
from typing import Any

import pytest
from agents import Agent, RunConfig, Runner, function_tool
from agents.items import ModelResponse
from agents.models.interface import Model
from agents.usage import Usage
from contextfold.openai_agents import ContextfoldInputFilter
from openai.types.responses import ResponseFunctionToolCall, ResponseOutputMessage, ResponseOutputText

from harness.servers import ServerProcess, free_port

from .adapters import Reports, add_pets_and_tea, assert_page_installs_and_runs
from .pages import printed


class Scripted(Model):
    """A model answering with `outputs` in turn, keeping each call's input (`received`)."""

    def __init__(self, *outputs: Any) -> None:
        self.outputs = list(outputs)
        self.received: list[list[dict[str, Any]]] = []

    async def get_response(self, system_instructions, input, *args: Any, **kwargs: Any) -> ModelResponse:
        self.received.append(json.loads(json.dumps(input, default=str)))
        return ModelResponse(output=[self.outputs[len(self.received) - 1]], usage=Usage(), response_id=None)

    def stream_response(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError


def said(text: str) -> ResponseOutputMessage:
    content = [ResponseOutputText(type="output_text", text=text, annotations=[])]
    return ResponseOutputMessage(type="message", id="answer", role="assistant", status="completed", content=content)


def tool_step(number: int) -> ResponseFunctionToolCall:
    return ResponseFunctionToolCall(
        type="function_call",
        call_id=f"call-{number}",
        name="clock",
        arguments="{}",
        id=f"fc-{number}",
        status="completed",
    )


@function_tool
def clock() -> str:
    """What time it is."""
    return "noon"


def user_texts(received: list[dict[str, Any]]) -> list[str]:
    return [item["content"] for item in received if item.get("role") == "user"]


@pytest.fixture
def notes(client, make_store) -> str:
    store = make_store("openai-agents")
    add_pets_and_tea(client, store)
    return store


def run(agent: Agent, given: Any, injection: ContextfoldInputFilter, context: Any = None) -> Any:
    async def go() -> Any:
        try:
            config = RunConfig(call_model_input_filter=injection, tracing_disabled=True)
            return await Runner.run(agent, given, run_config=config, context=context, max_turns=20)
        finally:
            await injection.close()

    return asyncio.run(go())


def injecting(
    server: ServerProcess, store: str, reports: Reports | None = None, **options: Any
) -> ContextfoldInputFilter:
    return ContextfoldInputFilter(target=server.address, stores=[store], timeout=5, on_report=reports, **options)


def test_the_model_gets_the_block_in_the_latest_user_message_and_the_run_keeps_the_message(server, notes) -> None:
    model = Scripted(said("Green tea."))
    agent = Agent(name="assistant", model=model)
    result = run(
        agent, "What do I drink in the morning?", injecting(server, notes, max_entries=1, scope={"user_id": "ana"})
    )
    (asked,) = user_texts(model.received[0])
    assert asked.startswith("What do I drink in the morning?\n\n<memory>")
    assert "Ana drinks green tea every morning" in asked
    assert result.to_input_list()[0]["content"] == "What do I drink in the morning?"


def test_a_ten_step_tool_loop_searches_once_and_shows_the_block_at_every_step(server, notes) -> None:
    reports = Reports([])
    model = Scripted(*(tool_step(number) for number in range(10)), said("It is noon."))
    agent = Agent(name="assistant", model=model, tools=[clock])
    run(
        agent,
        "What time is it, and what is my cat called?",
        injecting(server, notes, reports, scope={"user_id": "ana"}),
    )
    assert len(model.received) == 11
    assert len(reports.got) == 1, "one search for the user's turn"
    for received in model.received:
        (asked,) = user_texts(received)
        assert "Ana's cat is called Miso" in asked
    assert sum(item.get("type") == "function_call_output" for item in model.received[-1]) == 10


def test_a_later_turn_gets_new_entries_only_and_the_earlier_block_is_shown_again(server, notes) -> None:
    reports = Reports([])
    model = Scripted(said("Green tea."), said("Miso."))
    agent = Agent(name="assistant", model=model)
    injection = injecting(server, notes, reports, max_entries=1, scope={"user_id": "ana"})
    first = run(agent, "What does Ana drink?", injection)
    later = [*first.to_input_list(), {"role": "user", "content": "What does Ana drink, and her cat?"}]
    run(agent, later, injection)
    assert reports.entries(0) == [f"{notes}-tea"]
    assert reports.entries(1) == [f"{notes}-cat"], "the tea, shown already, is not injected again"
    earlier, latest = user_texts(model.received[1])
    assert "Ana drinks green tea every morning" in earlier, "the first turn's block, shown again"
    assert "Ana's cat is called Miso" in latest and "green tea" not in latest.split("<memory>")[1]


def test_an_outage_changes_nothing_and_warns_once(notes, caplog) -> None:
    model = Scripted(tool_step(0), said("noon"))
    agent = Agent(name="assistant", model=model, tools=[clock])
    down = ContextfoldInputFilter(target=f"127.0.0.1:{free_port()}", stores=[notes])
    with caplog.at_level(logging.WARNING, logger="contextfold.openai_agents"):
        run(agent, "What time is it?", down)
    assert [user_texts(received) for received in model.received] == [["What time is it?"], ["What time is it?"]]
    warnings = [record for record in caplog.records if "contextfold inject failed" in record.getMessage()]
    assert len(warnings) == 1


@dataclass
class User:
    user_id: str


def test_two_users_each_see_their_own_memory(server, notes) -> None:
    model = Scripted(said("a"), said("b"))
    agent = Agent(name="assistant", model=model)
    injection = injecting(server, notes, scope=lambda context: {"user_id": context.user_id})
    run(agent, "What are my pets called?", injection, context=User("ana"))
    run(agent, "What are my pets called?", injection, context=User("bob"))
    (ana,), (bob,) = (user_texts(received) for received in model.received)
    assert "Miso" in ana and "Rex" not in ana
    assert "Rex" in bob and "Miso" not in bob


def test_the_page_installs_the_extra_in_a_clean_venv_and_its_example_prints_what_it_shows(server, tmp_path) -> None:
    install = printed("docs/openai-agents.md", "client/python[openai-agents]")
    command = printed("docs/openai-agents.md", "examples/openai_agents.py")
    assert_page_installs_and_runs(
        "docs/openai-agents.md", install, "examples/openai_agents.py", command, server.address, tmp_path
    )
