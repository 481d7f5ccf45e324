// A LangChain.js agent with contextfold's injection: run it against a server (make run).
import { ContextfoldClient, ContextfoldError } from "@contextfold/client";
import { contextfoldMiddleware } from "@contextfold/client/langchain";
import { fakeModel } from "@langchain/core/testing";
import { AIMessage, createAgent, HumanMessage } from "langchain";

const cf = new ContextfoldClient(); // $CONTEXTFOLD_ADDRESS, or localhost:50051
try {
  await cf.memory.createStore({ store: { name: "travel" } });
} catch (error) {
  if (!(error instanceof ContextfoldError && error.status === "ALREADY_EXISTS")) throw error;
}
await cf.memory.addMemories({
  store: "travel", // ids make the add idempotent: run this file as often as you like
  memories: [
    { id: "seat", content: "Ada always books an aisle seat", userId: "ada" },
    { id: "diet", content: "Ada eats vegetarian", userId: "ada" },
  ],
});
cf.close();

// Stands in for a model here: answers "Booked.", and prints what it was asked.
const standIn = fakeModel().respond((messages) => {
  console.log(JSON.stringify(messages.at(-1).content));
  return new AIMessage("Booked.");
});

// A deadline of its own for each call (200 ms by default): past it, the model gets the messages as they were.
const injection = contextfoldMiddleware({ stores: ["travel"], scope: { userId: "ada" }, maxEntries: 1, timeoutMs: 1000 });
const agent = createAgent({ model: standIn, tools: [], middleware: [injection] });
const result = await agent.invoke({ messages: [new HumanMessage("Book me a seat to Lisbon")] });
console.log(result.messages[0].content); // the graph keeps the user's message as it was
injection.close();
