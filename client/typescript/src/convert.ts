/**
 * Converters between contextfold's messages and the message data agents hold.
 *
 * The data shape is the Strands TypeScript SDK's `MessageData` (what `Message.toJSON()` gives):
 * `{ role: 'user', content: [{ text }, { toolUse }, { toolResult }, …] }`. Conversion is lossless
 * both ways: a block gets a typed form only when converting it back gives the very same data; any
 * other block travels as `rawJson`. Bytes inside JSON payloads travel as `{ "$bytes": "<base64>" }`,
 * the same convention as the Python client, so either language reads what the other wrote.
 */
import { create } from "@bufbuild/protobuf";
import { base64Decode, base64Encode } from "@bufbuild/protobuf/wire";
import {
  ContentBlockSchema,
  DocumentBlockSchema,
  ImageBlockSchema,
  InjectedBlockSchema,
  MessageSchema,
  ReasoningBlockSchema,
  ToolResultBlockSchema,
  ToolUseBlockSchema,
  Role,
  type ContentBlock,
  type Message,
} from "./gen/contextfold/v1/conversation_pb.js";

/** A JSON value, with bytes allowed where agents hold them. */
export type DataValue =
  | string
  | number
  | boolean
  | null
  | Uint8Array
  | DataValue[]
  | { [key: string]: DataValue | undefined };

/** One content block as agents hold it: `{ text }`, `{ toolUse }`, `{ injected }`, … */
export type BlockData = { [kind: string]: DataValue | undefined };

/** One message as agents hold it. Keys beside `role` and `content` ride along. */
export interface MessageData {
  role: "user" | "assistant";
  content: BlockData[];
  [key: string]: DataValue | undefined;
}

/** The block an injection adds: the text the model should see, and where it came from. */
export interface InjectedBlockData {
  source: string;
  text: string;
  entryIds: string[];
  sources?: string[];
}

const BYTES_KEY = "$bytes";

/** JSON text for `value`, with bytes as `{ "$bytes": base64 }`. */
export function dumps(value: unknown): string {
  return JSON.stringify(value, (_key, item: unknown) =>
    item instanceof Uint8Array ? { [BYTES_KEY]: base64Encode(item) } : item,
  );
}

/** The value of JSON text written by `dumps` (or by the Python client). */
export function loads(text: string): DataValue {
  return JSON.parse(text, (_key, item: unknown) => {
    if (item !== null && typeof item === "object" && !Array.isArray(item)) {
      const keys = Object.keys(item);
      const encoded = (item as Record<string, unknown>)[BYTES_KEY];
      if (keys.length === 1 && typeof encoded === "string") return base64Decode(encoded);
    }
    return item;
  }) as DataValue;
}

function record(value: DataValue | undefined): Record<string, DataValue | undefined> {
  if (value === null || typeof value !== "object" || Array.isArray(value) || value instanceof Uint8Array) {
    throw new TypeError("expected an object");
  }
  return value;
}

function text(value: DataValue | undefined): string {
  if (typeof value !== "string") throw new TypeError("expected a string");
  return value;
}

function bytes(value: DataValue | undefined): Uint8Array {
  if (!(value instanceof Uint8Array)) throw new TypeError("expected bytes");
  return value;
}

function strings(value: DataValue | undefined): string[] {
  if (!Array.isArray(value)) throw new TypeError("expected a list");
  return value.map(text);
}

type Typed = ContentBlock["block"];

// Each typed block kind: how to read it from data. Whether the typed form is kept is decided by
// converting it back (see `blockToProto`), so these only need to be right for the data they accept.
const TYPED: Record<string, (value: DataValue | undefined) => Typed> = {
  text: (value) => ({ case: "text", value: text(value) }),
  toolUse: (value) => {
    const use = record(value);
    return {
      case: "toolUse",
      value: create(ToolUseBlockSchema, {
        toolUseId: text(use.toolUseId),
        name: text(use.name),
        inputJson: dumps(use.input),
      }),
    };
  },
  toolResult: (value) => {
    const result = record(value);
    return {
      case: "toolResult",
      value: create(ToolResultBlockSchema, {
        toolUseId: text(result.toolUseId),
        status: result.status === undefined ? "" : text(result.status),
        contentJson: dumps(result.content),
      }),
    };
  },
  image: (value) => {
    const image = record(value);
    return {
      case: "image",
      value: create(ImageBlockSchema, {
        format: text(image.format),
        data: bytes(record(image.source).bytes),
      }),
    };
  },
  document: (value) => {
    const document = record(value);
    return {
      case: "document",
      value: create(DocumentBlockSchema, {
        format: text(document.format),
        name: text(document.name),
        data: bytes(record(document.source).bytes),
      }),
    };
  },
  reasoning: (value) => {
    const reasoning = record(value);
    return {
      case: "reasoning",
      value: create(ReasoningBlockSchema, {
        text: text(reasoning.text),
        signature: reasoning.signature === undefined ? "" : text(reasoning.signature),
      }),
    };
  },
  injected: (value) => {
    const injected = record(value);
    return {
      case: "injected",
      value: create(InjectedBlockSchema, {
        source: text(injected.source),
        text: text(injected.text),
        entryIds: injected.entryIds === undefined ? [] : strings(injected.entryIds),
        sources: injected.sources === undefined ? [] : strings(injected.sources),
      }),
    };
  },
};

function same(left: unknown, right: unknown): boolean {
  if (left instanceof Uint8Array || right instanceof Uint8Array) {
    return (
      left instanceof Uint8Array &&
      right instanceof Uint8Array &&
      left.length === right.length &&
      left.every((byte, index) => byte === right[index])
    );
  }
  if (Array.isArray(left) || Array.isArray(right)) {
    return (
      Array.isArray(left) &&
      Array.isArray(right) &&
      left.length === right.length &&
      left.every((item, index) => same(item, right[index]))
    );
  }
  if (left !== null && right !== null && typeof left === "object" && typeof right === "object") {
    const entries = (value: object) => Object.entries(value).filter(([, item]) => item !== undefined);
    const leftEntries = entries(left);
    const rightMap = new Map(entries(right));
    return (
      leftEntries.length === rightMap.size &&
      leftEntries.every(([key, item]) => rightMap.has(key) && same(item, rightMap.get(key)))
    );
  }
  return left === right;
}

/** One block of message data as a contextfold `ContentBlock`. */
export function blockToProto(block: BlockData): ContentBlock {
  const kinds = Object.keys(block).filter((kind) => block[kind] !== undefined);
  const read = kinds.length === 1 ? TYPED[kinds[0]] : undefined;
  if (read !== undefined) {
    let typed: ContentBlock | undefined;
    try {
      typed = create(ContentBlockSchema, { block: read(block[kinds[0]]) });
    } catch {
      typed = undefined;
    }
    if (typed !== undefined && same(blockFromProto(typed), block)) return typed;
  }
  return create(ContentBlockSchema, { block: { case: "rawJson", value: dumps(block) } });
}

/** A contextfold `ContentBlock` as message data; an injected block is `{ injected: … }`. */
export function blockFromProto(block: ContentBlock): BlockData {
  const kind = block.block;
  switch (kind.case) {
    case "text":
      return { text: kind.value };
    case "toolUse":
      return {
        toolUse: { toolUseId: kind.value.toolUseId, name: kind.value.name, input: loads(kind.value.inputJson) },
      };
    case "toolResult": {
      const result: Record<string, DataValue> = {
        toolUseId: kind.value.toolUseId,
        content: loads(kind.value.contentJson),
      };
      if (kind.value.status) result.status = kind.value.status;
      return { toolResult: result };
    }
    case "image":
      return { image: { format: kind.value.format, source: { bytes: kind.value.data } } };
    case "document":
      return { document: { format: kind.value.format, name: kind.value.name, source: { bytes: kind.value.data } } };
    case "reasoning": {
      const reasoning: Record<string, DataValue> = { text: kind.value.text };
      if (kind.value.signature) reasoning.signature = kind.value.signature;
      return { reasoning };
    }
    case "injected": {
      const injected: Record<string, DataValue> = {
        source: kind.value.source,
        text: kind.value.text,
        entryIds: [...kind.value.entryIds],
      };
      if (kind.value.sources.length > 0) injected.sources = [...kind.value.sources];
      return { injected };
    }
    case "rawJson":
      return record(loads(kind.value)) as BlockData;
    default:
      throw new TypeError("content block has no kind set");
  }
}

const ROLES = { user: Role.USER, assistant: Role.ASSISTANT } as const;

/** Message data (e.g. `message.toJSON()` of Strands messages) as contextfold messages. */
export function toProtoMessages(messages: readonly MessageData[]): Message[] {
  return messages.map((message) => {
    const role = ROLES[message.role];
    if (role === undefined) throw new TypeError(`unknown role ${JSON.stringify(message.role)}: expected user or assistant`);
    const extra = Object.fromEntries(
      Object.entries(message).filter(([key, value]) => key !== "role" && key !== "content" && value !== undefined),
    );
    return create(MessageSchema, {
      role,
      content: message.content.map(blockToProto),
      metadataJson: Object.keys(extra).length > 0 ? dumps(extra) : "",
    });
  });
}

/** contextfold messages back to message data, injected blocks included as `{ injected: … }`. */
export function fromProtoMessages(messages: readonly Message[]): MessageData[] {
  return messages.map((message) => {
    const extra = message.metadataJson ? record(loads(message.metadataJson)) : {};
    const role = message.role === Role.USER ? "user" : message.role === Role.ASSISTANT ? "assistant" : undefined;
    if (role === undefined) throw new TypeError(`message has no role (${message.role})`);
    return {
      ...extra,
      role,
      content: message.content.map(blockFromProto),
    };
  });
}

/** A block as the model should see it: an injected block becomes the text block it stands for. */
export function renderBlock(block: BlockData): BlockData {
  const injected = block.injected;
  return injected === undefined ? block : { text: text(record(injected).text) };
}

/** The messages as a model should see them: each injected block becomes the text block it stands for. */
export function renderForModel(messages: readonly MessageData[]): MessageData[] {
  return messages.map((message) => ({ ...message, content: message.content.map(renderBlock) }));
}
