"""An OpenAI Agents SDK agent with contextfold's injection: run it against a server (make run)."""

import asyncio
import contextlib

from agents import Agent, ModelResponse, RunConfig, Runner, Usage
from agents.models.interface import Model
from contextfold import AlreadyExists, Client
from contextfold.openai_agents import ContextfoldInputFilter
from openai.types.responses import ResponseOutputMessage, ResponseOutputText

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


class StandIn(Model):
    """Stands in for a model here: answers "Booked.", and prints what it was asked."""

    async def get_response(self, system_instructions, input, *args, **kwargs):
        print(repr(input[-1]["content"]))
        text = ResponseOutputText(type="output_text", text="Booked.", annotations=[])
        answer = ResponseOutputMessage(type="message", id="1", role="assistant", status="completed", content=[text])
        return ModelResponse(output=[answer], usage=Usage(), response_id=None)

    def stream_response(self, *args, **kwargs):
        raise NotImplementedError


async def main() -> None:
    # A deadline of its own for each call (0.2 s by default): past it, the model gets the input as it was.
    injection = ContextfoldInputFilter(stores=["travel"], scope={"user_id": "ada"}, max_entries=1, timeout=1.0)
    config = RunConfig(call_model_input_filter=injection, tracing_disabled=True)
    result = await Runner.run(Agent(name="travel", model=StandIn()), "Book me a seat to Lisbon", run_config=config)
    print(result.to_input_list()[0]["content"])  # the run keeps the user's message as it was
    await injection.close()


asyncio.run(main())
