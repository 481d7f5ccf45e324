/**
 * The OpenAI Agents SDK for TypeScript (`@openai/agents-core` 0.20, what `@openai/agents`
 * re-exports) with contextfold's `callModelInputFilter`: real `Runner` runs, a `MemorySession`,
 * and a scripted model of the SDK's `Model` interface that records every call's input.
 */
import assert from "node:assert/strict";
import { test } from "node:test";
import {
  Agent,
  MemorySession,
  Runner,
  tool,
  Usage,
  type AgentInputItem,
  type Model,
  type ModelRequest,
  type ModelResponse,
} from "@openai/agents-core";
import { z } from "zod";
import { contextfoldInputFilter, type ContextfoldInputFilterOptions } from "../src/openai-agents.js";
import { address, closedPort, petsAndTeaStore, Reports, Warnings } from "./support.js";

type Reply = string | { tool: string; input: Record<string, unknown> };

/** Answers each call with the next reply (text or a function call), recording each call's input. */
class ScriptedModel implements Model {
  readonly received: AgentInputItem[][] = [];
  private calls = 0;

  constructor(private readonly replies: Reply[]) {}

  async getResponse(request: ModelRequest): Promise<ModelResponse> {
    const input = typeof request.input === "string" ? [{ role: "user", content: request.input } as AgentInputItem] : request.input;
    this.received.push(structuredClone(input));
    const reply = this.replies[this.calls++];
    if (reply === undefined) throw new Error("the script has no more replies");
    const output =
      typeof reply === "string"
        ? { type: "message", role: "assistant", status: "completed", content: [{ type: "output_text", text: reply }] }
        : { type: "function_call", callId: `call-${this.calls}`, name: reply.tool, arguments: JSON.stringify(reply.input), status: "completed" };
    return { usage: new Usage(), output: [output] } as ModelResponse;
  }

  // eslint-disable-next-line require-yield
  async *getStreamedResponse(): AsyncIterable<never> {
    throw new Error("the scripted model does not stream");
  }
}

/** The text of each user message of one call's input. */
function userTexts(input: readonly AgentInputItem[]): string[] {
  return input
    .filter((item) => (item as { role?: string }).role === "user")
    .map((item) => {
      const { content } = item as { content: string | Array<{ text?: string }> };
      return typeof content === "string" ? content : content.map((part) => part.text ?? "").join("");
    });
}

const clock = tool({ name: "clock", description: "The time", parameters: z.object({ step: z.number() }), execute: async () => "noon" });

const runner = new Runner({ tracingDisabled: true });
const pets = petsAndTeaStore();

function injecting(options: ContextfoldInputFilterOptions = {}) {
  return contextfoldInputFilter({ address, stores: [pets.name], timeoutMs: 5000, ...options });
}

test("the model gets the block in the latest user message and the run keeps the message as written", async () => {
  const model = new ScriptedModel(["Green tea."]);
  const filter = injecting({ maxEntries: 1, scope: { userId: "ana" } });
  const result = await runner.run(new Agent({ name: "assistant", model }), "What do I drink in the morning?", {
    callModelInputFilter: filter,
  });
  filter.close();
  const [asked] = userTexts(model.received[0]);
  assert.ok(asked.startsWith("What do I drink in the morning?\n\n<memory>"), asked);
  assert.ok(asked.includes("Ana drinks green tea every morning"), asked);
  assert.deepEqual(userTexts(result.history), ["What do I drink in the morning?"]);
});

test("a ten-step tool loop searches once and shows the block at every step", async () => {
  const reports = new Reports();
  const steps = Array.from({ length: 10 }, (_, step) => ({ tool: "clock", input: { step } }));
  const model = new ScriptedModel([...steps, "It is noon."]);
  const filter = injecting({ scope: { userId: "ana" }, onReport: reports.add });
  const agent = new Agent({ name: "assistant", model, tools: [clock] });
  await runner.run(agent, "What time is it, and what is my cat called?", { callModelInputFilter: filter, maxTurns: 20 });
  filter.close();
  assert.equal(model.received.length, 11);
  assert.equal(reports.got.length, 1, "one search for the user's turn");
  for (const input of model.received) {
    const [asked] = userTexts(input);
    assert.ok(asked.includes("Ana's cat is called Miso"), asked);
  }
  assert.equal(model.received[10].filter((item) => item.type === "function_call_result").length, 10);
});

test("a session keeps the filtered turn, and the next turn shows its block once and gets new entries only", async () => {
  const reports = new Reports();
  const model = new ScriptedModel(["Green tea.", "Miso."]);
  const filter = injecting({ maxEntries: 1, scope: { userId: "ana" }, onReport: reports.add });
  const agent = new Agent({ name: "assistant", model });
  const session = new MemorySession();
  await runner.run(agent, "What does Ana drink?", { session, callModelInputFilter: filter });
  const kept = userTexts(await session.getItems());
  assert.ok(kept[0].includes("Ana drinks green tea every morning"), "the SDK keeps what the filter returned");
  await runner.run(agent, "What does Ana drink, and her cat?", { session, callModelInputFilter: filter });
  filter.close();
  assert.deepEqual(reports.entries(0), [`${pets.name}-tea`]);
  assert.deepEqual(reports.entries(1), [`${pets.name}-cat`], "the tea, shown already, is not injected again");
  const [earlier, latest] = userTexts(model.received[1]);
  assert.equal(earlier.split("Ana drinks green tea every morning").length, 2, `the first turn's block, once: ${earlier}`);
  assert.ok(latest.includes("Ana's cat is called Miso") && !latest.split("<memory>")[1].includes("green tea"), latest);
});

test("a turn replayed from the session with its block is not asked again, nor asked about in another process", async () => {
  const reports = new Reports();
  const model = new ScriptedModel(["Green tea.", "Green tea!", "Green tea?"]);
  const agent = new Agent({ name: "assistant", model });
  const session = new MemorySession();
  const filter = injecting({ maxEntries: 1, scope: { userId: "ana" }, onReport: reports.add });
  await runner.run(agent, "What does Ana drink?", { session, callModelInputFilter: filter });
  // Answering the same ask again ("regenerate"): the session's copy of it carries the block.
  const [ask] = (await session.getItems()).slice(0, 1);
  await runner.run(agent, [ask], { callModelInputFilter: filter });
  filter.close();
  assert.equal(reports.got.length, 1, "the ask, recognised with its block, is not searched again");
  const restarted = injecting({ maxEntries: 1, scope: { userId: "ana" }, onReport: reports.add });
  await runner.run(agent, [ask], { callModelInputFilter: restarted });
  restarted.close();
  // Another process's filter knows the default format's region: the ask already carries its block.
  assert.equal(reports.got[1].detail, "message 0 already carries its block");
  for (const input of model.received) {
    const [asked] = userTexts(input);
    assert.equal(asked.split("Ana drinks green tea every morning").length, 2, `the block, once: ${asked}`);
  }
});

test("an outage changes nothing and warns once", async () => {
  const model = new ScriptedModel([{ tool: "clock", input: { step: 0 } }, "noon"]);
  const warnings = new Warnings();
  const down = contextfoldInputFilter({ address: `127.0.0.1:${await closedPort()}`, stores: [pets.name], logger: warnings });
  await runner.run(new Agent({ name: "assistant", model, tools: [clock] }), "What time is it?", { callModelInputFilter: down });
  down.close();
  assert.deepEqual(model.received.map(userTexts), [["What time is it?"], ["What time is it?"]]);
  assert.equal(warnings.said.filter((said) => said.includes("contextfold inject failed")).length, 1, warnings.said.join("\n"));
});

test("two users each see their own memory, told apart by the run's context", async () => {
  const model = new ScriptedModel(["a", "b"]);
  const filter = injecting({ scope: (context) => ({ userId: (context as { user: string }).user }) });
  const agent = new Agent<{ user: string }>({ name: "assistant", model });
  for (const user of ["ana", "bob"]) {
    await runner.run(agent, "What are my pets called?", { callModelInputFilter: filter, context: { user } });
  }
  filter.close();
  const [[ana], [bob]] = model.received.map(userTexts);
  assert.ok(ana.includes("Miso") && !ana.includes("Rex"), ana);
  assert.ok(bob.includes("Rex") && !bob.includes("Miso"), bob);
});

test("bad settings fail when the filter is made, naming it", () => {
  assert.throws(() => contextfoldInputFilter({ trigger: "always" as "everyTurn" }), /contextfoldInputFilter: unknown trigger "always"/);
});
