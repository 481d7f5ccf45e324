"""LangChain's `create_agent` and LangGraph's `create_react_agent` with contextfold's injection, against
a real server, with LangChain's own agent loop and a scripted chat model of the tests' own (it answers
with the replies it is given, tool calls included, and keeps every list of messages it was called with).

Each behaviour the adapters promise: the block folded into the latest user message, the graph's
messages untouched; a ten-step tool loop searching once; a later turn bringing new entries only, the
earlier block shown again; an outage changing nothing; two users' agents each seeing their own memory;
the async path; the prebuilt agent's hook.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
from contextfold.langchain import ContextfoldMiddleware, ContextfoldReactState, pre_model_hook
from langchain.agents import create_agent
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from pydantic import Field

from harness.servers import ServerProcess, free_port

from .adapters import Reports, add_pets_and_tea, assert_page_installs_and_runs
from .pages import printed


class Scripted(BaseChatModel):
    """A chat model answering with `replies` in turn, keeping each call's messages (`received`)."""

    replies: list[AIMessage]
    received: list[list[BaseMessage]] = Field(default_factory=list)

    @property
    def _llm_type(self) -> str:
        return "scripted"

    def bind_tools(self, tools: Any, **kwargs: Any) -> Scripted:  # type: ignore[override]
        return self

    def _generate(
        self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kw: Any
    ) -> ChatResult:
        self.received.append(list(messages))
        return ChatResult(generations=[ChatGeneration(message=self.replies[len(self.received) - 1])])


def scripted(*replies: AIMessage) -> Scripted:
    return Scripted(replies=list(replies))


@tool
def clock() -> str:
    """What time it is."""
    return "noon"


def tool_step(number: int) -> AIMessage:
    return AIMessage(content="", tool_calls=[{"id": f"call-{number}", "name": "clock", "args": {}}])


def texts(message: BaseMessage) -> str:
    return message.content if isinstance(message.content, str) else " ".join(map(str, message.content))


@pytest.fixture
def notes(client, make_store) -> str:
    store = make_store("langchain")
    add_pets_and_tea(client, store)
    return store


def middleware(
    server: ServerProcess, store: str, reports: Reports | None = None, **options: Any
) -> ContextfoldMiddleware:
    return ContextfoldMiddleware(target=server.address, stores=[store], timeout=5, on_report=reports, **options)


def test_the_model_gets_the_block_in_the_latest_user_message_and_the_state_keeps_the_message(server, notes) -> None:
    model = scripted(AIMessage(content="Green tea."))
    injection = middleware(server, notes, max_entries=1, scope={"user_id": "ana"})
    agent = create_agent(model, [], middleware=[injection])
    result = agent.invoke({"messages": [HumanMessage("What do I drink in the morning?")]})
    (seen,) = model.received
    asked = seen[-1]
    assert isinstance(asked, HumanMessage)
    assert asked.content.startswith("What do I drink in the morning?\n\n<memory>")
    assert "Ana drinks green tea every morning" in asked.content
    assert result["messages"][0].content == "What do I drink in the morning?"
    kept = result["contextfold"]["contextfold"][result["messages"][0].id]
    assert [block["entryIds"] for block in kept] == [[f"{notes}-tea"]]
    injection.close()


def test_a_ten_step_tool_loop_searches_once_and_shows_the_block_at_every_step(server, notes) -> None:
    reports = Reports([])
    model = scripted(*(tool_step(number) for number in range(10)), AIMessage(content="It is noon."))
    injection = middleware(server, notes, reports, scope={"user_id": "ana"})
    agent = create_agent(model, [clock], middleware=[injection])
    result = agent.invoke({"messages": [HumanMessage("What time is it, and what is my cat called?")]})
    assert len(model.received) == 11
    assert len(reports.got) == 1, "one search for the user's turn"
    for seen in model.received:
        (asked,) = [message for message in seen if isinstance(message, HumanMessage)]
        assert "Ana's cat is called Miso" in asked.content
        assert isinstance(seen[-1], HumanMessage | ToolMessage)
    assert sum(isinstance(message, ToolMessage) for message in result["messages"]) == 10
    injection.close()


def test_a_later_turn_gets_new_entries_only_and_the_earlier_block_is_shown_again(server, notes) -> None:
    reports = Reports([])
    model = scripted(AIMessage(content="Green tea."), AIMessage(content="Miso."))
    injection = middleware(server, notes, reports, max_entries=1, scope={"user_id": "ana"})
    agent = create_agent(model, [], middleware=[injection], checkpointer=InMemorySaver())
    thread = {"configurable": {"thread_id": "ana-1"}}
    agent.invoke({"messages": [HumanMessage("What does Ana drink?")]}, thread)
    agent.invoke({"messages": [HumanMessage("What does Ana drink, and her cat?")]}, thread)
    assert reports.entries(0) == [f"{notes}-tea"]
    assert reports.entries(1) == [f"{notes}-cat"], "the tea, shown already, is not injected again"
    first, _, second = model.received[1]
    assert "Ana drinks green tea every morning" in texts(first), "the first turn's block, shown again"
    assert "Ana's cat is called Miso" in texts(second) and "green tea" not in texts(second).split("<memory>")[1]
    injection.close()


def test_an_outage_changes_nothing_and_warns_once(notes, caplog) -> None:
    model = scripted(AIMessage(content="a"), AIMessage(content="b"))
    down = ContextfoldMiddleware(target=f"127.0.0.1:{free_port()}", stores=[notes])
    agent = create_agent(model, [], middleware=[down], checkpointer=InMemorySaver())
    thread = {"configurable": {"thread_id": "down"}}
    with caplog.at_level(logging.WARNING, logger="contextfold.langchain"):
        agent.invoke({"messages": [HumanMessage("What do I drink?")]}, thread)
        agent.invoke({"messages": [HumanMessage("And my cat?")]}, thread)
    assert [texts(message) for message in model.received[1] if isinstance(message, HumanMessage)] == [
        "What do I drink?",
        "And my cat?",
    ]
    warnings = [record for record in caplog.records if "contextfold inject failed" in record.getMessage()]
    assert len(warnings) == 1
    down.close()


@dataclass
class User:
    user_id: str


def test_two_users_agents_each_see_their_own_memory(server, notes) -> None:
    model = scripted(AIMessage(content="a"), AIMessage(content="b"))
    by_user: Callable[[Any], dict[str, str]] = lambda runtime: {"user_id": runtime.context.user_id}  # noqa: E731
    injection = middleware(server, notes, scope=by_user)
    agent = create_agent(model, [], middleware=[injection], context_schema=User)
    agent.invoke({"messages": [HumanMessage("What are my pets called?")]}, context=User("ana"))
    agent.invoke({"messages": [HumanMessage("What are my pets called?")]}, context=User("bob"))
    ana, bob = (texts(seen[-1]) for seen in model.received)
    assert "Miso" in ana and "Rex" not in ana
    assert "Rex" in bob and "Miso" not in bob
    injection.close()


def test_the_async_path_folds_as_the_sync_one_does(server, notes) -> None:
    model = scripted(tool_step(0), AIMessage(content="Miso."))
    reports = Reports([])
    injection = middleware(server, notes, reports, scope={"user_id": "ana"})
    agent = create_agent(model, [clock], middleware=[injection])

    async def ask() -> None:
        await agent.ainvoke({"messages": [HumanMessage("What is my cat called?")]})
        await injection.aclose()

    asyncio.run(ask())
    assert len(reports.got) == 1 and len(model.received) == 2
    assert all("Ana's cat is called Miso" in texts(seen[0]) for seen in model.received)


def test_create_react_agents_hook_folds_and_with_its_state_searches_once_a_turn(server, notes) -> None:
    from langgraph.prebuilt import create_react_agent

    reports = Reports([])
    model = scripted(tool_step(0), tool_step(1), AIMessage(content="Miso."))
    hook = pre_model_hook(target=server.address, stores=[notes], timeout=5, on_report=reports, scope={"user_id": "ana"})
    with pytest.warns(DeprecationWarning):
        agent = create_react_agent(model, [clock], pre_model_hook=hook, state_schema=ContextfoldReactState)
    result = agent.invoke({"messages": [HumanMessage("What is my cat called?")]})
    assert len(reports.got) == 1 and len(model.received) == 3
    assert all("Ana's cat is called Miso" in texts(seen[0]) for seen in model.received)
    assert result["messages"][0].content == "What is my cat called?"
    hook.close()


def test_the_page_installs_the_extra_in_a_clean_venv_and_its_example_prints_what_it_shows(server, tmp_path) -> None:
    install = printed("docs/langchain.md", "client/python[langchain]")
    command = printed("docs/langchain.md", "examples/langchain_agent.py")
    assert_page_installs_and_runs(
        "docs/langchain.md", install, "examples/langchain_agent.py", command, server.address, tmp_path
    )
