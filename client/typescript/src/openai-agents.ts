/**
 * contextfold for the OpenAI Agents SDK for TypeScript (`@openai/agents` 0.20): injection as the
 * run's `callModelInputFilter`.
 *
 *   import { Agent, run } from "@openai/agents";
 *   import { contextfoldInputFilter } from "@contextfold/client/openai-agents";
 *
 *   const callModelInputFilter = contextfoldInputFilter({ stores: ["prefs"] });
 *   const result = await run(agent, "Book me a seat", { callModelInputFilter });
 *
 * Before each model call, the steps of a tool loop included, the filter sends the input items
 * to `Inject` (user and assistant text, function calls as `toolUse`, their results as
 * `toolResult`) and returns the input with the block as an `input_text` part after the latest
 * user message's text.
 *
 * - One search a user turn: what was injected is remembered by the filter for each user
 *   message, under the hash of the scope and of the conversation up to and including it, so the
 *   steps of a tool loop that follow show the block again without a call.
 * - Across turns, sessions included: the SDK writes what the filter returned to the run's
 *   `Session`, so a later turn replays the block as the user message's own text. The filter
 *   knows it for what it is (a part that is a block it folded, or the default format's region):
 *   it is shown once, never doubled, and sent back as the `InjectedBlock` it was, so a later turn
 *   brings new entries only. Without a session, replaying `result.history` works the same way.
 * - Fails open: the service down or slower than `timeoutMs` (200 by default) leaves the input as
 *   the SDK built it, one warning until a call goes through again.
 *
 * `scope` and `stores` may be functions of the run's context (`run(agent, input, { context })`),
 * so one agent serves many users.
 */
import type { AgentInputItem, CallModelInputFilter, ModelInputData } from "@openai/agents-core";
import { Remembering, toolInput, type AdapterOptions, type Dialect } from "./adapters.js";
import { dumps, type BlockData, type MessageData } from "./convert.js";

/** The settings; `scope` and `stores` may be functions of the run's context. */
export type ContextfoldInputFilterOptions = AdapterOptions<unknown>;

type Item = AgentInputItem & { [field: string]: unknown };
type Part = { type?: string; text?: string; [field: string]: unknown };

function texts(content: unknown): BlockData[] {
  if (typeof content === "string") return [{ text: content }];
  if (!Array.isArray(content)) return [];
  return (content as Part[]).flatMap((part) =>
    (part.type === "input_text" || part.type === "output_text") && typeof part.text === "string" ? [{ text: part.text }] : [],
  );
}

function outputText(output: unknown): string {
  if (typeof output === "string") return output;
  const part = output as Part | undefined;
  return part?.type === "text" && typeof part.text === "string" ? part.text : dumps(output ?? "");
}

/** The SDK's input items as contextfold reads a conversation, each with its index among them. */
export function contextfoldMessages(items: readonly AgentInputItem[]): Array<[number, MessageData]> {
  const converted: Array<[number, MessageData]> = [];
  (items as readonly Item[]).forEach((item, index) => {
    const kind = item.type ?? "message";
    const role = (item as { role?: string }).role;
    if (kind === "message" && (role === "user" || role === "assistant")) {
      const content = texts((item as { content: unknown }).content);
      if (content.length > 0) converted.push([index, { role, content }]);
    } else if (kind === "function_call") {
      const use = { toolUseId: item.callId as string, name: item.name as string, input: toolInput(item.arguments, "arguments") };
      converted.push([index, { role: "assistant", content: [{ toolUse: use }] }]);
    } else if (kind === "function_call_result") {
      const status = item.status === "incomplete" ? "error" : "success";
      const result = { toolUseId: item.callId as string, content: [{ text: outputText(item.output) }], status };
      converted.push([index, { role: "user", content: [{ toolResult: result }] }]);
    }
  });
  return converted;
}

/** A user item (a copy) with `added` after its content, as `input_text` parts. */
function withText(item: AgentInputItem, added: readonly string[]): AgentInputItem {
  const { content } = item as { content: unknown };
  const parts = typeof content === "string" ? [{ type: "input_text", text: content }] : (content as Part[]);
  return { ...item, content: [...parts, ...added.map((text) => ({ type: "input_text", text }))] } as AgentInputItem;
}

const DIALECT: Dialect<AgentInputItem> = {
  converted: contextfoldMessages,
  asks: (message, item) => (item as { role?: string }).role === "user" && message.content.some((block) => typeof block.text === "string"),
  withText,
};

/** The filter, with `close()` for the client it made (a client passed in is the caller's to close). */
export type ContextfoldInputFilter = CallModelInputFilter & { close(): void };

/** A `callModelInputFilter` folding contextfold's injection into every model call; see the module's docs. */
export function contextfoldInputFilter(options: ContextfoldInputFilterOptions = {}): ContextfoldInputFilter {
  const injection = new Remembering(DIALECT, "contextfoldInputFilter", options);
  const filter = async ({ modelData, context }: Parameters<CallModelInputFilter>[0]): Promise<ModelInputData> => ({
    ...modelData,
    input: await injection.fold(modelData.input, context),
  });
  return Object.assign(filter, { close: () => injection.close() });
}
