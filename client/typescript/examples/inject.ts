// Inject from TypeScript: fold what memory knows into a conversation before the model sees it.
import { ContextfoldClient, ContextfoldError, renderForModel } from "@contextfold/client";

const cf = new ContextfoldClient(); // CONTEXTFOLD_ADDRESS, else localhost:50051

try {
  await cf.memory.createStore({ store: { name: "readme-prefs" } });
} catch (error) {
  if (!(error instanceof ContextfoldError && error.status === "ALREADY_EXISTS")) throw error;
}
await cf.memory.addMemories({
  store: "readme-prefs",
  memories: [
    { id: "ada-theme", content: "Ada likes the Solarized Dark theme", userId: "ada" },
    { id: "ada-editor", content: "Ada writes code in Helix", userId: "ada" },
  ],
});

const { messages, report } = await cf.inject(
  [{ role: "user", content: [{ text: "Which theme should I use in my editor?" }] }],
  { stores: ["readme-prefs"], scope: { userId: "ada" }, maxEntries: 1 },
);
console.log(JSON.stringify(renderForModel(messages), null, 2));
console.log(`injected ${report.entries.map((entry) => entry.id).join(", ")} for "${report.query}"`);
cf.close();
