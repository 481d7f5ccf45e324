"""A Google ADK agent with contextfold's injection: run it against a server (make run)."""

import asyncio
import contextlib

from contextfold import AlreadyExists, Client
from contextfold.adk import ContextfoldPlugin
from google.adk.agents import LlmAgent
from google.adk.models.base_llm import BaseLlm
from google.adk.models.llm_response import LlmResponse
from google.adk.runners import Runner
from google.adk.sessions import InMemorySessionService
from google.genai import types

cf = Client()  # $CONTEXTFOLD_ADDRESS, or localhost:50051
with contextlib.suppress(AlreadyExists):
    cf.create_store("travel")
cf.add_memories(  # ids make the add idempotent: run this file as often as you like
    "travel",
    [
        {"id": "seat", "content": "Ada always books an aisle seat", "user_id": "ada"},
        {"id": "diet", "content": "Ada eats vegetarian", "user_id": "ada"},
    ],
)


class StandIn(BaseLlm):
    """Stands in for a model here: answers "Booked.", and prints what it was asked."""

    async def generate_content_async(self, llm_request, stream=False):
        print(repr("".join(part.text for part in llm_request.contents[-1].parts)))
        yield LlmResponse(content=types.Content(role="model", parts=[types.Part(text="Booked.")]))


async def main() -> None:
    # Whose memory: the session's user, by default. A deadline of its own for each call (0.2 s by
    # default): past it, the model gets the request as ADK built it.
    injection = ContextfoldPlugin(stores=["travel"], max_entries=1, timeout=1.0)
    sessions = InMemorySessionService()
    agent = LlmAgent(name="travel", model=StandIn(model="stand-in"))
    runner = Runner(agent=agent, app_name="travel", session_service=sessions, plugins=[injection])
    await sessions.create_session(app_name="travel", user_id="ada", session_id="trip")
    ask = types.Content(role="user", parts=[types.Part(text="Book me a seat to Lisbon")])
    async for _ in runner.run_async(user_id="ada", session_id="trip", new_message=ask):
        pass
    session = await sessions.get_session(app_name="travel", user_id="ada", session_id="trip")
    print(session.events[0].content.parts[0].text)  # the session keeps the user's message as it was
    await injection.close()


asyncio.run(main())
