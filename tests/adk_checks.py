"""Google ADK with contextfold's plugin and memory service, run in a venv of ADK's own (google-adk pins
an OpenTelemetry older than the server's, so the two cannot share one): tests/test_adk.py runs this
file there against its live server and asserts on what it prints.

    python tests/adk_checks.py ADDRESS STORE

STORE holds Ana's tea and cat and Bob's dog (tests/adapters.py). Each check drives ADK's own `Runner`
with a scripted model of ADK's `BaseLlm` that records every request's contents, and prints one JSON
object: what each model call received, each Inject's report, what ADK kept.
"""

from __future__ import annotations

import asyncio
import json
import logging
import socket
import sys
from typing import Any

from contextfold.adk import ContextfoldMemoryService, ContextfoldPlugin
from google.adk.agents import LlmAgent
from google.adk.memory.memory_entry import MemoryEntry
from google.adk.models.base_llm import BaseLlm
from google.adk.models.llm_response import LlmResponse
from google.adk.runners import Runner
from google.adk.sessions import InMemorySessionService
from google.adk.tools.preload_memory_tool import PreloadMemoryTool
from google.genai import types
from pydantic import Field

ADDRESS, STORE = sys.argv[1], sys.argv[2]


class Scripted(BaseLlm):
    """Answers each call with the next reply (text, or a call of the `clock` tool), recording each
    request's contents."""

    replies: list[Any] = Field(default_factory=list)
    received: list[list[types.Content]] = Field(default_factory=list)

    async def generate_content_async(self, llm_request, stream=False):  # type: ignore[no-untyped-def]
        self.received.append([content.model_copy(deep=True) for content in llm_request.contents])
        reply = self.replies.pop(0)
        if isinstance(reply, str):
            part = types.Part(text=reply)
        else:
            call = types.FunctionCall(id=f"call-{len(self.received)}", name="clock", args=reply)
            part = types.Part(function_call=call)
        yield LlmResponse(content=types.Content(role="model", parts=[part]))


def clock(step: int) -> str:
    """The time."""
    return "noon"


def user_texts(contents: list[types.Content]) -> list[str]:
    """The text of each user content that is a person's (not a function's response)."""
    return [
        "".join(part.text or "" for part in content.parts or ())
        for content in contents
        if content.role == "user" and any(part.text for part in content.parts or ())
    ]


class Reports(list):
    def __call__(self, report: Any) -> None:
        self.append([entry.id for entry in report.entries])


async def ask(runner: Runner, user: str, session: str, text: str) -> None:
    message = types.Content(role="user", parts=[types.Part(text=text)])
    async for _ in runner.run_async(user_id=user, session_id=session, new_message=message):
        pass


async def agent_run(
    replies: list[Any], plugin: ContextfoldPlugin, turns: list[tuple[str, str, str]], **runner_options: Any
) -> tuple[Scripted, InMemorySessionService]:
    """Each turn (user, session, text) through one Runner; the model and the sessions, for what they saw."""
    model = Scripted(model="scripted", replies=list(replies))
    tools = runner_options.pop("tools", [clock])
    agent = LlmAgent(name="assistant", model=model, tools=tools)
    sessions = InMemorySessionService()
    runner = Runner(agent=agent, app_name="checks", session_service=sessions, plugins=[plugin], **runner_options)
    for user, session, _ in turns:
        if await sessions.get_session(app_name="checks", user_id=user, session_id=session) is None:
            await sessions.create_session(app_name="checks", user_id=user, session_id=session)
    for user, session, text in turns:
        await ask(runner, user, session, text)
    await plugin.close()
    return model, sessions


def injecting(reports: Reports | None = None, **options: Any) -> ContextfoldPlugin:
    return ContextfoldPlugin(target=ADDRESS, stores=[STORE], timeout=5, on_report=reports, **options)


async def block() -> dict[str, Any]:
    model, sessions = await agent_run(
        ["Green tea."], injecting(max_entries=1), [("ana", "s1", "What do I drink in the morning?")]
    )
    session = await sessions.get_session(app_name="checks", user_id="ana", session_id="s1")
    assert session is not None
    kept = user_texts([event.content for event in session.events if event.content])
    return {"asked": user_texts(model.received[0]), "kept": kept}


async def tool_loop() -> dict[str, Any]:
    reports = Reports()
    replies = [*({"step": step} for step in range(10)), "It is noon."]
    turns = [("ana", "s1", "What time is it, and what is my cat called?")]
    model, _ = await agent_run(replies, injecting(reports), turns)
    responses = sum(1 for c in model.received[-1] for p in c.parts or () if p.function_response is not None)
    asked = [user_texts(received) for received in model.received]
    return {"calls": len(model.received), "reports": reports, "asked": asked, "responses": responses}


async def later_turn() -> dict[str, Any]:
    reports = Reports()
    turns = [("ana", "s1", "What does Ana drink?"), ("ana", "s1", "What does Ana drink, and her cat?")]
    model, _ = await agent_run(["Green tea.", "Miso."], injecting(reports, max_entries=1), turns)
    return {"reports": reports, "asked": user_texts(model.received[1])}


async def another_process() -> dict[str, Any]:
    """Two turns of one session, each through a plugin and a runner of its own (as two processes would be),
    the session kept by the session service between them."""
    sessions = InMemorySessionService()
    await sessions.create_session(app_name="checks", user_id="ana", session_id="s1")
    model = Scripted(model="scripted", replies=["Green tea.", "Miso."])
    reports = []
    for text in ("What does Ana drink?", "What does Ana drink, and her cat?"):
        turn = Reports()
        plugin = injecting(turn, max_entries=1)
        runner = Runner(
            agent=LlmAgent(name="assistant", model=model), app_name="checks", session_service=sessions, plugins=[plugin]
        )
        await ask(runner, "ana", "s1", text)
        await plugin.close()
        reports += turn
    session = await sessions.get_session(app_name="checks", user_id="ana", session_id="s1")
    assert session is not None
    return {"reports": reports, "asked": user_texts(model.received[1]), "state": sorted(session.state)}


async def outage() -> dict[str, Any]:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    warnings: list[str] = []
    handler = logging.Handler()
    handler.emit = lambda record: warnings.append(record.getMessage())  # type: ignore[method-assign]
    logging.getLogger("contextfold").addHandler(handler)
    down = ContextfoldPlugin(target=f"127.0.0.1:{port}", stores=[STORE])
    model, _ = await agent_run([{"step": 0}, "noon"], down, [("ana", "s1", "What time is it?")])
    logging.getLogger("contextfold").removeHandler(handler)
    failed = [said for said in warnings if "contextfold inject failed" in said]
    return {"asked": [user_texts(received) for received in model.received], "warnings": len(failed)}


async def two_users() -> dict[str, Any]:
    turns = [("ana", "a1", "What are my pets called?"), ("bob", "b1", "What are my pets called?")]
    model, _ = await agent_run(["a", "b"], injecting(), turns)
    return {"ana": user_texts(model.received[0]), "bob": user_texts(model.received[1])}


async def memory_service() -> dict[str, Any]:
    """ContextfoldMemoryService: a session added (twice), searched by meaning in its user's scope only,
    a memory added directly, one deleted; and ADK's PreloadMemoryTool reading it before a model call."""
    memory = ContextfoldMemoryService(f"{STORE}-adk", target=ADDRESS)
    sessions = InMemorySessionService()
    model = Scripted(model="scripted", replies=["Noted.", "You fly on Friday."])
    agent = LlmAgent(name="assistant", model=model, tools=[PreloadMemoryTool()])
    runner = Runner(agent=agent, app_name="checks", session_service=sessions, memory_service=memory)
    await sessions.create_session(app_name="checks", user_id="ana", session_id="trip")
    await ask(runner, "ana", "trip", "My flight to Lisbon leaves on Friday")
    session = await sessions.get_session(app_name="checks", user_id="ana", session_id="trip")
    assert session is not None
    await memory.add_session_to_memory(session)
    await memory.add_session_to_memory(session)  # again: nothing twice
    found = await memory.search_memory(app_name="checks", user_id="ana", query="When is the flight?")
    others = await memory.search_memory(app_name="checks", user_id="bob", query="When is the flight?")
    other_app = await memory.search_memory(app_name="elsewhere", user_id="ana", query="When is the flight?")
    await memory.add_memory(
        app_name="checks",
        user_id="ana",
        memories=[MemoryEntry(content=types.Content(parts=[types.Part(text="Ana prefers the window seat")]))],
        custom_metadata={"topic": "travel"},
    )
    seat = await memory.search_memory(app_name="checks", user_id="ana", query="Which seat?")
    await sessions.create_session(app_name="checks", user_id="ana", session_id="later")
    await ask(runner, "ana", "later", "When do I fly?")
    flight = next(m for m in found.memories if "Lisbon" in (m.content.parts or [types.Part(text="")])[0].text)
    await memory.delete_memory(app_name="checks", user_id="ana", memory_id=flight.id)
    gone = await memory.search_memory(app_name="checks", user_id="ana", query="When is the flight?")
    await memory.close()

    def texts(response: Any) -> list[str]:
        return [memory.content.parts[0].text for memory in response.memories]

    return {
        "found": texts(found),
        "found_first": found.memories[0].model_dump(mode="json", exclude={"content"}) if found.memories else None,
        "others": texts(others),
        "other_app": texts(other_app),
        "seat": seat.memories[0].model_dump(mode="json") if seat.memories else None,
        "preloaded": user_texts(model.received[-1]),
        "after_delete": texts(gone),
    }


async def main() -> None:
    checks = [block, tool_loop, later_turn, another_process, outage, two_users, memory_service]
    print(json.dumps({check.__name__: await check() for check in checks}))


if __name__ == "__main__":
    asyncio.run(main())
