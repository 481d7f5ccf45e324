// An OpenAI Agents SDK agent with contextfold's injection: run it against a server (make run).
import { ContextfoldClient, ContextfoldError } from "@contextfold/client";
import { contextfoldInputFilter } from "@contextfold/client/openai-agents";
import { Agent, Runner, Usage } from "@openai/agents";

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
const standIn = {
  async getResponse({ input }) {
    console.log(JSON.stringify(input.at(-1).content));
    const text = { type: "output_text", text: "Booked." };
    return { usage: new Usage(), output: [{ type: "message", role: "assistant", status: "completed", content: [text] }] };
  },
  async *getStreamedResponse() {
    throw new Error("the stand-in does not stream");
  },
};

// A deadline of its own for each call (200 ms by default): past it, the model gets the input as it was.
const injection = contextfoldInputFilter({ stores: ["travel"], scope: { userId: "ada" }, maxEntries: 1, timeoutMs: 1000 });
const runner = new Runner({ tracingDisabled: true });
const result = await runner.run(new Agent({ name: "travel", model: standIn }), "Book me a seat to Lisbon", {
  callModelInputFilter: injection,
});
console.log(result.history[0].content); // the run keeps the user's message as it was
injection.close();
