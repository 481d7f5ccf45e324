"""pydantic-ai agents with contextfold's injection (`contextfold.pydantic_ai.ContextfoldCapability`), against
a real server, with pydantic-ai's own agent loop and its `FunctionModel` (a model whose answers a
function of the tests' gives, tool calls included; the tests keep the messages of every request).

Each behaviour the capability promises: the block folded into the latest user prompt, the run's
history untouched; a ten-step tool loop searching once; a later run bringing new entries only, the
earlier block shown again; an outage changing nothing; two users (by the run's deps) each seeing
their own memory.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import Any

import pytest
from contextfold.pydantic_ai import ContextfoldCapability
from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelRequest, ModelResponse, TextPart, ToolCallPart, UserPromptPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from harness.servers import ServerProcess, free_port

from .adapters import Reports, add_pets_and_tea, assert_page_installs_and_runs
from .pages import printed


class Scripted:
    """A `FunctionModel`'s function answering with `replies` in turn, keeping each request's messages."""

    def __init__(self, *replies: ModelResponse) -> None:
        self.replies = list(replies)
        self.received: list[list[ModelMessage]] = []

    def __call__(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        self.received.append(list(messages))
        return self.replies[len(self.received) - 1]


def said(text: str) -> ModelResponse:
    return ModelResponse(parts=[TextPart(text)])


def tool_step(number: int) -> ModelResponse:
    return ModelResponse(parts=[ToolCallPart("clock", {}, tool_call_id=f"call-{number}")])


def prompts(messages: list[ModelMessage]) -> list[str]:
    return [
        part.content
        for message in messages
        if isinstance(message, ModelRequest)
        for part in message.parts
        if isinstance(part, UserPromptPart) and isinstance(part.content, str)
    ]


def ask(agent: Agent, capability: ContextfoldCapability, prompt: str, **options: Any) -> Any:
    """`agent.run(prompt)` in an event loop of its own, the capability's client closed after it."""

    async def run() -> Any:
        try:
            return await agent.run(prompt, **options)
        finally:
            await capability.close()

    return asyncio.run(run())


def agent_with(script: Scripted, capability: ContextfoldCapability, **options: Any) -> Agent:
    agent = Agent(FunctionModel(script), capabilities=[capability], **options)

    @agent.tool_plain
    def clock() -> str:
        """What time it is."""
        return "noon"

    return agent


@pytest.fixture
def notes(client, make_store) -> str:
    store = make_store("pydantic-ai")
    add_pets_and_tea(client, store)
    return store


def injecting(
    server: ServerProcess, store: str, reports: Reports | None = None, **options: Any
) -> ContextfoldCapability:
    return ContextfoldCapability(target=server.address, stores=[store], timeout=5, on_report=reports, **options)


def test_the_model_gets_the_block_in_the_latest_user_prompt_and_the_history_keeps_the_prompt(server, notes) -> None:
    script = Scripted(said("Green tea."))
    capability = injecting(server, notes, max_entries=1, scope={"user_id": "ana"})
    result = ask(agent_with(script, capability), capability, "What do I drink in the morning?")
    (asked,) = prompts(script.received[0])
    assert asked.startswith("What do I drink in the morning?\n\n<memory>")
    assert "Ana drinks green tea every morning" in asked
    assert prompts(result.all_messages()) == ["What do I drink in the morning?"]


def test_a_ten_step_tool_loop_searches_once_and_shows_the_block_at_every_step(server, notes) -> None:
    reports = Reports([])
    script = Scripted(*(tool_step(number) for number in range(10)), said("It is noon."))
    capability = injecting(server, notes, reports, scope={"user_id": "ana"})
    ask(agent_with(script, capability), capability, "What time is it, and what is my cat called?")
    assert len(script.received) == 11
    assert len(reports.got) == 1, "one search for the user's turn"
    for messages in script.received:
        (asked,) = prompts(messages)
        assert "Ana's cat is called Miso" in asked


def test_a_later_run_gets_new_entries_only_and_the_earlier_block_is_shown_again(server, notes) -> None:
    reports = Reports([])
    script = Scripted(said("Green tea."), said("Miso."))
    capability = injecting(server, notes, reports, max_entries=1, scope={"user_id": "ana"})
    agent = agent_with(script, capability)
    first = ask(agent, capability, "What does Ana drink?")
    ask(agent, capability, "What does Ana drink, and her cat?", message_history=first.all_messages())
    assert reports.entries(0) == [f"{notes}-tea"]
    assert reports.entries(1) == [f"{notes}-cat"], "the tea, shown already, is not injected again"
    earlier, latest = prompts(script.received[1])
    assert "Ana drinks green tea every morning" in earlier, "the first turn's block, shown again"
    assert "Ana's cat is called Miso" in latest and "green tea" not in latest.split("<memory>")[1]


def test_an_outage_changes_nothing_and_warns_once(notes, caplog) -> None:
    script = Scripted(tool_step(0), said("noon"))
    capability = ContextfoldCapability(target=f"127.0.0.1:{free_port()}", stores=[notes])
    with caplog.at_level(logging.WARNING, logger="contextfold.pydantic_ai"):
        ask(agent_with(script, capability), capability, "What time is it?")
    assert [prompts(messages) for messages in script.received] == [["What time is it?"], ["What time is it?"]]
    warnings = [record for record in caplog.records if "contextfold inject failed" in record.getMessage()]
    assert len(warnings) == 1


@dataclass
class User:
    user_id: str


def test_two_users_each_see_their_own_memory(server, notes) -> None:
    script = Scripted(said("a"), said("b"))
    capability = injecting(server, notes, scope=lambda deps: {"user_id": deps.user_id})
    agent = agent_with(script, capability, deps_type=User)
    ask(agent, capability, "What are my pets called?", deps=User("ana"))
    ask(agent, capability, "What are my pets called?", deps=User("bob"))
    (ana,), (bob,) = (prompts(messages) for messages in script.received)
    assert "Miso" in ana and "Rex" not in ana
    assert "Rex" in bob and "Miso" not in bob


def test_the_page_installs_the_extra_in_a_clean_venv_and_its_example_prints_what_it_shows(server, tmp_path) -> None:
    install = printed("docs/pydantic-ai.md", "client/python[pydantic-ai]")
    command = printed("docs/pydantic-ai.md", "examples/pydantic_ai_agent.py")
    assert_page_installs_and_runs(
        "docs/pydantic-ai.md", install, "examples/pydantic_ai_agent.py", command, server.address, tmp_path
    )
