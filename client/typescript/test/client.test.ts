/** The TypeScript client against a live contextfold server: unary calls, errors with details, deadlines. */
import assert from "node:assert/strict";
import net from "node:net";
import { after, before, test } from "node:test";
import { setTimeout as sleep } from "node:timers/promises";
import { inspect } from "node:util";
import {
  CandidateVerdict,
  ContextfoldClient,
  ContextfoldError,
  filterMessage,
  type ExportMemoriesResponse,
  fromProtoMessages,
  injectRequest,
  Ranking,
  renderForModel,
  SkipReason,
  startProvider,
  toProtoMessages,
  type MessageData,
} from "../src/index.js";
import { address, closedPort, Fixture, unique } from "./support.js";

const fixture = new Fixture();
const { cf } = fixture;
let prefs = "";

before(async () => {
  prefs = await fixture.store("prefs", [
    { content: "User prefers dark mode in every editor" },
    { content: "User likes the Solarized theme" },
    { content: "User's dog is called Pixel" },
  ]);
});
after(() => fixture.close());

test("unary calls: entries are added, searched and injected", async () => {
  const [hit] = (await cf.memory.searchMemories({ query: "what is my dog's name", stores: [prefs], maxResults: 1 }))
    .results;
  assert.equal(hit.memory?.content, "User's dog is called Pixel");

  const { messages, report } = await cf.inject([{ role: "user", content: [{ text: "Which editor theme should I pick?" }] }], {
    stores: [prefs],
    maxEntries: 2,
  });
  assert.equal(report.injected, true);
  assert.equal(report.query, "Which editor theme should I pick?");
  assert.equal(report.targetMessageIndex, 0);
  const expected =
    `\n\n<memory>\n<entry source="${prefs}">User prefers dark mode in every editor</entry>\n` +
    `<entry source="${prefs}">User likes the Solarized theme</entry>\n</memory>`;
  assert.deepEqual(messages[0].content[1], {
    injected: { source: "memory", text: expected, entryIds: report.entries.map((entry) => entry.id) },
  });
  assert.deepEqual(renderForModel(messages)[0].content, [{ text: "Which editor theme should I pick?" }, { text: expected }]);
});

test("updates carry etags, filters narrow, and erasure counts what it deleted", async () => {
  const store = await fixture.store("lifecycle");
  const [added] = (
    await cf.memory.addMemories({
      store,
      memories: [
        { content: "Lives in Denver", userId: "ts-user", metadata: { kind: "home", rating: 4 } },
        { content: "Drinks coffee", userId: "ts-user", metadata: { kind: "taste", rating: 2 } },
      ],
    })
  ).memories;
  const { memory: updated } = await cf.memory.updateMemory({
    memory: { id: added.id, content: "Lives in Lisbon", etag: added.etag },
    updateMask: { paths: ["content"] },
  });
  assert.equal(updated?.content, "Lives in Lisbon");
  await assert.rejects(
    cf.memory.updateMemory({ memory: { id: added.id, content: "Lives in Oslo", etag: added.etag }, updateMask: { paths: ["content"] } }),
    (error: unknown) => error instanceof ContextfoldError && error.status === "ABORTED" && error.reason === "ETAG_MISMATCH",
  );
  const { versions } = await cf.memory.listMemoryVersions({ id: added.id });
  assert.deepEqual(
    versions.map((version) => version.memory?.content),
    ["Lives in Denver"],
  );

  const ask = [{ role: "user" as const, content: [{ text: "Where does the user live, and what do they drink?" }] }];
  const homes = await cf.inject(ask, { stores: [store], filter: { kind: "home", rating: { gte: 3 } } });
  assert.deepEqual(
    homes.report.entries.map((entry) => entry.id),
    [added.id],
  );
  const listed = await cf.memory.listMemories({ store, filter: filterMessage({ any: [{ kind: "taste" }, { rating: { gt: 3 } }] }) });
  assert.equal(listed.memories.length, 2);
  assert.throws(() => filterMessage({ kind: ["a"] as unknown as string }), /a filter compares with/);
  await assert.rejects(
    cf.memory.listMemories({ store, filter: filterMessage({ "metadata.": "x" }) }),
    (error: unknown) => error instanceof ContextfoldError && error.fieldViolations[0]?.field === "filter.field.field",
  );

  const explained = await cf.inject(ask, { stores: [store], maxEntries: 1, explain: true });
  assert.deepEqual(
    explained.report.candidates.map((candidate) => candidate.verdict),
    [CandidateVerdict.INJECTED, CandidateVerdict.RANKED_BELOW],
  );
  assert.equal(explained.report.candidates[0].id, explained.report.entries[0].id);

  const counted = await cf.memory.eraseMemories({ scope: { userId: "ts-user" }, stores: [store], validateOnly: true });
  assert.equal(counted.erasedCount, 2n);
  const { erasedCount } = await cf.memory.eraseMemories({ scope: { userId: "ts-user" }, stores: [store] });
  assert.equal(erasedCount, 2n);
  assert.equal((await cf.memory.listMemories({ store })).memories.length, 0);
});

test("an export streams stores and entries, an import takes them back, and stream errors are decoded", async () => {
  const store = await fixture.store("streams", [{ content: "Exported one" }, { content: "Exported two" }]);
  const parts: ExportMemoriesResponse[] = [];
  for await (const part of cf.memory.exportMemories({ stores: [store] })) parts.push(part);
  assert.deepEqual(
    parts[0].stores.map((s) => s.name),
    [store],
  );
  const memories = parts.flatMap((part) => part.memories);
  assert.deepEqual(memories.map((memory) => memory.content).sort(), ["Exported one", "Exported two"]);
  assert.equal(memories[0].vector.length, 384);

  async function* again() {
    for (const part of parts) yield { stores: part.stores, memories: part.memories };
  }
  const totals = await cf.memory.importMemories(again());
  assert.equal(totals.unchangedCount, 2n);

  await assert.rejects(
    (async () => {
      for await (const part of cf.memory.exportMemories({ stores: [unique("missing")] })) void part;
    })(),
    (error: unknown) => error instanceof ContextfoldError && error.status === "NOT_FOUND",
  );
});

test("the ranking is chosen per call and the report names it", async () => {
  const ask = [{ role: "user" as const, content: [{ text: "Which editor theme should I pick?" }] }];
  const byDefault = await cf.inject(ask, { stores: [prefs] });
  assert.equal(byDefault.report.ranking, Ranking.STORE_AWARE);
  const bySimilarity = await cf.inject(ask, { stores: [prefs], ranking: "similarity" });
  assert.equal(bySimilarity.report.ranking, Ranking.SIMILARITY);
  assert.throws(() => injectRequest(ask, { ranking: "alphabetical" as "hybrid" }), /unknown ranking "alphabetical"/);
});

test("a replayed question reads its days against when it was asked", async () => {
  const store = await fixture.store("replayed");
  const decided = (day: string, content: string) => ({ id: `${store}-${day}`, content, metadata: { date: day } });
  await cf.memory.addMemories({
    store,
    memories: [
      decided("2023-05-02", "We agreed to move the release to a blue-green rollout."),
      decided("2023-05-09", "We agreed to freeze the release branch until the audit ends."),
    ],
  });
  const ask = [{ role: "user" as const, content: [{ text: "What did we agree about the release yesterday?" }] }];
  const askedTime = new Date("2023-05-10T09:00:00Z");
  assert.equal(injectRequest(ask, { askedTime }).memory?.askedTime?.seconds, BigInt(askedTime.getTime() / 1000));
  const replayed = await cf.inject(ask, { stores: [store], explain: true, askedTime });
  assert.equal(replayed.report.entries[0].id, `${store}-2023-05-09`);
  const dated = replayed.report.candidates.filter((candidate) => candidate.inputs.date === 1);
  assert.deepEqual(dated.map((candidate) => candidate.id), [`${store}-2023-05-09`]);
});

test("a Strands conversation goes through the service and back unchanged, bytes and all", async () => {
  const conversation: MessageData[] = [
    { role: "user", content: [{ text: "What is in this picture?" }, { image: { format: "png", source: { bytes: new Uint8Array([137, 80, 78, 71, 0, 255]) } } }] },
    {
      role: "assistant",
      content: [
        { reasoning: { text: "Look it up.", signature: "sig" } },
        { text: "Let me look up the dog's name." },
        { toolUse: { name: "lookup", toolUseId: "t1", input: { query: "dog", limit: 3 } } },
      ],
      trackingId: "m-2",
    },
    { role: "user", content: [{ toolResult: { toolUseId: "t1", status: "success", content: [{ json: { found: ["Pixel"] } }] } }, { cachePoint: { cacheType: "default" } }] },
  ];
  assert.deepEqual(fromProtoMessages(toProtoMessages(conversation)), conversation);
  const kinds = toProtoMessages(conversation).map((message) => message.content.map((block) => block.block.case));
  assert.deepEqual(kinds, [["text", "image"], ["reasoning", "text", "toolUse"], ["toolResult", "rawJson"]]);

  const { messages, report } = await cf.inject(conversation, { stores: [prefs], trigger: "everyTurn", maxEntries: 1 });
  assert.equal(report.targetMessageIndex, 2);
  assert.deepEqual(messages.slice(0, 2), conversation.slice(0, 2));
  assert.deepEqual(messages[2].content.slice(0, 2), conversation[2].content);
  assert.equal(messages[2].content.length, 3);
});

test("an error carries its status and details", async () => {
  await assert.rejects(cf.memory.searchMemories({ query: "  " }), (error: unknown) => {
    assert.ok(error instanceof ContextfoldError);
    assert.equal(error.status, "INVALID_ARGUMENT");
    assert.deepEqual(
      error.fieldViolations.map((violation) => violation.field),
      ["query"],
    );
    return true;
  });
  const missing = unique("no-such-memory");
  await assert.rejects(cf.memory.getMemory({ id: missing }), (error: unknown) => {
    assert.ok(error instanceof ContextfoldError);
    assert.equal(error.status, "NOT_FOUND");
    assert.deepEqual(error.resource, { type: "memory", name: missing });
    return true;
  });
  await assert.rejects(cf.inject([{ role: "assistant", content: [{ text: "hi" }] }], { trigger: "sometimes" as "everyTurn" }), {
    name: "TypeError",
    message: "unknown trigger \"sometimes\": expected one of userTurn, everyTurn",
  });
});

test("a printed error shows its status, reason and fields decoded, never the details' bytes", async () => {
  await assert.rejects(cf.memory.searchMemories({ query: "  " }), (error: unknown) => {
    assert.ok(error instanceof ContextfoldError);
    const printed = inspect(error);
    assert.match(printed, /^ContextfoldError INVALID_ARGUMENT: /);
    assert.match(String(error), /\n {2}query: /);
    assert.match(printed, /\n {2}query: /);
    assert.doesNotMatch(printed, /Uint8Array|\[Object|details:/);
    return true;
  });
});

test("an API key that cannot be a header is refused before any call, naming where it came from", () => {
  assert.throws(() => new ContextfoldClient({ address, apiKey: "cfk_…" }), {
    name: "InvalidApiKeyError",
    message: /^the API key from the apiKey option holds '…' \(U\+2026\) at position 4: it is a page's placeholder/,
  });
  const before = process.env.CONTEXTFOLD_API_KEY;
  process.env.CONTEXTFOLD_API_KEY = "cfk_1234 5678";
  try {
    assert.throws(() => new ContextfoldClient({ address }), {
      name: "InvalidApiKeyError",
      message: /^the API key from CONTEXTFOLD_API_KEY holds U\+0020 at position 8, which a header cannot carry/,
    });
  } finally {
    if (before === undefined) delete process.env.CONTEXTFOLD_API_KEY;
    else process.env.CONTEXTFOLD_API_KEY = before;
  }
  assert.throws(() => new ContextfoldClient({ address, apiKey: "<your key>" }), { message: /looks like a placeholder/ });
  assert.throws(() => new ContextfoldClient({ address, apiKey: " " }), { message: "the API key from the apiKey option is empty" });
});

test("a deadline: the caller's timeout reaches the providers, and one too short fails the call", async () => {
  let toldMs: number | undefined;
  const slow = await startProvider(async (context) => {
    toldMs = context.timeRemainingMs;
    await sleep(5_000, undefined, { signal: context.signal }).catch(() => undefined);
    return "<late/>";
  });
  const name = unique("slow-ts");
  await cf.providers.registerProvider({ provider: { name, target: `127.0.0.1:${slow.port}` } });
  try {
    const { report } = await cf.inject([{ role: "user", content: [{ text: "Which theme do I like?" }] }], { stores: [prefs], providers: [name] }, { timeoutMs: 800 });
    const source = report.sources.find((s) => s.source === name);
    assert.equal(source?.skipReason, SkipReason.TIMEOUT);
    assert.equal(report.injected, true);
    assert.ok(toldMs !== undefined && toldMs < 800, `the provider was given ${toldMs} ms`);
  } finally {
    await cf.providers.deleteProvider({ name });
    await slow.close();
  }

  await assert.rejects(cf.inject([{ role: "user", content: [{ text: "hello" }] }], { stores: [prefs] }, { timeoutMs: 1 }), (error: unknown) => {
    assert.ok(error instanceof ContextfoldError);
    assert.equal(error.status, "DEADLINE_EXCEEDED");
    return true;
  });
});

test("a call that only reads is tried again when the connection fails it; a write is not", async () => {
  // Nothing listens on `port` at first; once the first attempt has failed, a plain TCP relay to the
  // live server opens there, as a replica coming back would.
  const port = await closedPort();
  const [host, serverPort] = [address.slice(0, address.lastIndexOf(":")), Number(address.slice(address.lastIndexOf(":") + 1))];
  let relay: net.Server | undefined;
  const attempts: string[] = [];
  const client = new ContextfoldClient({
    address: `127.0.0.1:${port}`,
    timeoutMs: 10_000,
    interceptors: [
      (next) => async (request) => {
        attempts.push(request.method.name);
        try {
          return await next(request);
        } catch (error) {
          if (relay === undefined && request.method.name === "ListStores") {
            relay = net.createServer((socket) => socket.pipe(net.connect(serverPort, host)).pipe(socket));
            await new Promise<void>((resolve) => relay?.listen(port, "127.0.0.1", resolve));
          }
          throw error;
        }
      },
    ],
  });
  try {
    await assert.rejects(client.memory.createStore({ store: { name: unique("never") } }), (error: unknown) => {
      assert.ok(error instanceof ContextfoldError);
      assert.equal(error.status, "UNAVAILABLE");
      return true;
    });
    assert.deepEqual(attempts, ["CreateStore"]);

    await client.memory.listStores({});
    assert.deepEqual(attempts, ["CreateStore", "ListStores", "ListStores"]);
  } finally {
    client.close();
    relay?.close();
  }

  // A deadline ends the retries: 60 ms leave room for one more attempt after 50 ms, not a third.
  const down = new ContextfoldClient({ address: `127.0.0.1:${await closedPort()}`, timeoutMs: 60 });
  const started = Date.now();
  await assert.rejects(down.memory.getMemory({ id: "x" }), (error: unknown) => error instanceof ContextfoldError);
  assert.ok(Date.now() - started < 1_000, `gave up after ${Date.now() - started} ms`);
  down.close();
});

// Run by tests/test_replicas.py against a server with a read replica whose replay it has paused
// (CONTEXTFOLD_REPLICATED=1); elsewhere there is no replica to read from.
test("a client reads its own writes while the replica lags; another client reads the replica", {
  skip: process.env.CONTEXTFOLD_REPLICATED !== "1",
}, async () => {
  const store = await fixture.store("replicated");
  const [added] = (await cf.memory.addMemories({ store, memories: [{ content: "The office moved to Porto" }] })).memories;
  const question: MessageData[] = [{ role: "user", content: [{ text: "Where is the office now?" }] }];
  const mine = await cf.inject(question, { stores: [store], maxEntries: 10 });
  assert.equal(mine.report.database, "primary");
  assert.deepEqual(
    mine.report.entries.map((entry) => entry.id),
    [added.id],
  );
  const other = new ContextfoldClient({ address });
  try {
    const theirs = await other.memory.searchMemories({ query: "where is the office now", maxResults: 10 });
    assert.equal(theirs.database, "replica-1");
    assert.ok(!theirs.results.some((result) => result.memory?.id === added.id));
  } finally {
    other.close();
  }
});
