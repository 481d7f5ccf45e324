/**
 * The Vercel AI SDK (`ai` 7) with contextfold's middleware: `generateText` on a wrapped
 * `MockLanguageModelV4` (the SDK's own test model) that records the prompt of every call.
 */
import assert from "node:assert/strict";
import { test } from "node:test";
import { generateText, stepCountIs, tool, wrapLanguageModel, type ModelMessage } from "ai";
import { MockLanguageModelV4 } from "ai/test";
import { z } from "zod";
import { contextfoldMiddleware, scopeFromProviderOptions, type ContextfoldMiddlewareOptions } from "../src/ai.js";
import { address, closedPort, petsAndTeaStore, Reports, Warnings } from "./support.js";

type Prompt = Array<{ role: string; content: unknown }>;
type Reply = string | { tool: string; input: Record<string, unknown> };

const USAGE = {
  inputTokens: { total: 1, noCache: 1, cacheRead: 0, cacheWrite: 0 },
  outputTokens: { total: 1, text: 1, reasoning: 0 },
};

/** A mock model answering each call with the next reply (text or a tool call), recording each prompt. */
function scripted(...replies: Reply[]): { model: MockLanguageModelV4; prompts: Prompt[] } {
  const prompts: Prompt[] = [];
  let calls = 0;
  const model = new MockLanguageModelV4({
    doGenerate: async (options) => {
      prompts.push(structuredClone(options.prompt) as Prompt);
      const reply = replies[calls++];
      if (reply === undefined) throw new Error("the script has no more replies");
      if (typeof reply === "string") {
        return { content: [{ type: "text", text: reply }], finishReason: { unified: "stop", raw: undefined }, usage: USAGE, warnings: [] };
      }
      const call = { type: "tool-call", toolCallId: `call-${calls}`, toolName: reply.tool, input: JSON.stringify(reply.input) } as const;
      return { content: [call], finishReason: { unified: "tool-calls", raw: undefined }, usage: USAGE, warnings: [] };
    },
  });
  return { model, prompts };
}

/** The texts of each user message of a prompt. */
function userTexts(prompt: Prompt): string[] {
  return prompt
    .filter((message) => message.role === "user")
    .map((message) => (message.content as Array<{ type: string; text?: string }>).map((part) => part.text ?? "").join(""));
}

const clock = tool({ description: "The time", inputSchema: z.object({ step: z.number() }), execute: async () => "noon" });

const pets = petsAndTeaStore();

function injecting(options: ContextfoldMiddlewareOptions = {}) {
  return contextfoldMiddleware({ address, stores: [pets.name], timeoutMs: 5000, ...options });
}

test("the model gets the block in the latest user message and the caller's messages stay as they were", async () => {
  const { model, prompts } = scripted("Green tea.");
  const middleware = injecting({ maxEntries: 1, scope: { userId: "ana" } });
  const messages: ModelMessage[] = [{ role: "user", content: "What do I drink in the morning?" }];
  await generateText({ model: wrapLanguageModel({ model, middleware }), messages });
  middleware.close();
  const [asked] = userTexts(prompts[0]);
  assert.ok(asked.startsWith("What do I drink in the morning?\n\n<memory>"), asked);
  assert.ok(asked.includes("Ana drinks green tea every morning"), asked);
  assert.deepEqual(messages, [{ role: "user", content: "What do I drink in the morning?" }]);
});

test("a ten-step tool loop searches once and shows the block at every step", async () => {
  const reports = new Reports();
  const steps = Array.from({ length: 10 }, (_, step) => ({ tool: "clock", input: { step } }));
  const { model, prompts } = scripted(...steps, "It is noon.");
  const middleware = injecting({ scope: { userId: "ana" }, onReport: reports.add });
  await generateText({
    model: wrapLanguageModel({ model, middleware }),
    prompt: "What time is it, and what is my cat called?",
    tools: { clock },
    stopWhen: stepCountIs(20),
  });
  middleware.close();
  assert.equal(prompts.length, 11);
  assert.equal(reports.got.length, 1, "one search for the user's turn");
  for (const prompt of prompts) {
    const [asked] = userTexts(prompt);
    assert.ok(asked.includes("Ana's cat is called Miso"), asked);
  }
  assert.equal(prompts[10].filter((message) => message.role === "tool").length, 10);
});

test("a later turn gets new entries only and the earlier block is shown again", async () => {
  const reports = new Reports();
  const { model, prompts } = scripted("Green tea.", "Miso.");
  const middleware = injecting({ maxEntries: 1, scope: { userId: "ana" }, onReport: reports.add });
  const wrapped = wrapLanguageModel({ model, middleware });
  const messages: ModelMessage[] = [{ role: "user", content: "What does Ana drink?" }];
  const first = await generateText({ model: wrapped, messages });
  messages.push(...first.response.messages, { role: "user", content: "What does Ana drink, and her cat?" });
  await generateText({ model: wrapped, messages });
  middleware.close();
  assert.deepEqual(reports.entries(0), [`${pets.name}-tea`]);
  assert.deepEqual(reports.entries(1), [`${pets.name}-cat`], "the tea, shown already, is not injected again");
  const [earlier, latest] = userTexts(prompts[1]);
  assert.ok(earlier.includes("Ana drinks green tea every morning"), "the first turn's block, shown again");
  assert.ok(latest.includes("Ana's cat is called Miso") && !latest.split("<memory>")[1].includes("green tea"), latest);
});

test("an outage changes nothing and warns once", async () => {
  const { model, prompts } = scripted({ tool: "clock", input: { step: 0 } }, "noon");
  const warnings = new Warnings();
  const down = contextfoldMiddleware({ address: `127.0.0.1:${await closedPort()}`, stores: [pets.name], logger: warnings });
  await generateText({ model: wrapLanguageModel({ model, middleware: down }), prompt: "What time is it?", tools: { clock }, stopWhen: stepCountIs(5) });
  down.close();
  assert.deepEqual(prompts.map(userTexts), [["What time is it?"], ["What time is it?"]]);
  assert.equal(warnings.said.filter((said) => said.includes("contextfold inject failed")).length, 1, warnings.said.join("\n"));
});

test("two users each see their own memory, told apart by the call's provider options", async () => {
  const { model, prompts } = scripted("a", "b");
  const middleware = injecting({ scope: scopeFromProviderOptions() });
  const wrapped = wrapLanguageModel({ model, middleware });
  for (const userId of ["ana", "bob"]) {
    await generateText({ model: wrapped, prompt: "What are my pets called?", providerOptions: { contextfold: { userId } } });
  }
  middleware.close();
  const [[ana], [bob]] = prompts.map(userTexts);
  assert.ok(ana.includes("Miso") && !ana.includes("Rex"), ana);
  assert.ok(bob.includes("Rex") && !bob.includes("Miso"), bob);
});

test("bad settings fail when the middleware is made, naming it", () => {
  assert.throws(() => contextfoldMiddleware({ format: "yaml" as "xml" }), /contextfoldMiddleware: unknown format "yaml"/);
});
