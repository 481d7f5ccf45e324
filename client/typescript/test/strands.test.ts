/**
 * A real Strands TypeScript `Agent` (@strands-agents/sdk 1.19) with contextfold's plugin and memory store.
 *
 * The agent's model is scripted: it answers from a list and records the exact input of every
 * call, so each test asserts what the model saw.
 */
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import {
  Agent,
  InvocationTrigger,
  MemoryManager,
  Model,
  ModelContentBlockDeltaEvent,
  ModelContentBlockStartEvent,
  ModelContentBlockStopEvent,
  ModelExtractor,
  ModelMessageStartEvent,
  ModelMessageStopEvent,
  tool,
  type BaseModelConfig,
  type ContentBlockData,
  type Message,
  type MessageData,
  type ModelStreamEvent,
  type StreamOptions,
} from "@strands-agents/sdk";
import type { InjectionReport } from "../src/index.js";
import type { ScopeData } from "../src/client.js";
import { ContextfoldMemoryStore, ContextInjection, fromState } from "../src/strands.js";
import { address, closedPort, Fixture, relay, silentServer, unique } from "./support.js";

type Reply = string | { say?: string; tool: string; input: Record<string, unknown> } | ((system: string) => string);

/** Answers each call with the next reply (text, a tool call, or a function of the system prompt), recording the input. */
class ScriptedModel extends Model {
  readonly inputs: MessageData[][] = [];
  private config: BaseModelConfig = {};

  constructor(private readonly replies: Reply[]) {
    super();
  }

  updateConfig(config: BaseModelConfig): void {
    this.config = { ...this.config, ...config };
  }

  getConfig(): BaseModelConfig {
    return this.config;
  }

  async *stream(messages: Message[], options?: StreamOptions): AsyncIterable<ModelStreamEvent> {
    this.inputs.push(messages.map((message) => message.toJSON()));
    let reply = this.replies.shift();
    if (reply === undefined) throw new Error("the script has no more replies");
    if (typeof reply === "function") reply = reply(JSON.stringify(options?.systemPrompt ?? ""));
    yield new ModelMessageStartEvent({ type: "modelMessageStartEvent", role: "assistant" });
    const say = typeof reply === "string" ? reply : reply.say;
    if (say !== undefined) {
      yield new ModelContentBlockStartEvent({ type: "modelContentBlockStartEvent" });
      yield new ModelContentBlockDeltaEvent({ type: "modelContentBlockDeltaEvent", delta: { type: "textDelta", text: say } });
      yield new ModelContentBlockStopEvent({ type: "modelContentBlockStopEvent" });
    }
    if (typeof reply !== "string") {
      const start = { type: "toolUseStart", name: reply.tool, toolUseId: unique("call") } as const;
      yield new ModelContentBlockStartEvent({ type: "modelContentBlockStartEvent", start });
      const input = { type: "toolUseInputDelta", input: JSON.stringify(reply.input) } as const;
      yield new ModelContentBlockDeltaEvent({ type: "modelContentBlockDeltaEvent", delta: input });
      yield new ModelContentBlockStopEvent({ type: "modelContentBlockStopEvent" });
    }
    const stopReason = typeof reply === "string" ? "endTurn" : "toolUse";
    yield new ModelMessageStopEvent({ type: "modelMessageStopEvent", stopReason });
  }
}

function texts(message: MessageData): string[] {
  return message.content.flatMap((block) => ("text" in block ? [block.text] : []));
}

function kinds(message: MessageData): string[] {
  return message.content.map((block) => Object.keys(block)[0]);
}

const fixture = new Fixture();
const { cf } = fixture;
let prefs = "";

before(async () => {
  prefs = await fixture.store("prefs", [
    { content: "User prefers dark mode in every editor", userId: "ana" },
    { content: "User likes the Solarized theme", userId: "ana" },
    { content: "User edits code in vim", userId: "ana" },
    { content: "Bob prefers light themes", userId: "bob" },
  ]);
});
after(() => fixture.close());

test("the model sees the memory block, and the agent's history stays as it was said", async () => {
  const model = new ScriptedModel(["Solarized Dark, then.", "vim, as always."]);
  const reports: InjectionReport[] = [];
  const injection = new ContextInjection({
    address,
    stores: [prefs],
    scope: { userId: "ana" },
    maxEntries: 2,
    onReport: (report) => reports.push(report),
  });
  const agent = new Agent({ model, plugins: [injection], printer: false });

  const result = await agent.invoke("Which editor theme should I pick?");

  assert.deepEqual(texts(result.lastMessage.toJSON()), ["Solarized Dark, then."]);
  assert.deepEqual(texts(model.inputs[0].at(-1)!), [
    "Which editor theme should I pick?",
    `\n\n<memory>\n<entry source="${prefs}">User prefers dark mode in every editor</entry>\n` +
      `<entry source="${prefs}">User likes the Solarized theme</entry>\n</memory>`,
  ]);
  assert.equal(reports[0].injected, true);
  assert.equal(reports[0].query, "Which editor theme should I pick?");
  assert.deepEqual(
    agent.messages.map((message) => texts(message.toJSON())),
    [["Which editor theme should I pick?"], ["Solarized Dark, then."]],
  );

  await agent.invoke("Which editor do I use?");
  const second = model.inputs[1];
  // What was injected stays with its message, as an InjectedBlock kept in the history would, and
  // the service leaves those entries out: the new turn gets the one not yet shown.
  assert.deepEqual(texts(second[0]), texts(model.inputs[0].at(-1)!));
  assert.deepEqual(texts(second.at(-1)!), [
    "Which editor do I use?",
    `\n\n<memory>\n<entry source="${prefs}">User edits code in vim</entry>\n</memory>`,
  ]);
  const firstIds = reports[0].entries.map((entry) => entry.id);
  assert.ok(!firstIds.includes(reports[1].entries[0].id));
  assert.deepEqual(texts(agent.messages[2].toJSON()), ["Which editor do I use?"]);
  const ledger = agent.appState.get("contextfold") as Record<string, { index: number; blocks: { entryIds: string[] }[] }[]>;
  assert.deepEqual(
    ledger["contextfold:injection"].map(({ index, blocks }) => [index, blocks.map((block) => block.entryIds)]),
    [
      [0, [firstIds]],
      [2, [[reports[1].entries[0].id]]],
    ],
  );
  injection.close();
});

test("with the service down, what was injected before is still shown, and nothing new is", async () => {
  const model = new ScriptedModel(["Solarized Dark, then.", "vim, as always."]);
  const warnings: string[] = [];
  // The service, reached through a relay that is cut after the first turn.
  const service = await relay(address);
  const injection = new ContextInjection({
    address: service.address,
    stores: [prefs],
    scope: { userId: "ana" },
    maxEntries: 2,
    logger: { warn: (message) => warnings.push(message) },
  });
  const agent = new Agent({ model, plugins: [injection], printer: false });
  await agent.invoke("Which editor theme should I pick?");
  const injected = texts(model.inputs[0].at(-1)!);
  assert.match(injected[1], /<memory>/);

  await service.cut();
  await agent.invoke("Which editor do I use?");
  const second = model.inputs[1];
  assert.deepEqual(texts(second[0]), injected, "the first turn's block, shown again from the agent's state");
  assert.deepEqual(texts(second.at(-1)!), ["Which editor do I use?"]);
  assert.equal(warnings.length, 1);
  assert.match(warnings[0], /contextfold inject failed/);
  const ledger = agent.appState.get("contextfold") as Record<string, { index: number }[]>;
  assert.deepEqual(
    ledger["contextfold:injection"].map(({ index }) => index),
    [0],
    "the record is kept",
  );
  injection.close();
});

test("a listener that throws does not keep the memory from the model", async () => {
  const warnings: string[] = [];
  const model = new ScriptedModel(["Dark it is."]);
  const injection = new ContextInjection({
    address,
    stores: [prefs],
    scope: { userId: "ana" },
    onReport: () => {
      throw new Error("the listener's own bug");
    },
    logger: { warn: (message) => warnings.push(message) },
  });
  await new Agent({ model, plugins: [injection], printer: false }).invoke("Which editor theme should I pick?");
  assert.match(texts(model.inputs[0].at(-1)!)[1], /User prefers dark mode in every editor/);
  assert.equal(warnings.length, 1);
  assert.match(warnings[0], /the listener's own bug/);
  injection.close();
});

test("several instances each fold their own block and never search with the others'", async () => {
  const travel = await fixture.store("travel", [
    { content: "User flies from Lisbon airport" },
    { content: "User prefers aisle seats on planes" },
  ]);
  const prefsReports: InjectionReport[] = [];
  const travelReports: InjectionReport[] = [];
  const plugins = [
    new ContextInjection({
      name: "contextfold:prefs",
      client: cf,
      stores: [prefs],
      scope: { userId: "ana" },
      maxEntries: 1,
      onReport: (report) => prefsReports.push(report),
    }),
    new ContextInjection({
      name: "contextfold:travel",
      client: cf,
      stores: [travel],
      maxEntries: 1,
      format: "bullets",
      onReport: (report) => travelReports.push(report),
    }),
  ];
  const model = new ScriptedModel(["Booked.", "Done."]);
  const agent = new Agent({ model, plugins, printer: false });

  const ask = "Book my flight and set up the editor theme on my laptop";
  await agent.invoke(ask);
  const first = texts(model.inputs[0].at(-1)!);
  assert.equal(first[0], ask);
  assert.match(first[1], /^\n\n<memory>/);
  assert.match(first[2], /^\n\n- /);
  assert.deepEqual(
    [...prefsReports, ...travelReports].map((report) => report.query),
    [ask, ask],
  );

  await agent.invoke("Anything else I should know about my flights or my editor theme?");
  const second = model.inputs[1];
  assert.deepEqual(texts(second[0]), first);
  const latest = texts(second.at(-1)!);
  assert.equal(latest.length, 3);
  assert.ok(latest.slice(1).every((block) => !first.includes(block)));
  for (const reports of [prefsReports, travelReports]) {
    assert.notEqual(reports[1].entries[0].id, reports[0].entries[0].id);
  }
});

test("scope and stores come from the agent's state at each call", async () => {
  const bobs = (await cf.memory.listMemories({ store: prefs, scope: { userId: "bob" } })).memories.map((memory) => memory.id);
  const reports: InjectionReport[] = [];
  const injection = new ContextInjection({
    client: cf,
    stores: (agent) => agent.appState.get("stores") as string[],
    scope: fromState<ScopeData>("user"),
    maxEntries: 1,
    onReport: (report) => reports.push(report),
  });
  const agent = new Agent({
    model: new ScriptedModel(["Light.", "Dark."]),
    plugins: [injection],
    appState: { user: { userId: "bob" }, stores: [prefs] },
    printer: false,
  });
  await agent.invoke("Which themes do I like?");
  agent.appState.set("user", { userId: "ana" });
  await agent.invoke("Which themes do I like, again?");
  assert.deepEqual(
    reports[0].entries.map((entry) => entry.id),
    bobs,
  );
  assert.ok(reports[1].entries.length === 1 && !bobs.includes(reports[1].entries[0].id));
});

test("where the fold deliberately differs from this SDK's: no blank line before memory in a message without text", async () => {
  // The SDK's own injection, with a store that returns the entry contextfold injects; both
  // search with the same query, since the message has no text to derive one from.
  const content = "User prefers dark mode in every editor";
  const image = { image: { format: "png", source: { bytes: new Uint8Array([137, 80, 78, 71]) } } };
  const fixed = { name: prefs, writable: false, search: async () => [{ content }] };
  const model = new ScriptedModel(["Noted."]);
  const memoryManager = new MemoryManager({ stores: [fixed], injection: { query: () => "dark mode in the editor" } });
  await new Agent({ model, memoryManager, printer: false }).invoke([image] as ContentBlockData[]);
  const sdk = texts(model.inputs[0].at(-1)!);

  const { report, messages } = await cf.inject([{ role: "user", content: [image] }], {
    stores: [prefs],
    scope: { userId: "ana" },
    query: "dark mode in the editor",
    maxEntries: 1,
  });
  assert.equal(report.entries.length, 1);
  const ours = (messages[0].content[1].injected as { text: string }).text;
  assert.equal(ours, `<memory>\n<entry source="${prefs}">${content}</entry>\n</memory>`);
  // The SDK separates after any block; the Python SDK, and contextfold, only after a text block.
  assert.deepEqual(sdk, [`\n\n${ours}`]);
});

test("a tool-result turn is not a user turn, unless the trigger is everyTurn", async () => {
  const weather = tool({
    name: "weather",
    description: "The weather in a city.",
    inputSchema: { type: "object", properties: { city: { type: "string" } }, required: ["city"] },
    callback: () => "rain, 12C",
  });
  const say = "Let me check the weather, and which editor you use.";
  for (const trigger of ["userTurn", "everyTurn"] as const) {
    const model = new ScriptedModel([{ say, tool: "weather", input: { city: "Lisbon" } }, "Take a coat."]);
    const reports: InjectionReport[] = [];
    const injection = new ContextInjection({
      address,
      stores: [prefs],
      scope: { userId: "ana" },
      trigger,
      maxEntries: 1,
      onReport: (report) => reports.push(report),
    });
    await new Agent({ model, tools: [weather], plugins: [injection], printer: false }).invoke("Which theme should I use?");

    const [first, second] = model.inputs;
    assert.match(texts(first.at(-1)!).at(-1)!, /^\n\n<memory>\n/);
    if (trigger === "userTurn") {
      assert.deepEqual(kinds(second.at(-1)!), ["toolResult"]);
    } else {
      assert.deepEqual(kinds(second.at(-1)!), ["toolResult", "text"]);
      assert.deepEqual(
        reports.map((report) => report.query),
        ["Which theme should I use?", say],
      );
    }
  }
});

for (const service of ["down", "hanging"] as const) {
  test(`the agent works when the service is ${service}`, async () => {
    const silent = await silentServer();
    const port = service === "down" ? await closedPort() : silent.port;
    const warnings: string[] = [];
    const model = new ScriptedModel(["Hello!"]);
    const injection = new ContextInjection({
      address: `127.0.0.1:${port}`,
      timeoutMs: 300,
      logger: { warn: (message) => warnings.push(message) },
    });
    try {
      const result = await new Agent({ model, plugins: [injection], printer: false }).invoke("Hi there");
      assert.deepEqual(texts(result.lastMessage.toJSON()), ["Hello!"]);
      assert.deepEqual(
        model.inputs.map((messages) => messages.map(({ role, content }) => ({ role, content }))),
        [[{ role: "user", content: [{ text: "Hi there" }] }]],
      );
      assert.equal(warnings.length, 1);
      assert.match(warnings[0], /contextfold inject failed/);
    } finally {
      await silent.close();
    }
  });
}

test("the memory tools and extraction use the service", async () => {
  const store = await fixture.store("notes");
  const scope = { userId: unique("user") };
  const notes = (options: Partial<ConstructorParameters<typeof ContextfoldMemoryStore>[0]> = {}) =>
    new ContextfoldMemoryStore({ store, address, description: "Notes", scope, ...options });
  const stored = async () =>
    (await cf.memory.listMemories({ store, scope })).memories.map((memory) => memory.content).sort();

  // add_memory writes through the service.
  const writer = new ScriptedModel([{ tool: "add_memory", input: { entries: ["User's cat is named Miso"] } }, "Noted."]);
  await new Agent({
    model: writer,
    memoryManager: new MemoryManager({ stores: [notes()], addToolConfig: true, injection: false }),
    printer: false,
  }).invoke("My cat is named Miso.");
  assert.deepEqual(await stored(), ["User's cat is named Miso"]);

  // search_memory, in another agent, reads it back: the model sees it in the tool result.
  const reader = new ScriptedModel([{ tool: "search_memory", input: { query: "what is my cat called" } }, "Miso."]);
  await new Agent({
    model: reader,
    memoryManager: new MemoryManager({ stores: [notes()], injection: false }),
    printer: false,
  }).invoke("What's my cat called?");
  const result = JSON.stringify(reader.inputs[1].at(-1)!.content);
  assert.match(result, /User's cat is named Miso/);
  assert.match(result, new RegExp(store));

  // Extraction distills each turn with the agent's model and stores the facts in the service,
  // once each even when the same fact is extracted twice.
  const extract = (system: string) => {
    assert.match(system, /JSON array/);
    return JSON.stringify([{ content: "User lives in Lisbon" }]);
  };
  const manager = new MemoryManager({
    stores: [notes({ extraction: { trigger: [new InvocationTrigger()], extractor: new ModelExtractor() } })],
    injection: false,
  });
  const agent = new Agent({
    model: new ScriptedModel(["Lovely city.", extract, "Indeed.", extract]),
    memoryManager: manager,
    printer: false,
  });
  await agent.invoke("I live in Lisbon.");
  await manager.flush();
  await agent.invoke("Lisbon is sunny.");
  await manager.flush();
  assert.deepEqual(await stored(), ["User lives in Lisbon", "User's cat is named Miso"]);
});

test("server-side extraction remembers the user's turns once, and a store filter narrows its searches", async () => {
  const store = await fixture.store("turns");
  const scope = { userId: unique("user") };
  const manager = new MemoryManager({
    stores: [new ContextfoldMemoryStore({ store, address, scope, extraction: { trigger: [new InvocationTrigger()] } })],
    injection: false,
  });
  const agent = new Agent({ model: new ScriptedModel(["Porto it is.", "Got it."]), memoryManager: manager, printer: false });
  await agent.invoke("I am moving to Porto in May.");
  await manager.flush();
  await agent.invoke("I will need a two-bedroom flat.");
  await manager.flush();
  const remembered = (await cf.memory.listMemories({ store, scope })).memories;
  assert.deepEqual(remembered.map((memory) => memory.content).sort(), [
    "I am moving to Porto in May.",
    "I will need a two-bedroom flat.",
  ]);

  await cf.memory.updateMemory({
    memory: { id: remembered[0].id, metadata: { topic: "moving" } },
    updateMask: { paths: ["metadata"] },
  });
  const moving = new ContextfoldMemoryStore({ store, address, scope, filter: { topic: "moving" } });
  const found = await moving.search("what does the user need");
  assert.deepEqual(
    found.map((entry) => entry.content),
    [remembered[0].content],
  );
});

test("an entry added twice is stored once, under the id the Python store gives it", async () => {
  const store = await fixture.store("shared");
  const notes = new ContextfoldMemoryStore({ store, address, scope: { userId: "ana" } });
  const first = await notes.add("User likes tea", { topic: "drinks" });
  assert.equal(await notes.add("User likes tea", { topic: "drinks" }), first);
  assert.equal(first, await notes.entryId("User likes tea", { topic: "drinks" }));
  assert.equal((await cf.memory.listMemories({ store })).memories.length, 1);
  // tests/test_strands_python.py asserts the Python store derives this same id.
  const shared = new ContextfoldMemoryStore({ store: "shared-notes", address, scope: { userId: "ana" } });
  assert.equal(await shared.entryId("User likes tea", { topic: "drinks" }), "strands-2259686f58e2d1f61f0cf695152d9310");
});
