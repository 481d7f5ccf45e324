"""A pydantic-ai agent with contextfold's injection: run it against a server (make run)."""

import contextlib

from contextfold import AlreadyExists, Client
from contextfold.pydantic_ai import ContextfoldCapability
from pydantic_ai import Agent
from pydantic_ai.messages import ModelResponse, TextPart
from pydantic_ai.models.function import FunctionModel

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


def stand_in(messages, info):
    """Stands in for a model here: answers "Booked.", and prints what it was asked."""
    print(repr(messages[-1].parts[-1].content))
    return ModelResponse(parts=[TextPart("Booked.")])


# A deadline of its own for each call (0.2 s by default): past it, the model gets the messages as they were.
injection = ContextfoldCapability(stores=["travel"], scope={"user_id": "ada"}, max_entries=1, timeout=1.0)
agent = Agent(FunctionModel(stand_in), capabilities=[injection])
result = agent.run_sync("Book me a seat to Lisbon")
print(result.all_messages()[0].parts[-1].content)  # the history keeps the user's prompt as it was
