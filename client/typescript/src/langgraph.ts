/**
 * LangGraph's `BaseStore` kept in contextfold: an agent's long-term memory, searched by meaning.
 *
 *   import { createAgent } from "langchain";
 *   import { ContextfoldStore } from "@contextfold/client/langgraph";
 *
 *   const agent = createAgent({ model, tools, store: new ContextfoldStore({ store: "langgraph" }) });
 *
 * How LangGraph's terms map to contextfold's (the same as the Python `ContextfoldStore`, so agents
 * in either language share items):
 *
 * - A `ContextfoldStore` keeps its items in one contextfold store (`store`, made on the first
 *   write if it does not exist), in the namespace of the client's API key.
 * - An item is one entry: its id derived from the item's namespace and key (`lg-` and a hash),
 *   its `value` and where it belongs in its metadata (`value`; `langgraph.key`, `langgraph.depth`,
 *   `langgraph.ns.n0`, `n1`, … the namespace's labels), its content what is searched by meaning:
 *   the value as JSON, or the text of the fields `index` names.
 * - `put` is an upsert under that id (`UpdateMemory` with `allowMissing`); `delete` deletes it.
 * - `search` with a `query` is `SearchMemories` over the store, the namespace prefix and `filter`
 *   (on the value's fields: equality, `$eq`, `$ne`, `$gt`, `$gte`, `$lt`, `$lte`) as metadata
 *   filters; each item's `score` is its similarity. Without a query, the items in the order they
 *   were written. `listNamespaces` reads the namespaces of the store's items.
 */
import type { JsonObject } from "@bufbuild/protobuf";
import { timestampDate } from "@bufbuild/protobuf/wkt";
import {
  BaseStore,
  getTextAtPath,
  type GetOperation,
  type Item,
  type ListNamespacesOperation,
  type Operation,
  type OperationResults,
  type PutOperation,
  type SearchItem,
  type SearchOperation,
} from "@langchain/langgraph-checkpoint";
import { sha256 } from "./adapters.js";
import { ContextfoldClient, type ClientOptions } from "./client.js";
import { ContextfoldError } from "./errors.js";
import { filterMessage, type FilterData } from "./filter.js";
import type { Memory } from "./gen/contextfold/v1/memory_pb.js";

/** Where an item's place is kept in its entry's metadata, beside its value. */
const PLACE = "langgraph";
const VALUE = "value";
/** LangGraph's filter operators, as contextfold's filters name them. */
const OPERATORS: Record<string, string> = { $eq: "eq", $gt: "gt", $gte: "gte", $lt: "lt", $lte: "lte" };
/** How many entries a listing reads a page. */
const PAGE = 1000;

/** JSON as Python's `json.dumps` writes it (", " and ": " between items; sorted keys when asked). */
function pythonJson(value: unknown, sortKeys: boolean, ascii: boolean): string {
  if (Array.isArray(value)) return `[${value.map((item) => pythonJson(item, sortKeys, ascii)).join(", ")}]`;
  if (value !== null && typeof value === "object") {
    const keys = Object.keys(value);
    if (sortKeys) keys.sort();
    const record = value as Record<string, unknown>;
    return `{${keys.map((key) => `${pythonJson(key, sortKeys, ascii)}: ${pythonJson(record[key], sortKeys, ascii)}`).join(", ")}}`;
  }
  const text = JSON.stringify(value) ?? "null";
  return ascii ? text.replace(/[\u0080-\uffff]/g, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, "0")}`) : text;
}

/** The id of the entry holding the item `key` of `namespace` (the Python store's, for the same item). */
export async function entryId(namespace: readonly string[], key: string): Promise<string> {
  return `lg-${(await sha256(pythonJson([namespace, key], false, true))).slice(0, 40)}`;
}

export interface ContextfoldStoreOptions {
  /** The contextfold store holding the items (default `"langgraph"`). */
  store?: string;
  /** A client to share (the caller closes it); otherwise one is made from `address`. */
  client?: ContextfoldClient;
  address?: ClientOptions["address"];
  /** Deadline of each call, in milliseconds (default 10 000). */
  timeoutMs?: number;
}

/** A LangGraph store whose items are entries of one contextfold store; see the module's docs. */
export class ContextfoldStore extends BaseStore {
  readonly store: string;
  private readonly client: ContextfoldClient;
  private readonly ownsClient: boolean;
  private readonly timeoutMs: number;
  private made?: Promise<void>;

  constructor(options: ContextfoldStoreOptions = {}) {
    super();
    this.store = options.store ?? "langgraph";
    this.ownsClient = options.client === undefined;
    this.client = options.client ?? new ContextfoldClient({ address: options.address });
    this.timeoutMs = options.timeoutMs ?? 10_000;
  }

  async batch<Op extends Operation[]>(operations: Op): Promise<OperationResults<Op>> {
    const results = [];
    for (const operation of operations) results.push(await this.run(operation));
    return results as OperationResults<Op>;
  }

  /** Close the client this store made (a client passed in is the caller's to close). */
  stop(): void {
    if (this.ownsClient) this.client.close();
  }

  private async run(operation: Operation): Promise<unknown> {
    if ("matchConditions" in operation || ("limit" in operation && !("namespacePrefix" in operation))) {
      return this.listNamespacesOf(operation as ListNamespacesOperation);
    }
    if ("namespacePrefix" in operation) return this.searchOf(operation);
    if ("value" in operation) return this.putOf(operation);
    return this.getOf(operation as GetOperation);
  }

  private async getOf(operation: GetOperation): Promise<Item | null> {
    try {
      const { memory } = await this.client.memory.getMemory(
        { id: await entryId(operation.namespace, operation.key) },
        { timeoutMs: this.timeoutMs },
      );
      return memory === undefined ? null : item(memory);
    } catch (error) {
      if (error instanceof ContextfoldError && error.status === "NOT_FOUND") return null;
      throw error;
    }
  }

  private async putOf(operation: PutOperation): Promise<void> {
    const id = await entryId(operation.namespace, operation.key);
    if (operation.value === null) {
      await this.client.memory.deleteMemories({ ids: [id], allowMissing: true }, { timeoutMs: this.timeoutMs });
      return;
    }
    await this.ensureStore();
    const ns = Object.fromEntries(operation.namespace.map((label, index) => [`n${index}`, label]));
    const place = { key: operation.key, depth: operation.namespace.length, ns };
    await this.client.memory.updateMemory(
      {
        memory: {
          id,
          store: this.store,
          content: content(operation.value, operation.index),
          metadata: { [VALUE]: operation.value, [PLACE]: place } as JsonObject,
        },
        updateMask: { paths: ["content", "metadata"] },
        allowMissing: true,
      },
      { timeoutMs: this.timeoutMs },
    );
  }

  private ensureStore(): Promise<void> {
    this.made ??= this.client.memory
      .createStore({ store: { name: this.store, description: "LangGraph's store (@contextfold/client/langgraph)" } })
      .then(
        () => undefined,
        (error: unknown) => {
          if (error instanceof ContextfoldError && error.status === "ALREADY_EXISTS") return;
          this.made = undefined;
          throw error;
        },
      );
    return this.made;
  }

  private async searchOf(operation: SearchOperation): Promise<SearchItem[]> {
    const conditions = { ...prefix(operation.namespacePrefix), ...valueFilter(operation.filter ?? {}) };
    const offset = operation.offset ?? 0;
    const wanted = offset + (operation.limit ?? 10);
    const filter = Object.keys(conditions).length > 0 ? filterMessage(conditions) : undefined;
    if (operation.query) {
      try {
        const { results } = await this.client.memory.searchMemories(
          { query: operation.query, stores: [this.store], maxResults: wanted, filter },
          { timeoutMs: this.timeoutMs },
        );
        return results.slice(offset, wanted).map(({ memory, score }) => ({ ...item(memory!), score }));
      } catch (error) {
        if (error instanceof ContextfoldError && error.status === "NOT_FOUND") return [];
        throw error;
      }
    }
    const found: SearchItem[] = [];
    for await (const memory of this.listed(filter, wanted)) found.push(item(memory));
    return found.slice(offset, wanted);
  }

  /** The store's entries meeting `filter`, oldest first, at most `most`; none before the first write. */
  private async *listed(filter: ReturnType<typeof filterMessage> | undefined, most = Infinity): AsyncGenerator<Memory> {
    let pageToken = "";
    let count = 0;
    do {
      let page;
      try {
        page = await this.client.memory.listMemories(
          { store: this.store, filter, pageSize: PAGE, pageToken },
          { timeoutMs: this.timeoutMs },
        );
      } catch (error) {
        if (error instanceof ContextfoldError && error.status === "NOT_FOUND") return;
        throw error;
      }
      for (const memory of page.memories) {
        if (count++ >= most) return;
        yield memory;
      }
      pageToken = page.nextPageToken;
    } while (pageToken);
  }

  private async listNamespacesOf(operation: ListNamespacesOperation): Promise<string[][]> {
    const conditions = operation.matchConditions ?? [];
    const prefixes = conditions.filter((condition) => condition.matchType === "prefix").map((condition) => condition.path);
    const suffixes = conditions.filter((condition) => condition.matchType === "suffix").map((condition) => condition.path);
    const narrowed = prefixes.length === 1 && !prefixes[0].includes("*") ? prefix(prefixes[0]) : {};
    const filter = Object.keys(narrowed).length > 0 ? filterMessage(narrowed) : undefined;
    const found = new Map<string, string[]>();
    for await (const memory of this.listed(filter)) {
      const { namespace } = item(memory);
      const reversed = [...namespace].reverse();
      if (!prefixes.every((path) => matches(namespace, path))) continue;
      if (!suffixes.every((path) => matches(reversed, [...path].reverse()))) continue;
      const kept = operation.maxDepth === undefined ? namespace : namespace.slice(0, operation.maxDepth);
      found.set(JSON.stringify(kept), kept);
    }
    return [...found.values()].slice(operation.offset, operation.offset + operation.limit);
  }
}

/** The metadata conditions an entry meets when its namespace begins with `labels` (`*`: any label). */
function prefix(labels: readonly string[]): FilterData {
  return Object.fromEntries(
    labels.flatMap((label, index) => (label === "*" ? [] : [[`${PLACE}.ns.n${index}`, label]])),
  ) as FilterData;
}

function matches(namespace: readonly string[], path: readonly string[]): boolean {
  return namespace.length >= path.length && path.every((label, index) => label === "*" || label === namespace[index]);
}

/** LangGraph's filter on the value's fields as contextfold's on the metadata's `value`. */
function valueFilter(given: Record<string, unknown>): FilterData {
  const conditions: FilterData = {};
  const negated: FilterData[] = [];
  for (const [field, test] of Object.entries(given)) {
    const path = `${VALUE}.${field}`;
    if (test === null || typeof test !== "object" || Array.isArray(test)) {
      conditions[path] = test as FilterData[string];
      continue;
    }
    const tests = test as Record<string, unknown>;
    const unknown = Object.keys(tests).filter((name) => !(name in OPERATORS) && name !== "$ne");
    if (unknown.length > 0) throw new TypeError(`filter on "${field}": ${unknown.sort().join(", ")} is not one LangGraph defines`);
    if ("$ne" in tests) negated.push({ not: { [path]: tests.$ne } as FilterData });
    const known = Object.entries(tests).flatMap(([name, value]) => (name in OPERATORS ? [[OPERATORS[name], value]] : []));
    if (known.length > 0) conditions[path] = Object.fromEntries(known);
  }
  if (negated.length > 0) conditions.all = negated;
  return conditions;
}

/** What an item is searched by: the text of the fields `index` names, else the whole value as JSON. */
function content(value: Record<string, unknown>, index: false | string[] | undefined): string {
  if (Array.isArray(index) && index.length > 0) {
    const texts = index.flatMap((path) => getTextAtPath(value, path));
    if (texts.length > 0) return texts.join("\n");
  }
  return pythonJson(value, true, false);
}

/** An item, as its entry holds it. */
function item(memory: Memory): Item {
  const metadata = (memory.metadata ?? {}) as { [VALUE]?: Record<string, unknown>; [PLACE]?: { key?: string; depth?: number; ns?: Record<string, string> } };
  const place = metadata[PLACE] ?? {};
  const labels = place.ns ?? {};
  const depth = place.depth ?? Object.keys(labels).length;
  const createdAt = memory.createTime ? timestampDate(memory.createTime) : new Date(0);
  return {
    value: metadata[VALUE] ?? {},
    key: place.key ?? "",
    namespace: Array.from({ length: depth }, (_, index) => labels[`n${index}`]),
    createdAt,
    updatedAt: memory.updateTime ? timestampDate(memory.updateTime) : createdAt,
  };
}
