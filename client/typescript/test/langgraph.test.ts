/**
 * LangGraph.js's `BaseStore` (`@langchain/langgraph-checkpoint` 1.2) kept in contextfold: the store
 * held to what `BaseStore` documents (LangGraph ships no store conformance suite in its packages),
 * and used by a LangChain.js agent's tool through `createAgent({ store })`.
 */
import assert from "node:assert/strict";
import { test } from "node:test";
import { fakeModel } from "@langchain/core/testing";
import type { BaseStore } from "@langchain/langgraph-checkpoint";
import { AIMessage, createAgent, HumanMessage, tool, type ToolRuntime } from "langchain";
import { z } from "zod";
import { ContextfoldClient } from "../src/index.js";
import { ContextfoldStore, entryId } from "../src/langgraph.js";
import { address, unique } from "./support.js";

/** A store of its own for one test, deleted after it. */
async function withStore(body: (store: ContextfoldStore) => Promise<void>): Promise<void> {
  const store = new ContextfoldStore({ store: unique("langgraph"), address });
  const cf = new ContextfoldClient({ address });
  try {
    await body(store);
  } finally {
    await cf.memory.deleteStore({ name: store.store, force: true }).catch(() => undefined); // never made: fine
    cf.close();
    store.stop();
  }
}

function sorted(namespaces: string[][]): string[] {
  return namespaces.map((namespace) => namespace.join("/")).sort();
}

test("an item put is got with its value, key, namespace and times, under the id Python's store gives it", () =>
  withStore(async (store) => {
    await store.put(["users", "ada", "prefs"], "seat", { text: "Ada books an aisle seat", rank: 2 });
    const item = await store.get(["users", "ada", "prefs"], "seat");
    assert.ok(item !== null);
    assert.deepEqual([item.namespace, item.key, item.value], [["users", "ada", "prefs"], "seat", { text: "Ada books an aisle seat", rank: 2 }]);
    assert.ok(item.createdAt instanceof Date && item.updatedAt >= item.createdAt);
    // contextfold.langgraph.entry_id(("users", "ada"), "seat") and (("çà", "ü"), "k€y"), in Python.
    assert.equal(await entryId(["users", "ada"], "seat"), "lg-475c206543aa15116bf720fd8dfb1bd18fbff12f");
    assert.equal(await entryId(["çà", "ü"], "k€y"), "lg-c9edfaa542bcf2cc0e94ee7808640b458d5ce55d");
    assert.equal(await store.get(["users", "ada", "prefs"], "window"), null);
    assert.equal(await store.get(["users", "bob", "prefs"], "seat"), null);
  }));

test("a put under the same key replaces the value and a delete removes it", () =>
  withStore(async (store) => {
    await store.put(["users", "ada"], "diet", { text: "Ada eats fish" });
    const first = await store.get(["users", "ada"], "diet");
    await store.put(["users", "ada"], "diet", { text: "Ada eats vegetarian" });
    const second = await store.get(["users", "ada"], "diet");
    assert.deepEqual(second?.value, { text: "Ada eats vegetarian" });
    assert.equal(second?.createdAt.getTime(), first?.createdAt.getTime());
    assert.ok(second!.updatedAt > first!.updatedAt);
    await store.delete(["users", "ada"], "diet");
    assert.equal(await store.get(["users", "ada"], "diet"), null);
    await store.delete(["users", "ada"], "diet"); // deleting what is gone is no error
  }));

test("a search by meaning stays in its namespace prefix and filter", () =>
  withStore(async (store) => {
    await store.put(["users", "ada"], "seat", { text: "Ada always books an aisle seat", rank: 1 });
    await store.put(["users", "ada"], "diet", { text: "Ada eats vegetarian food", rank: 3 });
    await store.put(["users", "ada", "trips"], "lisbon", { text: "Ada flies to Lisbon in May", rank: 5 });
    await store.put(["users", "bob"], "seat", { text: "Bob wants a window seat", rank: 1 });
    const found = await store.search(["users", "ada"], { query: "which seat should I book?" });
    assert.equal(found[0].key, "seat");
    assert.deepEqual(sorted([...new Set(found.map((item) => item.namespace.join("/")))].map((n) => n.split("/"))), ["users/ada", "users/ada/trips"]);
    assert.ok(found[0].score! > found[found.length - 1].score!);
    const sameRank = await store.search(["users"], { query: "seat", filter: { rank: 1 }, limit: 5 });
    assert.deepEqual(sameRank.map((item) => `${item.namespace.join("/")}:${item.key}`).sort(), ["users/ada:seat", "users/bob:seat"]);
    const ranked = await store.search(["users", "ada"], { query: "food", filter: { rank: { $gte: 3 } } });
    assert.deepEqual(ranked.map((item) => item.key).sort(), ["diet", "lisbon"]);
    const other = await store.search(["users", "ada"], { query: "food", filter: { rank: { $ne: 3 } } });
    assert.deepEqual(other.map((item) => item.key).sort(), ["lisbon", "seat"]);
    assert.equal((await store.search(["users", "ada"], { query: "food", limit: 1, offset: 1 })).length, 1);
    await assert.rejects(store.search(["users"], { query: "x", filter: { rank: { $near: 1 } } }), /\$near is not one LangGraph defines/);
  }));

test("a search without a query lists in the order written", () =>
  withStore(async (store) => {
    assert.deepEqual(await store.search(["users"]), []); // nothing written yet: the store is not made yet
    for (let number = 0; number < 5; number++) await store.put(["notes", "ada"], `note-${number}`, { text: `note ${number}` });
    await store.put(["notes", "bob"], "note-0", { text: "bob's" });
    assert.deepEqual((await store.search(["notes", "ada"])).map((item) => item.key), ["note-0", "note-1", "note-2", "note-3", "note-4"]);
    assert.deepEqual((await store.search(["notes", "ada"], { limit: 2, offset: 1 })).map((item) => item.key), ["note-1", "note-2"]);
    assert.ok((await store.search(["notes"])).every((item) => item.score === undefined));
  }));

test("namespaces are listed by prefix, suffix and depth", () =>
  withStore(async (store) => {
    for (const namespace of [["users", "ada", "prefs"], ["users", "ada", "trips"], ["users", "bob", "prefs"], ["teams", "x"]]) {
      await store.put(namespace, "k", { text: "-" });
    }
    assert.deepEqual(sorted(await store.listNamespaces()), ["teams/x", "users/ada/prefs", "users/ada/trips", "users/bob/prefs"]);
    assert.deepEqual(sorted(await store.listNamespaces({ prefix: ["users", "ada"] })), ["users/ada/prefs", "users/ada/trips"]);
    assert.deepEqual(sorted(await store.listNamespaces({ suffix: ["prefs"] })), ["users/ada/prefs", "users/bob/prefs"]);
    assert.deepEqual(sorted(await store.listNamespaces({ prefix: ["users", "*", "prefs"] })), ["users/ada/prefs", "users/bob/prefs"]);
    assert.deepEqual(sorted(await store.listNamespaces({ maxDepth: 2 })), ["teams/x", "users/ada", "users/bob"]);
  }));

test("a LangChain.js agent's tool reads the store it was given", () =>
  withStore(async (store) => {
    await store.put(["users", "ada"], "seat", { text: "Ada always books an aisle seat" });
    const recall = tool(
      async ({ query }, runtime: ToolRuntime) => {
        const given = runtime.store as unknown as BaseStore; // what createAgent was given, as LangGraph types it
        const found = await given.search(["users", "ada"], { query, limit: 1 });
        return found.map((item) => item.value.text as string).join("\n");
      },
      { name: "recall", description: "Search Ada's memory", schema: z.object({ query: z.string() }) },
    );
    const model = fakeModel()
      .respondWithTools([{ name: "recall", args: { query: "seat" }, id: "call-1" }])
      .respond(new AIMessage("An aisle seat."));
    const agent = createAgent({ model, tools: [recall], store });
    const result = await agent.invoke({ messages: [new HumanMessage("Which seat do I like?")] });
    const answered = result.messages.find((message) => message.getType() === "tool");
    assert.equal(answered?.text, "Ada always books an aisle seat");
  }));
