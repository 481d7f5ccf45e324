// A Vercel AI SDK model with contextfold's injection: run it against a server (make run).
import { ContextfoldClient, ContextfoldError } from "@contextfold/client";
import { contextfoldMiddleware } from "@contextfold/client/ai";
import { generateText, wrapLanguageModel } from "ai";
import { MockLanguageModelV4 } from "ai/test";

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
const standIn = new MockLanguageModelV4({
  doGenerate: async ({ prompt }) => {
    console.log(JSON.stringify(prompt.at(-1).content));
    return {
      content: [{ type: "text", text: "Booked." }],
      finishReason: { unified: "stop", raw: undefined },
      usage: { inputTokens: { total: 1 }, outputTokens: { total: 1 } },
      warnings: [],
    };
  },
});

// A deadline of its own for each call (200 ms by default): past it, the model gets the prompt as it was.
const injection = contextfoldMiddleware({ stores: ["travel"], scope: { userId: "ada" }, maxEntries: 1, timeoutMs: 1000 });
const model = wrapLanguageModel({ model: standIn, middleware: injection });
const messages = [{ role: "user", content: "Book me a seat to Lisbon" }];
await generateText({ model, messages });
console.log(messages[0].content); // the application keeps the user's message as it was
injection.close();
