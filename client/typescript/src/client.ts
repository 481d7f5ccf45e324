/**
 * `ContextfoldClient`: every contextfold RPC, typed from the protos, over gRPC (HTTP/2).
 *
 *   const cf = new ContextfoldClient({ address: "localhost:50051" });
 *   const { messages, report } = await cf.inject(agentMessages, { stores: ["prefs"] });
 *
 * `inject` takes and returns message data (`MessageData`, what Strands' `Message.toJSON()`
 * gives); `injection`, `memory` and `providers` are the generated service clients, for every
 * call as the protos define it. Failures throw `ContextfoldError`. Calls that only read are tried
 * again (up to three attempts, within their deadline) when the connection fails them; see retry.ts.
 * Each client reads its own writes through read replicas (`readingYourWrites`).
 */
import { create, type JsonObject } from "@bufbuild/protobuf";
import { timestampFromDate } from "@bufbuild/protobuf/wkt";
import { createClient, type CallOptions, type Client, type Interceptor, type Transport } from "@connectrpc/connect";
import { createGrpcTransport, Http2SessionManager } from "@connectrpc/connect-node";
import { fromProtoMessages, toProtoMessages, type MessageData } from "./convert.js";
import { decodingErrors } from "./errors.js";
import { checkedKey } from "./keys.js";
import { retrySafeCalls } from "./retry.js";
import {
  Format,
  InjectionService,
  InjectionReportSchema,
  InjectRequestSchema,
  Trigger,
  type InjectionReport,
  type InjectResponse,
} from "./gen/contextfold/v1/injection_pb.js";
import { MemoryService, Ranking } from "./gen/contextfold/v1/memory_pb.js";
import { filterMessage, type FilterData } from "./filter.js";
import { ProviderService } from "./gen/contextfold/v1/provider_pb.js";

export const DEFAULT_ADDRESS = "localhost:50051";

/** Where a client connects when not told: `CONTEXTFOLD_ADDRESS`, else `localhost:50051`. */
export function defaultAddress(): string {
  return process.env.CONTEXTFOLD_ADDRESS || DEFAULT_ADDRESS;
}

export interface ClientOptions {
  /** `host:port` (plaintext), or a URL: `http://host:port` or `https://host:port` (TLS). */
  address?: string;
  /** The deadline of every call, in milliseconds, unless the call sets its own. Default 10 000. */
  timeoutMs?: number;
  /** The API key sent with every call (`authorization: Bearer …`). Default: `CONTEXTFOLD_API_KEY`, if set. */
  apiKey?: string;
  /** Other headers sent with every call. */
  headers?: Record<string, string>;
  /** Run around every call (e.g. to add per-call headers or log). */
  interceptors?: Interceptor[];
  /**
   * A transport of your own (custom TLS, a proxy); `address` and `interceptors` are then unused, and
   * so is the retry of read-only calls unless its interceptors include `retrySafeCalls`.
   */
  transport?: Transport;
}

/** Which entries an operation sees: only those of this user, agent and session (each when given). */
export interface ScopeData {
  userId?: string;
  agentId?: string;
  sessionId?: string;
}

/** How to inject: the service's trigger, query and format settings, named as in Strands. */
export interface InjectOptions {
  /** `"userTurn"` (default: only on a fresh user ask) or `"everyTurn"`. */
  trigger?: "userTurn" | "everyTurn";
  /** A CEL expression over the conversation deciding whether to inject. */
  triggerExpression?: string;
  /** Memory stores to search; empty: every store of the query's dimension. */
  stores?: string[];
  /** Entries to inject at most (default 5). */
  maxEntries?: number;
  /** Search with this text instead of the one derived from the conversation. */
  query?: string;
  /** Search with this vector instead of embedding the query. */
  queryVector?: number[];
  /** Only entries of this user, agent and session. */
  scope?: ScopeData;
  /** Only entries at least this similar to the query (cosine, -1 to 1). */
  minScore?: number;
  /** A CEL expression deriving the query from the conversation. */
  queryExpression?: string;
  /** How memory's block reads: `"xml"` (default), `"bullets"` or `"markdown"`. */
  format?: "xml" | "bullets" | "markdown";
  /** A Jinja template rendering memory's block instead of `format`. */
  formatTemplate?: string;
  /**
   * How entries are ranked: `"storeAware"` (the server's default unless its operator chose
   * another), `"similarity"`, `"hybrid"` or `"rerank"` (the server's reranker).
   */
  ranking?: "similarity" | "storeAware" | "hybrid" | "rerank";
  /** Only entries matching this filter: `{ topic: "food", rating: { gte: 3 } }` (see `FilterData`). */
  filter?: FilterData;
  /** Memory's place among the sources (higher first) and its own token budget. */
  memoryPriority?: number;
  memoryMaxTokens?: number;
  /** Registered providers to ask, by name; empty: every enabled provider. */
  providers?: string[];
  /** Token budget for everything injected; 0: none. */
  maxTokens?: number;
  /** Fold every source into one block instead of one block each. */
  coalesce?: boolean;
  /** The agent's application state, for expressions, templates and providers. */
  appState?: JsonObject;
  /** The agent asking. */
  agent?: { id?: string; name?: string };
  /** Say in the report why each candidate entry was injected or left out (`report.candidates`). */
  explain?: boolean;
  /**
   * When the question is asked, for the days it names by when it is asked ("yesterday", "last
   * week"): set it when replaying a conversation recorded earlier; the call's own time when not given.
   */
  askedTime?: Date;
}

/** The folded conversation and the report of what was injected, or why not. */
export interface InjectResult {
  /** The messages, injected blocks included as `{ injected: … }` (see `renderForModel`). */
  messages: MessageData[];
  report: InjectionReport;
  response: InjectResponse;
}

const TRIGGERS = { userTurn: Trigger.USER_TURN, everyTurn: Trigger.EVERY_TURN } as const;
const FORMATS = { xml: Format.XML, bullets: Format.BULLETS, markdown: Format.MARKDOWN } as const;
const RANKINGS = {
  similarity: Ranking.SIMILARITY,
  storeAware: Ranking.STORE_AWARE,
  hybrid: Ranking.HYBRID,
  rerank: Ranking.RERANK,
} as const;

function choice<T>(table: Record<string, T>, name: string, value: string | undefined, unset: T): T {
  if (value === undefined) return unset;
  const chosen = table[value];
  if (chosen === undefined) {
    throw new TypeError(`unknown ${name} ${JSON.stringify(value)}: expected one of ${Object.keys(table).join(", ")}`);
  }
  return chosen;
}

/** The `InjectRequest` for `messages` and `options`. Bad options throw a `TypeError`. */
export function injectRequest(messages: readonly MessageData[], options: InjectOptions = {}) {
  return create(InjectRequestSchema, {
    messages: toProtoMessages(messages),
    trigger: choice(TRIGGERS, "trigger", options.trigger, Trigger.UNSPECIFIED),
    triggerExpression: options.triggerExpression ?? "",
    memory: {
      stores: options.stores ?? [],
      maxEntries: options.maxEntries,
      query: options.query ?? "",
      queryVector: options.queryVector ?? [],
      scope: options.scope,
      minScore: options.minScore,
      priority: options.memoryPriority ?? 0,
      maxTokens: options.memoryMaxTokens ?? 0,
      queryExpression: options.queryExpression ?? "",
      format: choice(FORMATS, "format", options.format, Format.UNSPECIFIED),
      formatTemplate: options.formatTemplate ?? "",
      ranking: choice(RANKINGS, "ranking", options.ranking, Ranking.UNSPECIFIED),
      filter: options.filter === undefined ? undefined : filterMessage(options.filter),
      askedTime: options.askedTime === undefined ? undefined : timestampFromDate(options.askedTime),
    },
    providers: options.providers ?? [],
    maxTokens: options.maxTokens ?? 0,
    coalesce: options.coalesce ?? false,
    appState: options.appState,
    agent: options.agent,
    explain: options.explain ?? false,
  });
}

/**
 * Read your writes: a call that wrote answers with a token (its commit's place in the database's
 * log, sealed) in this trailer; sent with later calls, it keeps their reads from a read replica
 * that has not caught up with it. Tokens are opaque, of one length: the greater text is the later
 * write.
 */
export const READ_AFTER = "x-contextfold-read-after";
const LONGEST_TOKEN = 256;

/** An interceptor that sends the latest token it was given with every call (one per client). */
export function readingYourWrites(): Interceptor {
  let latest = "";
  return (next) => async (request) => {
    if (latest) request.header.set(READ_AFTER, latest);
    const response = await next(request);
    if (!response.stream) {
      const token = response.trailer.get(READ_AFTER);
      if (token !== null && token.length > 0 && token.length <= LONGEST_TOKEN && token > latest) {
        latest = token;
      }
    }
    return response;
  };
}

function baseUrl(address: string): string {
  return /^https?:\/\//.test(address) ? address : `http://${address}`;
}

export class ContextfoldClient {
  /** `InjectionService`, as generated. */
  readonly injection: Client<typeof InjectionService>;
  /** `MemoryService`: stores and entries. */
  readonly memory: Client<typeof MemoryService>;
  /** `ProviderService`: provider registrations. */
  readonly providers: Client<typeof ProviderService>;
  private readonly sessions?: Http2SessionManager;

  constructor(options: ClientOptions = {}) {
    let transport = options.transport;
    if (transport === undefined) {
      const url = baseUrl(options.address ?? defaultAddress());
      this.sessions = new Http2SessionManager(url);
      const source = options.apiKey !== undefined ? "the apiKey option" : "CONTEXTFOLD_API_KEY";
      const apiKey = options.apiKey ?? process.env.CONTEXTFOLD_API_KEY;
      const headers = { ...(apiKey ? { authorization: `Bearer ${checkedKey(apiKey, source)}` } : {}), ...options.headers };
      const addHeaders: Interceptor = (next) => (request) => {
        for (const [name, value] of Object.entries(headers)) request.header.set(name, value);
        return next(request);
      };
      transport = createGrpcTransport({
        baseUrl: url,
        sessionManager: this.sessions,
        defaultTimeoutMs: options.timeoutMs ?? 10_000,
        // Retries outermost: each attempt goes through the token, the headers and the caller's interceptors.
        interceptors: [retrySafeCalls, readingYourWrites(), addHeaders, ...(options.interceptors ?? [])],
      });
    }
    this.injection = decodingErrors(createClient(InjectionService, transport));
    this.memory = decodingErrors(createClient(MemoryService, transport));
    this.providers = decodingErrors(createClient(ProviderService, transport));
  }

  /** Fold memory and provider context into `messages`. `call.timeoutMs` sets this call's deadline. */
  async inject(messages: readonly MessageData[], options: InjectOptions = {}, call: CallOptions = {}): Promise<InjectResult> {
    const response = await this.injection.inject(injectRequest(messages, options), call);
    return {
      messages: fromProtoMessages(response.messages),
      report: response.report ?? create(InjectionReportSchema),
      response,
    };
  }

  /** Close the connection; calls in flight fail. */
  close(): void {
    this.sessions?.abort();
  }
}
