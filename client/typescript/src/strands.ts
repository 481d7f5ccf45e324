/**
 * contextfold for Strands Agents (`@strands-agents/sdk`): injection as a plugin, memory as a store.
 *
 *   import { Agent, MemoryManager } from "@strands-agents/sdk";
 *   import { ContextInjection, ContextfoldMemoryStore } from "@contextfold/client/strands";
 *
 *   const agent = new Agent({
 *     model,
 *     plugins: [new ContextInjection({ stores: ["prefs"], timeoutMs: 500 })],
 *     memoryManager: new MemoryManager({ stores: [new ContextfoldMemoryStore({ store: "prefs" })], injection: false }),
 *   });
 *
 * `ContextInjection` calls `Inject` before each model call (the SDK's `InvokeModelStage.Input`
 * middleware) and hands the model the folded messages, each injected block shown as the text
 * block it stands for. The fold is per call: the agent's stored conversation is never changed.
 * Whatever goes wrong on the way (the service down or slower than `timeoutMs`), the model call
 * goes on with the messages it had.
 *
 * `ContextfoldMemoryStore` is a Strands memory store on contextfold's `MemoryService`, so the
 * `search_memory` and `add_memory` tools and extraction use the shared service.
 */
import { create, type JsonObject, type JsonValue } from "@bufbuild/protobuf";
import {
  contentBlockFromData,
  InvokeModelStage,
  Message,
  TextBlock,
  type ContentBlock,
  type ContentBlockData,
  type InvokeModelContext,
  type LocalAgent,
  type MemoryEntry,
  type MemoryStore,
  type Plugin,
  type SearchOptions,
} from "@strands-agents/sdk";
import type { ExtractionConfig } from "@strands-agents/sdk";
import { canonicalJson, perCall, sha256, type PerCall as AnyPerCall, type Warn } from "./adapters.js";
import { ContextfoldClient, injectRequest, type ClientOptions, type InjectOptions, type ScopeData } from "./client.js";
import { toProtoMessages, type BlockData, type InjectedBlockData, type MessageData } from "./convert.js";
import { filterMessage, type FilterData } from "./filter.js";
import type { InjectionReport } from "./gen/contextfold/v1/injection_pb.js";
import { MemorySchema, type Filter } from "./gen/contextfold/v1/memory_pb.js";

export type { Warn } from "./adapters.js";

/** A setting given as it is, or derived from the agent at each call (see `fromState`). */
export type PerCall<T> = AnyPerCall<T, LocalAgent>;

/**
 * Read a call's setting from the agent's state: `scope: fromState("user")` uses whatever
 * `agent.appState.get("user")` holds at that call (a scope; for `stores`, a list of names).
 */
export function fromState<T>(key: string): (agent: LocalAgent) => T | undefined {
  return (agent) => agent.appState.get(key) as T | undefined;
}

export interface ContextInjectionOptions extends Omit<InjectOptions, "appState" | "agent" | "scope" | "stores"> {
  /** Tells instances apart (default `"contextfold:injection"`): several may serve one agent. */
  name?: string;
  /** A client to share (the caller closes it); otherwise one is made from `address`. */
  client?: ContextfoldClient;
  address?: ClientOptions["address"];
  /** Only entries of this user, agent and session: fixed, or derived at each call. */
  scope?: PerCall<ScopeData>;
  /** Memory stores to search: fixed, or derived at each call. */
  stores?: PerCall<string[]>;
  /** How long each model call waits for contextfold, in milliseconds (default 1000). */
  timeoutMs?: number;
  /** Receives each call's report: what was injected, or why not. What it throws is logged. */
  onReport?: (report: InjectionReport) => void;
  logger?: Warn;
}

/** The agent's state key under which every ContextInjection keeps what it injected, by its name. */
export const STATE_KEY = "contextfold";

/** A block the service added, as the SDK holds it: an injected block is the text it carries. */
function shown(block: BlockData): ContentBlock {
  const injected = block.injected as { text: string } | undefined;
  if (injected !== undefined) return new TextBlock(injected.text);
  return contentBlockFromData(block as unknown as ContentBlockData);
}

/** The agent's name: `Agent` has one, the `LocalAgent` interface does not promise it. */
function agentName(agent: LocalAgent): string {
  const { name } = agent as LocalAgent & { name?: unknown };
  return typeof name === "string" ? name : "";
}

interface InjectedRecord {
  /** Where the message was when the blocks were folded into it. */
  index: number;
  /** The message's fingerprint (see `Ledger`). */
  message: string;
  blocks: InjectedBlockData[];
}

/**
 * What each ContextInjection of an agent injected, kept in the agent's state (JSON):
 * `{ [plugin name]: [{ index, message: fingerprint, blocks: [injected block] }] }`.
 *
 * A record belongs to the message with its fingerprint (a hash of the message as the agent holds
 * it, without the text other instances folded in this call), at its index when that still
 * matches: a conversation manager that trims the history moves or drops messages, and a record
 * whose message is gone is dropped with it (the model no longer sees its entries).
 */
class Ledger {
  readonly entries: Record<string, InjectedRecord[]>;
  private readonly folded: Set<string>;
  private mine: InjectedRecord[];
  /** Each message's fingerprint, as `conversation` found them. */
  private fingerprints: string[] = [];

  constructor(
    state: unknown,
    private readonly name: string,
  ) {
    this.entries = { ...((state ?? {}) as Record<string, InjectedRecord[]>) };
    this.mine = this.entries[name] ?? [];
    // The texts of the blocks other instances fold (those before this one did, in this call).
    this.folded = new Set(
      Object.entries(this.entries)
        .filter(([key]) => key !== name)
        .flatMap(([, records]) => records.flatMap((record) => record.blocks.map((block) => block.text))),
    );
  }

  private own(message: MessageData): BlockData[] {
    return message.content.filter((block) => typeof block.text !== "string" || !this.folded.has(block.text));
  }

  private async fingerprint(message: MessageData): Promise<string> {
    return (await sha256(canonicalJson([message.role, this.own(message)] as unknown as JsonValue))).slice(0, 32);
  }

  /**
   * The conversation as this instance's service call should read it (its own earlier blocks as
   * the injected blocks they are; the other instances' left out, so they neither feed the query
   * nor count as this instance's), and each message's own earlier blocks, to show the model.
   */
  async conversation(messages: MessageData[]): Promise<{ sent: MessageData[]; earlier: Map<number, InjectedBlockData[]> }> {
    const fingerprints = (this.fingerprints = await Promise.all(messages.map((message) => this.fingerprint(message))));
    const earlier = new Map<number, InjectedBlockData[]>();
    const kept: InjectedRecord[] = [];
    for (const record of this.mine) {
      let index = record.index;
      if (!(index >= 0 && index < messages.length && fingerprints[index] === record.message)) {
        index = fingerprints.indexOf(record.message);
      }
      if (index >= 0 && !earlier.has(index)) {
        earlier.set(index, record.blocks);
        kept.push({ ...record, index });
      }
    }
    this.mine = kept;
    this.entries[this.name] = kept;
    const sent = messages.map((message, index) => ({
      ...message,
      content: [...this.own(message), ...(earlier.get(index) ?? []).map((block) => ({ injected: { ...block } }))],
    }));
    return { sent, earlier };
  }

  /** Keep the blocks just folded into the message at `index` of the `conversation` read. */
  note(index: number, blocks: InjectedBlockData[]): void {
    if (blocks.length === 0) return;
    const record = this.mine.find((candidate) => candidate.index === index);
    if (record !== undefined) record.blocks = [...record.blocks, ...blocks];
    else this.mine.push({ index, message: this.fingerprints[index], blocks });
  }
}

export class ContextInjection implements Plugin {
  readonly name: string;
  private readonly client: ContextfoldClient;
  private readonly ownsClient: boolean;
  private readonly options: InjectOptions;
  private readonly scope?: PerCall<ScopeData>;
  private readonly stores?: PerCall<string[]>;
  private readonly timeoutMs: number;
  private readonly onReport?: (report: InjectionReport) => void;
  private readonly logger: Warn;

  constructor(options: ContextInjectionOptions = {}) {
    const { name, client, address, scope, stores, timeoutMs, onReport, logger, ...inject } = options;
    injectRequest([], inject); // bad options throw here, not on the first turn
    this.name = name ?? "contextfold:injection";
    this.ownsClient = client === undefined;
    this.client = client ?? new ContextfoldClient({ address });
    this.options = inject;
    this.scope = scope;
    this.stores = stores;
    this.timeoutMs = timeoutMs ?? 1000;
    this.onReport = onReport;
    this.logger = logger ?? console;
  }

  initAgent(agent: LocalAgent): void {
    agent.addMiddleware(InvokeModelStage.Input, (context) => this.fold(context));
  }

  /** Close the client this plugin made (a client passed in is the caller's to close). */
  close(): void {
    if (this.ownsClient) this.client.close();
  }

  private async fold(context: InvokeModelContext): Promise<InvokeModelContext> {
    let prepared: { ledger: Ledger; appState: JsonObject; sent: MessageData[]; earlier: Map<number, InjectedBlockData[]> };
    try {
      const { [STATE_KEY]: state, ...appState } = context.agent.appState.getAll();
      const ledger = new Ledger(state, this.name);
      const messages = context.messages.map((message) => message.toJSON() as unknown as MessageData);
      prepared = { ledger, appState: appState as JsonObject, ...(await ledger.conversation(messages)) };
    } catch (error) {
      this.logger.warn(`contextfold plugin failed: ${(error as Error).message}; the model sees the conversation as it was`);
      return context;
    }
    const { ledger, appState, sent, earlier } = prepared;
    let index = -1;
    let added: BlockData[] = [];
    try {
      ({ index, added } = await this.injected(context, sent, appState));
      ledger.note(
        index,
        added.map((block) => block.injected as unknown as InjectedBlockData),
      );
    } catch (error) {
      // What was injected before is the agent's own (its state): shown again whatever the service does,
      // so an outage takes nothing from the model and keeps the conversation's prefix.
      this.logger.warn(`contextfold inject failed: ${(error as Error).message}; the model sees what was injected before`);
    }
    context.agent.appState.set(STATE_KEY, ledger.entries);
    const folded = context.messages.map((original, position) => {
      const blocks = [
        ...(earlier.get(position) ?? []).map((block) => new TextBlock(block.text)),
        ...(position === index ? added.map(shown) : []),
      ];
      if (blocks.length === 0) return original;
      return new Message({
        role: original.role,
        content: [...original.content, ...blocks],
        trackingId: original.trackingId,
        ...(original.metadata !== undefined && { metadata: original.metadata }),
      });
    });
    const last = folded.length - 1;
    const trailing = last >= 0 ? folded[last].content.length - context.messages[last].content.length : 0;
    return { ...context, messages: folded, dynamicTrailingBlocks: (context.dynamicTrailingBlocks ?? 0) + trailing };
  }

  /** Inject into `sent` (the conversation as the service reads it): the fold target, and the blocks it gained. */
  private async injected(
    context: InvokeModelContext,
    sent: MessageData[],
    appState: JsonObject,
  ): Promise<{ index: number; added: BlockData[] }> {
    const { agent } = context;
    const result = await this.client.inject(
      sent,
      {
        ...this.options,
        scope: perCall(this.scope, agent),
        stores: perCall(this.stores, agent),
        appState,
        agent: { id: agent.id, name: agentName(agent) },
      },
      { timeoutMs: this.timeoutMs },
    );
    try {
      this.onReport?.(result.report);
    } catch (error) {
      this.logger.warn(`contextfold onReport threw: ${(error as Error).message}; injection goes on`);
    }
    const index = result.report.targetMessageIndex;
    const added = index >= 0 && index < sent.length ? result.messages[index].content.slice(sent[index].content.length) : [];
    return { index, added };
  }
}

export interface ContextfoldMemoryStoreOptions {
  /** The contextfold store. */
  store: string;
  /** A client to share (the caller closes it); otherwise one is made from `address`. */
  client?: ContextfoldClient;
  address?: ClientOptions["address"];
  /** What the agent's tools call it (default: `store`). */
  name?: string;
  description?: string;
  /** Applied to every search, and to every entry added. */
  scope?: ScopeData;
  /** Only entries at least this similar to the query. */
  minScore?: number;
  maxSearchResults?: number;
  /** Default `true`. */
  writable?: boolean;
  extraction?: boolean | ExtractionConfig;
  /** Applied to every search: `{ topic: "food" }` (see `FilterData`). */
  filter?: FilterData;
  /**
   * With extraction and no extractor of the agent's, Strands hands the conversation to `addMessages`,
   * which the service's Remember keeps: the user's turns, each once (never injected context), or with
   * `rememberExtract` the facts the server's extractor finds in them.
   */
  rememberExtract?: boolean;
  /** Names the conversation, so that the same words in two conversations are two turns. */
  conversationId?: string;
  /** Deadline of each call, in milliseconds (default 5000). */
  timeoutMs?: number;
}

const SCOPE_FIELDS = { userId: "user_id", agentId: "agent_id", sessionId: "session_id" } as const;

/**
 * A Strands memory store kept in a contextfold store.
 *
 * Adds are idempotent: an entry's id is derived from its store, scope, content and metadata
 * (`entryId`, the same in the Python store, so agents in either language share entries), and the
 * at-least-once writes of extraction do not store a fact twice.
 */
export class ContextfoldMemoryStore implements MemoryStore {
  readonly name: string;
  readonly description?: string;
  readonly maxSearchResults?: number;
  readonly writable: boolean;
  readonly extraction?: boolean | ExtractionConfig;
  readonly store: string;
  private readonly client: ContextfoldClient;
  private readonly ownsClient: boolean;
  private readonly scope: ScopeData;
  private readonly minScore?: number;
  private readonly filter?: Filter;
  private readonly rememberExtract: boolean;
  private readonly conversationId: string;
  private readonly timeoutMs: number;

  constructor(options: ContextfoldMemoryStoreOptions) {
    this.store = options.store;
    this.name = options.name ?? options.store;
    this.description = options.description;
    this.maxSearchResults = options.maxSearchResults;
    this.writable = options.writable ?? true;
    this.extraction = options.extraction;
    this.ownsClient = options.client === undefined;
    this.client = options.client ?? new ContextfoldClient({ address: options.address });
    this.scope = options.scope ?? {};
    this.minScore = options.minScore;
    this.filter = options.filter === undefined ? undefined : filterMessage(options.filter);
    this.rememberExtract = options.rememberExtract ?? false;
    this.conversationId = options.conversationId ?? "";
    this.timeoutMs = options.timeoutMs ?? 5000;
  }

  async search(query: string, options?: SearchOptions): Promise<MemoryEntry[]> {
    const response = await this.client.memory.searchMemories(
      {
        query,
        stores: [this.store],
        maxResults: options?.maxSearchResults ?? this.maxSearchResults ?? 0,
        scope: this.scope,
        minScore: this.minScore,
        filter: this.filter,
      },
      { timeoutMs: this.timeoutMs },
    );
    return response.results.map(({ memory, score }) => ({
      content: memory?.content ?? "",
      metadata: {
        ...memory?.metadata,
        id: memory?.id ?? "",
        score,
      },
    }));
  }

  async add(content: string, metadata?: Record<string, JsonValue>): Promise<string> {
    const memory = create(MemorySchema, {
      id: await this.entryId(content, metadata),
      content,
      ...this.scope,
      ...(metadata !== undefined && { metadata }),
    });
    const response = await this.client.memory.addMemories(
      { store: this.store, memories: [memory] },
      { timeoutMs: this.timeoutMs },
    );
    return response.memories[0].id;
  }

  /**
   * Remember the conversation's turns (server-side extraction): how many memories were added or
   * updated. Turns remembered before are skipped, so a retried batch stores nothing twice.
   */
  async addMessages(messages: readonly unknown[]): Promise<number> {
    const response = await this.client.memory.remember(
      {
        store: this.store,
        messages: toProtoMessages(messages as MessageData[]),
        scope: this.scope,
        conversationId: this.conversationId,
        extract: this.rememberExtract,
      },
      { timeoutMs: this.timeoutMs },
    );
    return response.memories.length;
  }

  /** Close the client this store made (a client passed in is the caller's to close). */
  close(): void {
    if (this.ownsClient) this.client.close();
  }

  /** The id `add` gives this entry: the same in the Python store, so both share entries. */
  async entryId(content: string, metadata?: Record<string, JsonValue>): Promise<string> {
    const scope: Record<string, string> = {};
    for (const [field, name] of Object.entries(SCOPE_FIELDS)) {
      const value = this.scope[field as keyof ScopeData];
      if (value) scope[name] = value;
    }
    const key = canonicalJson([this.store, scope, content, metadata ?? {}]);
    return `strands-${(await sha256(key)).slice(0, 32)}`;
  }
}
