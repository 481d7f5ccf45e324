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
import { ContextfoldClient, type ClientOptions, type InjectOptions, type ScopeData } from "./client.js";
import { toProtoMessages, type BlockData, type MessageData } from "./convert.js";
import { filterMessage, type FilterData } from "./filter.js";
import type { InjectionReport } from "./gen/contextfold/v1/injection_pb.js";
import { MemorySchema, type Filter } from "./gen/contextfold/v1/memory_pb.js";

/** Where warnings go; `console` unless given. */
export interface Warn {
  warn(message: string): void;
}

export interface ContextInjectionOptions extends Omit<InjectOptions, "appState" | "agent"> {
  /** A client to share; otherwise one is made from `address`. */
  client?: ContextfoldClient;
  address?: ClientOptions["address"];
  /** How long each model call waits for contextfold, in milliseconds (default 1000). */
  timeoutMs?: number;
  /** Receives each call's report: what was injected, or why not. */
  onReport?: (report: InjectionReport) => void;
  logger?: Warn;
}

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

export class ContextInjection implements Plugin {
  readonly name = "contextfold:injection";
  private readonly client: ContextfoldClient;
  private readonly options: InjectOptions;
  private readonly timeoutMs: number;
  private readonly onReport?: (report: InjectionReport) => void;
  private readonly logger: Warn;

  constructor(options: ContextInjectionOptions = {}) {
    const { client, address, timeoutMs, onReport, logger, ...inject } = options;
    this.client = client ?? new ContextfoldClient({ address });
    this.options = inject;
    this.timeoutMs = timeoutMs ?? 1000;
    this.onReport = onReport;
    this.logger = logger ?? console;
  }

  initAgent(agent: LocalAgent): void {
    agent.addMiddleware(InvokeModelStage.Input, (context) => this.fold(context));
  }

  private async fold(context: InvokeModelContext): Promise<InvokeModelContext> {
    const { agent } = context;
    let result;
    try {
      result = await this.client.inject(
        context.messages.map((message) => message.toJSON() as unknown as MessageData),
        { ...this.options, appState: agent.appState.getAll() as JsonObject, agent: { id: agent.id, name: agentName(agent) } },
        { timeoutMs: this.timeoutMs },
      );
    } catch (error) {
      this.logger.warn(`contextfold inject failed: ${(error as Error).message}; the model sees the conversation as it was`);
      return context;
    }
    this.onReport?.(result.report);
    const index = result.report.targetMessageIndex;
    if (index < 0 || index >= context.messages.length) return context;
    const original = context.messages[index];
    const added = result.messages[index].content.slice(original.content.length).map(shown);
    const folded = [...context.messages];
    folded[index] = new Message({
      role: original.role,
      content: [...original.content, ...added],
      trackingId: original.trackingId,
      ...(original.metadata !== undefined && { metadata: original.metadata }),
    });
    const trailing = index === folded.length - 1 ? added.length : 0;
    return { ...context, messages: folded, dynamicTrailingBlocks: (context.dynamicTrailingBlocks ?? 0) + trailing };
  }
}

export interface ContextfoldMemoryStoreOptions {
  /** The contextfold store. */
  store: string;
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

/** JSON with object keys sorted at every level: the same text for the same value, in any language. */
function canonicalJson(value: JsonValue): string {
  if (Array.isArray(value)) return `[${value.map(canonicalJson).join(",")}]`;
  if (value !== null && typeof value === "object") {
    const keys = Object.keys(value).sort();
    return `{${keys.map((key) => `${JSON.stringify(key)}:${canonicalJson(value[key])}`).join(",")}}`;
  }
  return JSON.stringify(value);
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

  /** The id `add` gives this entry: the same in the Python store, so both share entries. */
  async entryId(content: string, metadata?: Record<string, JsonValue>): Promise<string> {
    const scope: Record<string, string> = {};
    for (const [field, name] of Object.entries(SCOPE_FIELDS)) {
      const value = this.scope[field as keyof ScopeData];
      if (value) scope[name] = value;
    }
    const key = canonicalJson([this.store, scope, content, metadata ?? {}]);
    const digest = new Uint8Array(await crypto.subtle.digest("SHA-256", new TextEncoder().encode(key)));
    const hex = Array.from(digest, (byte) => byte.toString(16).padStart(2, "0")).join("");
    return `strands-${hex.slice(0, 32)}`;
  }
}
