/**
 * contextfold for LangChain.js agents (`langchain` 1.x `createAgent`): injection as middleware.
 *
 *   import { createAgent } from "langchain";
 *   import { contextfoldMiddleware } from "@contextfold/client/langchain";
 *
 *   const agent = createAgent({ model, tools, middleware: [contextfoldMiddleware({ stores: ["prefs"] })] });
 *
 * `contextfoldMiddleware` is a `wrapModelCall` middleware: before each model call, the steps of
 * a tool loop included, it sends the conversation to `Inject` (human and AI text, tool calls as
 * `toolUse`, tool messages as `toolResult`) and hands the model the messages with the block
 * after the latest human message's text (the last `HumanMessage`, not a tool result). Only the
 * model's request changes: the graph's `messages` stay as the user and the tools wrote them.
 *
 * - One search a user turn: what was injected is kept in the graph's state (`contextfold`: for
 *   each human message, under the hash of the scope and of the conversation up to and including
 *   it, the blocks folded into it), so the steps of a tool loop that follow show the block again
 *   without a call.
 * - Across turns: a later invocation of the thread (with a checkpointer, in this process or
 *   another) shows the earlier blocks again and sends them back as the `InjectedBlock`s they were,
 *   so it brings new entries only.
 * - Fails open: the service down or slower than `timeoutMs` (200 by default) leaves the model's
 *   input as the agent built it, one warning until a call goes through again.
 *
 * `scope` and `stores` may be functions of the run's context (what `agent.invoke(input,
 * { context })` was given), so one agent serves many users.
 */
import { Command } from "@langchain/langgraph";
import { AIMessage, createMiddleware, HumanMessage, ToolMessage, type BaseMessage } from "langchain";
import { z } from "zod";
import { Remembering, type AdapterOptions, type Dialect } from "./adapters.js";
import { dumps, type BlockData, type InjectedBlockData, type MessageData } from "./convert.js";

/** The settings; `scope` and `stores` may be functions of the run's context (`runtime.context`). */
export type ContextfoldMiddlewareOptions = AdapterOptions<unknown>;

type Part = { type?: string; text?: string; [field: string]: unknown };

function texts(content: BaseMessage["content"]): BlockData[] {
  if (typeof content === "string") return [{ text: content }];
  return (content as Part[]).flatMap((part) => (part.type === "text" && typeof part.text === "string" ? [{ text: part.text }] : []));
}

/** LangChain's messages as contextfold reads a conversation, each with its index among them. */
export function contextfoldMessages(messages: readonly BaseMessage[]): Array<[number, MessageData]> {
  const converted: Array<[number, MessageData]> = [];
  messages.forEach((message, index) => {
    if (HumanMessage.isInstance(message)) {
      converted.push([index, { role: "user", content: texts(message.content) }]);
    } else if (AIMessage.isInstance(message)) {
      const uses = (message.tool_calls ?? []).map((call) => ({
        toolUse: { toolUseId: call.id ?? "", name: call.name, input: JSON.parse(dumps(call.args ?? {})) as BlockData[string] },
      }));
      const content = [...texts(message.content).filter((block) => block.text !== ""), ...uses];
      if (content.length > 0) converted.push([index, { role: "assistant", content }]);
    } else if (ToolMessage.isInstance(message)) {
      const said = typeof message.content === "string" ? message.content : dumps(message.content);
      const result = { toolUseId: message.tool_call_id, content: [{ text: said }], status: message.status === "error" ? "error" : "success" };
      converted.push([index, { role: "user", content: [{ toolResult: result }] }]);
    }
  });
  return converted;
}

/** A human message (a copy, id and fields kept) with `added` after its content. */
function withText(message: BaseMessage, added: readonly string[]): BaseMessage {
  const content =
    typeof message.content === "string"
      ? message.content + added.join("")
      : [...(message.content as Part[]), ...added.map((text) => ({ type: "text", text }))];
  return new HumanMessage({
    content: content as HumanMessage["content"],
    id: message.id,
    name: message.name,
    additional_kwargs: message.additional_kwargs,
    response_metadata: message.response_metadata,
  });
}

const DIALECT: Dialect<BaseMessage> = {
  converted: contextfoldMessages,
  asks: (message, original) => HumanMessage.isInstance(original) && message.content.some((block) => typeof block.text === "string"),
  withText,
};

/** The graph state's key under which what was injected is kept: `{ [middleware name]: { [ask's key]: [block] } }`. */
export const STATE_KEY = "contextfold";

type Ledger = Record<string, Record<string, InjectedBlockData[]>>;

/** A `createAgent` middleware folding contextfold's injection into every model call; see the module's docs. */
export function contextfoldMiddleware(options: ContextfoldMiddlewareOptions & { name?: string } = {}) {
  const { name = "ContextfoldMiddleware", ...settings } = options;
  const injection = new Remembering(DIALECT, "contextfoldMiddleware", settings);
  const middleware = createMiddleware({
    name,
    stateSchema: z.object({ [STATE_KEY]: z.record(z.string(), z.record(z.string(), z.array(z.any()))).optional() }),
    wrapModelCall: async (request, handler) => {
      const ledger = ((request.state as { [STATE_KEY]?: Ledger })[STATE_KEY] ?? {}) as Ledger;
      const kept = { ...(ledger[name] ?? {}) };
      const before = Object.keys(kept).length;
      const messages = await injection.fold(request.messages, request.runtime.context, kept);
      const answer = await handler({ ...request, messages });
      // A new ask's blocks (or that it was asked) go into the graph's state with the model's answer.
      if (Object.keys(kept).length === before && Object.keys(kept).every((key) => ledger[name]?.[key] !== undefined)) {
        return answer;
      }
      return new Command({ update: { [STATE_KEY]: { ...ledger, [name]: kept } } });
    },
  });
  /** Close the client this middleware made (a client passed in is the caller's to close). */
  return Object.assign(middleware, { close: () => injection.close() });
}
