/**
 * What the framework adapters share: settings checked up front, failing open with one warning an
 * outage, and injection for frameworks that keep nothing of what the model saw (`Remembering`).
 */
import { createHash } from "node:crypto";
import type { JsonValue } from "@bufbuild/protobuf";
import { ContextfoldClient, injectRequest, type ClientOptions, type InjectOptions, type ScopeData } from "./client.js";
import { dumps, type BlockData, type InjectedBlockData, type MessageData } from "./convert.js";
import type { InjectionReport } from "./gen/contextfold/v1/injection_pb.js";

/** Where warnings go; `console` unless given. */
export interface Warn {
  warn(message: string): void;
}

/**
 * A tool call's input as contextfold's `toolUse` holds it: JSON text parsed (text that is not JSON kept
 * under `key`), any other value as JSON data.
 */
export function toolInput(input: unknown, key: string): BlockData[string] {
  if (typeof input !== "string") return JSON.parse(dumps(input ?? {})) as BlockData[string];
  try {
    return JSON.parse(input) as BlockData[string];
  } catch {
    return { [key]: input };
  }
}

/** A setting given as it is, or derived at each call from the framework's per-call value. */
export type PerCall<T, C> = T | ((context: C) => T | undefined);

export function perCall<T, C>(setting: PerCall<T, C> | undefined, context: C): T | undefined {
  return typeof setting === "function" ? (setting as (context: C) => T | undefined)(context) : setting;
}

export async function sha256(text: string): Promise<string> {
  const digest = new Uint8Array(await crypto.subtle.digest("SHA-256", new TextEncoder().encode(text)));
  return Array.from(digest, (byte) => byte.toString(16).padStart(2, "0")).join("");
}

/** JSON with object keys sorted at every level: the same text for the same value, in any language. */
export function canonicalJson(value: JsonValue): string {
  if (Array.isArray(value)) return `[${value.map(canonicalJson).join(",")}]`;
  if (value !== null && typeof value === "object") {
    const keys = Object.keys(value).sort();
    return `{${keys.map((key) => `${JSON.stringify(key)}:${canonicalJson(value[key])}`).join(",")}}`;
  }
  return JSON.stringify(value) ?? "null";
}

/** The settings every framework adapter takes; `C` is the framework's per-call value. */
export interface AdapterOptions<C> extends Omit<InjectOptions, "scope" | "stores"> {
  /** A client to share (the caller closes it); otherwise one is made from `address`. */
  client?: ContextfoldClient;
  address?: ClientOptions["address"];
  /** Only entries of this user, agent and session: fixed, or derived at each call. */
  scope?: PerCall<ScopeData, C>;
  /** Memory stores to search: fixed, or derived at each call. */
  stores?: PerCall<string[], C>;
  /** How long each model call waits for contextfold, in milliseconds (default 200). */
  timeoutMs?: number;
  /** Receives each call's report: what was injected, or why not. What it throws is logged. */
  onReport?: (report: InjectionReport) => void;
  logger?: Warn;
  /** How many asks' blocks are remembered, newest first (default 10 000). */
  remembered?: number;
}

/**
 * How a framework's messages read: as contextfold's conversation (`converted`: each message kept
 * with its index among the framework's), whether one is a person's ask (`asks`), and the
 * framework's message with text after its content (`withText`, a copy).
 */
export interface Dialect<M> {
  converted(messages: readonly M[]): Array<[number, MessageData]>;
  asks(message: MessageData, original: M): boolean;
  withText(message: M, texts: readonly string[]): M;
}

/** The default format's region, as contextfold renders it: a text block that is one is an earlier injection. */
const REGION = /^\s*<memory>\n(?:<entry(?: source="[^"\n]*")?>[^<]*<\/entry>\n?)*<\/memory>\s*$/;

/**
 * Injection for frameworks whose hooks change only the model's request. What was folded into each
 * ask is remembered here, under the hash of the scope and of the conversation up to and including
 * it, so a tool loop's later steps show it again without a call, and a later turn that replays
 * the conversation shows it and sends it back as the `InjectedBlock`s it was (new entries only).
 *
 * A framework that keeps the folded messages (a session storing what the model saw) replays the
 * block's text as the ask's own: a text block that is one this process folded, or the default
 * format's region, is read as the injected block it was, so it is neither doubled nor asked about.
 */
export class Remembering<M, C> {
  private readonly client: ContextfoldClient;
  private readonly ownsClient: boolean;
  private readonly options: InjectOptions;
  private readonly scope?: PerCall<ScopeData, C>;
  private readonly stores?: PerCall<string[], C>;
  private readonly timeoutMs: number;
  private readonly onReport?: (report: InjectionReport) => void;
  private readonly logger: Warn;
  private readonly most: number;
  /** Each ask's blocks, by its key; oldest first (a Map keeps insertion order). */
  private readonly remembered = new Map<string, InjectedBlockData[]>();
  /** Each block remembered, by its text: how a replayed fold is told from the user's words. */
  private readonly texts = new Map<string, InjectedBlockData>();
  private failing = false;

  constructor(
    private readonly dialect: Dialect<M>,
    private readonly adapter: string,
    options: AdapterOptions<C>,
  ) {
    const { client, address, scope, stores, timeoutMs, onReport, logger, remembered, ...inject } = options;
    try {
      injectRequest([], inject);
    } catch (error) {
      throw new TypeError(`${adapter}: ${(error as Error).message}`);
    }
    this.ownsClient = client === undefined;
    this.client = client ?? new ContextfoldClient({ address });
    this.options = inject;
    this.scope = scope;
    this.stores = stores;
    this.timeoutMs = timeoutMs ?? 200;
    this.onReport = onReport;
    this.logger = logger ?? console;
    this.most = remembered ?? 10_000;
  }

  /**
   * The messages the model gets: what was remembered shown again, the latest ask injected into;
   * as they were when anything fails (said once, until a call goes through again).
   */
  async fold(messages: readonly M[], context: C, kept?: Kept): Promise<M[]> {
    let shown = [...messages];
    try {
      const fold = await this.prepare(messages, context, kept);
      shown = fold.shown;
      if (fold.latest !== undefined && this.find(fold.keys.get(fold.latest)!, kept) === undefined) {
        await this.ask(fold, kept);
      }
      if (this.failing) {
        this.failing = false;
        this.logger.warn(`${this.adapter}: contextfold inject answers again`);
      }
    } catch (error) {
      if (!this.failing) {
        this.failing = true;
        this.logger.warn(
          `${this.adapter}: contextfold inject failed: ${(error as Error).message}; ` +
            "the model sees the messages as they were (said once, until a call goes through)",
        );
      }
    }
    return shown;
  }

  /** Close the client this adapter made (a client passed in is the caller's to close). */
  close(): void {
    if (this.ownsClient) this.client.close();
  }

  private earlier(block: BlockData): InjectedBlockData | undefined {
    if (typeof block.text !== "string") return undefined;
    return this.texts.get(block.text) ?? (REGION.test(block.text) ? { source: "memory", text: block.text, entryIds: [] } : undefined);
  }

  private async prepare(messages: readonly M[], context: C, kept: Kept | undefined): Promise<Fold<M>> {
    const scope = perCall(this.scope, context) ?? {};
    const converted = this.dialect.converted(messages);
    const sent: MessageData[] = [];
    const keys = new Map<number, string>();
    const shown = [...messages];
    // The conversation hashed as it is read: each ask's key is the hash so far (a copy), so a long
    // conversation is hashed once, not once for each of its asks.
    const hash = createHash("sha256").update(canonicalJson(scope as unknown as JsonValue));
    for (const [index, message] of converted) {
      const replayed = message.content.map((block) => this.earlier(block));
      const mine = { ...message, content: message.content.filter((_, at) => replayed[at] === undefined) };
      hash.update("\n").update(canonicalJson(mine as unknown as JsonValue));
      let injected = replayed.filter((block): block is InjectedBlockData => block !== undefined);
      if (this.dialect.asks(mine, messages[index])) {
        const key = hash.copy().digest("hex");
        keys.set(index, key);
        const blocks = this.find(key, kept) ?? [];
        const carried = new Set(injected.map((block) => block.text));
        const missing = blocks.filter((block) => !carried.has(block.text));
        if (missing.length > 0) shown[index] = this.dialect.withText(messages[index], missing.map((block) => block.text));
        injected = [...injected, ...missing];
      }
      sent.push({ ...mine, content: [...mine.content, ...injected.map((block) => ({ injected: { ...block } }))] });
    }
    const positions = converted.map(([index]) => index);
    const latest = keys.size > 0 ? Math.max(...keys.keys()) : undefined;
    const options: InjectOptions = { ...this.options, scope, stores: perCall(this.stores, context) ?? [] };
    return { sent, positions, shown, keys, latest, options };
  }

  /** Inject into the latest ask, showing and remembering what it adds (nothing: asked). */
  private async ask(fold: Fold<M>, kept: Kept | undefined): Promise<void> {
    const latest = fold.latest!;
    const result = await this.client.inject(fold.sent, fold.options, { timeoutMs: this.timeoutMs });
    try {
      this.onReport?.(result.report);
    } catch (error) {
      this.logger.warn(`${this.adapter}: onReport threw: ${(error as Error).message}; injection goes on`);
    }
    const index = result.report.targetMessageIndex;
    const added =
      index >= 0 && index < fold.sent.length && fold.positions[index] === latest
        ? result.messages[index].content
            .slice(fold.sent[index].content.length)
            .flatMap((block) => (block.injected === undefined ? [] : [block.injected as unknown as InjectedBlockData]))
        : [];
    for (const block of added) this.texts.set(block.text, block);
    this.remember(this.remembered, fold.keys.get(latest)!, added);
    if (kept !== undefined) this.remember(kept, fold.keys.get(latest)!, added);
    if (added.length > 0) fold.shown[latest] = this.dialect.withText(fold.shown[latest], added.map((block) => block.text));
  }

  /** An ask's blocks: kept in the framework's state, else in this process. */
  private find(key: string, kept: Kept | undefined): InjectedBlockData[] | undefined {
    return (kept === undefined ? undefined : lookup(kept, key)) ?? this.remembered.get(key);
  }

  private remember(remembered: Kept, key: string, blocks: InjectedBlockData[]): void {
    if (remembered instanceof Map) {
      remembered.delete(key);
      remembered.set(key, blocks);
    } else {
      delete remembered[key];
      remembered[key] = blocks; // the newest last: string keys keep their insertion order
    }
    if (remembered instanceof Map) {
      while (remembered.size > this.most) {
        const [oldest, dropped] = remembered.entries().next().value as [string, InjectedBlockData[]];
        remembered.delete(oldest);
        if (remembered !== this.remembered) continue; // the process's own texts go with the process's own blocks
        for (const block of dropped) if (this.texts.get(block.text) === block) this.texts.delete(block.text);
      }
      return;
    }
    const keys = Object.keys(remembered); // a framework's state: one session's or thread's asks
    for (const oldest of keys.slice(0, Math.max(0, keys.length - this.most))) delete remembered[oldest];
  }
}

/**
 * What is remembered: each ask's blocks by its key, oldest first. The adapter's own (a `Map`), or a
 * framework's state that outlives the process (a plain object, which the adapter changes in place).
 */
export type Kept = Map<string, InjectedBlockData[]> | Record<string, InjectedBlockData[]>;

function lookup(kept: Kept, key: string): InjectedBlockData[] | undefined {
  if (kept instanceof Map) return kept.get(key);
  return Object.hasOwn(kept, key) ? kept[key] : undefined;
}

/**
 * One model call's messages: as the service reads them (`sent`), where each of those is among the
 * framework's (`positions`), as the model will see them (`shown`), each ask's key (by index), the
 * latest ask, and the call's options.
 */
interface Fold<M> {
  sent: MessageData[];
  positions: number[];
  shown: M[];
  keys: Map<number, string>;
  latest: number | undefined;
  options: InjectOptions;
}
