"""A LangChain agent with contextfold's injection: run it against a server (make run)."""

import contextlib

from contextfold import AlreadyExists, Client
from contextfold.langchain import ContextfoldMiddleware
from langchain.agents import create_agent
from langchain_core.language_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, HumanMessage

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


class Model(GenericFakeChatModel):
    """Stands in for a chat model here: answers "Booked.", and prints what it was asked."""

    def _generate(self, messages, stop=None, run_manager=None, **kwargs):
        print(repr(messages[-1].content))
        return super()._generate(messages, stop, run_manager, **kwargs)


# A deadline of its own for each call (0.2 s by default): past it, the model gets the messages as they were.
injection = ContextfoldMiddleware(stores=["travel"], scope={"user_id": "ada"}, max_entries=1, timeout=1.0)
agent = create_agent(Model(messages=iter([AIMessage("Booked.")])), middleware=[injection])
result = agent.invoke({"messages": [HumanMessage("Book me a seat to Lisbon")]})
print(result["messages"][0].content)  # the conversation keeps the user's message as it was
