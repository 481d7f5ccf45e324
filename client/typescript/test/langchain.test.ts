/**
 * LangChain.js (`langchain` 1.5) `createAgent` with contextfold's middleware, on LangChain's own
 * fake chat model (`fakeModel` of `@langchain/core/testing`), which records every call's messages.
 */
import assert from "node:assert/strict";
import { test } from "node:test";
import { fakeModel, type FakeBuiltModel } from "@langchain/core/testing";
import { MemorySaver } from "@langchain/langgraph";
import { AIMessage, createAgent, HumanMessage, tool, type BaseMessage } from "langchain";
import { z } from "zod";
import { contextfoldMiddleware, type ContextfoldMiddlewareOptions } from "../src/langchain.js";
import { address, closedPort, petsAndTeaStore, Reports, Warnings } from "./support.js";

/** The text of each human message a model call got. */
function humanTexts(messages: readonly BaseMessage[]): string[] {
  return messages.filter((message) => HumanMessage.isInstance(message)).map((message) => message.text);
}

function received(model: FakeBuiltModel): string[][] {
  return model.calls.map((call) => humanTexts(call.messages));
}

const clock = tool(async () => "noon", { name: "clock", description: "The time", schema: z.object({ step: z.number() }) });

const pets = petsAndTeaStore();

function injecting(options: ContextfoldMiddlewareOptions = {}) {
  return contextfoldMiddleware({ address, stores: [pets.name], timeoutMs: 5000, ...options });
}

test("the model gets the block in the latest human message and the graph keeps the message as written", async () => {
  const model = fakeModel().respond(new AIMessage("Green tea."));
  const middleware = injecting({ maxEntries: 1, scope: { userId: "ana" } });
  const agent = createAgent({ model, tools: [], middleware: [middleware] });
  const result = await agent.invoke({ messages: [new HumanMessage("What do I drink in the morning?")] });
  middleware.close();
  const [[asked]] = received(model);
  assert.ok(asked.startsWith("What do I drink in the morning?\n\n<memory>"), asked);
  assert.ok(asked.includes("Ana drinks green tea every morning"), asked);
  assert.equal(result.messages[0].text, "What do I drink in the morning?");
});

test("a ten-step tool loop searches once and shows the block at every step", async () => {
  const reports = new Reports();
  let model = fakeModel();
  for (let step = 0; step < 10; step++) model = model.respondWithTools([{ name: "clock", args: { step }, id: `call-${step}` }]);
  model = model.respond(new AIMessage("It is noon."));
  const middleware = injecting({ scope: { userId: "ana" }, onReport: reports.add });
  const agent = createAgent({ model, tools: [clock], middleware: [middleware] });
  await agent.invoke({ messages: [new HumanMessage("What time is it, and what is my cat called?")] }, { recursionLimit: 50 });
  middleware.close();
  assert.equal(model.calls.length, 11);
  assert.equal(reports.got.length, 1, "one search for the user's turn");
  for (const [asked] of received(model)) assert.ok(asked.includes("Ana's cat is called Miso"), asked);
  assert.equal(model.calls[10].messages.filter((message) => message.getType() === "tool").length, 10);
});

test("a later turn gets new entries only and the earlier block is shown again", async () => {
  const reports = new Reports();
  const model = fakeModel().respond(new AIMessage("Green tea.")).respond(new AIMessage("Miso."));
  const middleware = injecting({ maxEntries: 1, scope: { userId: "ana" }, onReport: reports.add });
  const agent = createAgent({ model, tools: [], middleware: [middleware] });
  const first = await agent.invoke({ messages: [new HumanMessage("What does Ana drink?")] });
  await agent.invoke({ messages: [...first.messages, new HumanMessage("What does Ana drink, and her cat?")] });
  middleware.close();
  assert.deepEqual(reports.entries(0), [`${pets.name}-tea`]);
  assert.deepEqual(reports.entries(1), [`${pets.name}-cat`], "the tea, shown already, is not injected again");
  const [earlier, latest] = received(model)[1];
  assert.ok(earlier.includes("Ana drinks green tea every morning"), "the first turn's block, shown again");
  assert.ok(latest.includes("Ana's cat is called Miso") && !latest.split("<memory>")[1].includes("green tea"), latest);
});

test("a later turn of a thread, served by another middleware and agent, gets new entries only from the graph's state", async () => {
  const reports = new Reports();
  const checkpointer = new MemorySaver();
  const model = fakeModel().respond(new AIMessage("Green tea.")).respond(new AIMessage("Miso."));
  const thread = { configurable: { thread_id: "ana-1" } };
  for (const ask of ["What does Ana drink?", "What does Ana drink, and her cat?"]) {
    // A middleware and an agent of their own each turn, as another process would have: only the thread is shared.
    const middleware = injecting({ maxEntries: 1, scope: { userId: "ana" }, onReport: reports.add });
    const agent = createAgent({ model, tools: [], middleware: [middleware], checkpointer });
    await agent.invoke({ messages: [new HumanMessage(ask)] }, thread);
    middleware.close();
  }
  assert.deepEqual(reports.entries(0), [`${pets.name}-tea`]);
  assert.deepEqual(reports.entries(1), [`${pets.name}-cat`], "the tea, shown already, is not injected again");
  const [earlier, latest] = received(model)[1];
  assert.ok(earlier.includes("Ana drinks green tea every morning"), "the first turn's block, shown again from the state");
  assert.ok(latest.includes("Ana's cat is called Miso") && !latest.split("<memory>")[1].includes("green tea"), latest);
  const saved = await checkpointer.getTuple(thread);
  const values = saved?.checkpoint.channel_values as { contextfold?: object } | undefined;
  assert.deepEqual(Object.keys(values?.contextfold ?? {}), ["ContextfoldMiddleware"]);
});

test("an outage changes nothing and warns once", async () => {
  const model = fakeModel().respondWithTools([{ name: "clock", args: { step: 0 }, id: "call-0" }]).respond(new AIMessage("noon"));
  const warnings = new Warnings();
  const down = contextfoldMiddleware({ address: `127.0.0.1:${await closedPort()}`, stores: [pets.name], logger: warnings });
  const agent = createAgent({ model, tools: [clock], middleware: [down] });
  await agent.invoke({ messages: [new HumanMessage("What time is it?")] });
  down.close();
  assert.deepEqual(received(model), [["What time is it?"], ["What time is it?"]]);
  assert.equal(warnings.said.filter((said) => said.includes("contextfold inject failed")).length, 1, warnings.said.join("\n"));
});

test("two users each see their own memory, told apart by the run's context", async () => {
  const model = fakeModel().respond(new AIMessage("a")).respond(new AIMessage("b"));
  const middleware = injecting({ scope: (context) => ({ userId: (context as { user: string }).user }) });
  const agent = createAgent({ model, tools: [], middleware: [middleware], contextSchema: z.object({ user: z.string() }) });
  for (const user of ["ana", "bob"]) {
    await agent.invoke({ messages: [new HumanMessage("What are my pets called?")] }, { context: { user } });
  }
  middleware.close();
  const [[ana], [bob]] = received(model);
  assert.ok(ana.includes("Miso") && !ana.includes("Rex"), ana);
  assert.ok(bob.includes("Rex") && !bob.includes("Miso"), bob);
});

test("bad settings fail when the middleware is made, naming it", () => {
  assert.throws(() => contextfoldMiddleware({ ranking: "best" as "hybrid" }), /contextfoldMiddleware: unknown ranking "best"/);
});
