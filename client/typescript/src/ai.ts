/**
 * contextfold for the Vercel AI SDK (`ai` 7): injection as a language model middleware.
 *
 *   import { generateText, wrapLanguageModel } from "ai";
 *   import { contextfoldMiddleware } from "@contextfold/client/ai";
 *
 *   const model = wrapLanguageModel({ model: openai("gpt-5"), middleware: contextfoldMiddleware({ stores: ["prefs"] }) });
 *   const { text } = await generateText({ model, prompt: "What should I drink?" });
 *
 * `contextfoldMiddleware` implements `transformParams`, which the wrapped model runs before every
 * call (`generateText`, `streamText`, and each step of their tool loops): it sends the prompt to
 * `Inject` (user and assistant text, tool calls as `toolUse`, tool results as `toolResult`) and
 * returns the prompt with the block as a text part after the latest user message's text. Only
 * the call's prompt changes: the messages the application keeps stay as they were.
 *
 * - One search a user turn: what was injected is remembered by the middleware for each user
 *   message, under the hash of the scope and of the prompt up to and including it, so the steps
 *   of a tool loop that follow show the block again without a call.
 * - Across turns: a later call replaying the earlier messages shows their blocks again and
 *   sends them back as the `InjectedBlock`s they were, so it brings new entries only.
 * - Fails open: the service down or slower than `timeoutMs` (200 by default) leaves the prompt
 *   as the SDK built it, one warning until a call goes through again.
 *
 * `scope` and `stores` may be functions of the call's options, so one model serves many users:
 * `scope: scopeFromProviderOptions()` with `generateText({ …, providerOptions: { contextfold:
 * { userId: "ana" } } })`.
 */
import type { LanguageModelMiddleware } from "ai";
import { Remembering, toolInput, type AdapterOptions, type Dialect } from "./adapters.js";
import type { ScopeData } from "./client.js";
import { dumps, type BlockData, type MessageData } from "./convert.js";

type TransformParams = NonNullable<LanguageModelMiddleware["transformParams"]>;
/** One model call's options (`LanguageModelV4CallOptions`), as `transformParams` receives them. */
export type CallOptions = Parameters<TransformParams>[0]["params"];
type PromptMessage = CallOptions["prompt"][number];
type Part = { type: string; [field: string]: unknown };

export type ContextfoldMiddlewareOptions = AdapterOptions<CallOptions>;

/** The prompt's messages as contextfold reads a conversation, each with its index in the prompt. */
export function contextfoldMessages(prompt: readonly PromptMessage[]): Array<[number, MessageData]> {
  const converted: Array<[number, MessageData]> = [];
  prompt.forEach((message, index) => {
    if (message.role === "system") return;
    const content = (message.content as unknown as readonly Part[]).flatMap((part) => block(part));
    if (content.length === 0) return;
    converted.push([index, { role: message.role === "assistant" ? "assistant" : "user", content }]);
  });
  return converted;
}

function block(part: Part): BlockData[] {
  switch (part.type) {
    case "text":
      return [{ text: part.text as string }];
    case "tool-call":
      return [{ toolUse: { toolUseId: part.toolCallId as string, name: part.toolName as string, input: toolInput(part.input, "input") } }];
    case "tool-result": {
      const content = [{ text: outputText(part.output as Part) }];
      const failed = (part.output as Part | undefined)?.type.startsWith("error") ?? false;
      return [{ toolResult: { toolUseId: part.toolCallId as string, content, status: failed ? "error" : "success" } }];
    }
    default:
      return [];
  }
}

function outputText(output: Part | undefined): string {
  if (output === undefined) return "";
  if (output.type === "text" || output.type === "error-text") return output.value as string;
  if (output.type === "json" || output.type === "error-json") return dumps(output.value);
  if (output.type === "execution-denied") return `denied${output.reason ? `: ${output.reason as string}` : ""}`;
  return dumps(output.value ?? output);
}

const DIALECT: Dialect<PromptMessage> = {
  converted: contextfoldMessages,
  asks: (message, original) => original.role === "user" && message.content.some((part) => typeof part.text === "string"),
  withText: (message, texts) =>
    ({
      ...message,
      content: [...(message.content as unknown as readonly Part[]), ...texts.map((text) => ({ type: "text", text }))],
    }) as PromptMessage,
};

/**
 * A `scope` read from each call's provider options under `key` (default `"contextfold"`): its
 * `userId`, `agentId` and `sessionId`, those that are text. Providers read only their own key there,
 * so `generateText({ …, providerOptions: { contextfold: { userId: "ana" } } })` reaches the model as it was.
 */
export function scopeFromProviderOptions(key = "contextfold"): (call: CallOptions) => ScopeData | undefined {
  return (call) => {
    const given = call.providerOptions?.[key];
    if (given === undefined) return undefined;
    const scope: ScopeData = {};
    for (const field of ["userId", "agentId", "sessionId"] as const) {
      if (typeof given[field] === "string") scope[field] = given[field];
    }
    return scope;
  };
}

/** The middleware, with `close()` for the client it made (a client passed in is the caller's to close). */
export type ContextfoldMiddleware = LanguageModelMiddleware & { close(): void };

/** A Vercel AI SDK middleware folding contextfold's injection into every model call; see the module's docs. */
export function contextfoldMiddleware(options: ContextfoldMiddlewareOptions = {}): ContextfoldMiddleware {
  const injection = new Remembering(DIALECT, "contextfoldMiddleware", options);
  return {
    specificationVersion: "v4",
    transformParams: async ({ params }) => ({ ...params, prompt: await injection.fold(params.prompt, params) }),
    close: () => injection.close(),
  };
}
