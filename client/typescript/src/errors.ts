/**
 * contextfold's errors: the gRPC status, its sentence, and the details the service attaches.
 *
 * Every call through a `ContextfoldClient` that fails throws a `ContextfoldError`. It is a
 * `ConnectError` (so code written for Connect keeps working; its `name` stays "ConnectError", which
 * is how Connect recognises its errors) with the status decoded: `status`
 * names the gRPC code (`"INVALID_ARGUMENT"`), `fieldViolations` lists each bad field of the
 * request, `resource` names what was not found or already exists, and `reason` is the
 * machine-readable cause (e.g. `DEPENDENCY_UNAVAILABLE`).
 */
import { Code, ConnectError } from "@connectrpc/connect";
import { BadRequestSchema, ErrorInfoSchema, ResourceInfoSchema } from "./gen/google/rpc/error_details_pb.js";

/** A gRPC status code by its canonical name. */
export type StatusName =
  | "OK"
  | "CANCELLED"
  | "UNKNOWN"
  | "INVALID_ARGUMENT"
  | "DEADLINE_EXCEEDED"
  | "NOT_FOUND"
  | "ALREADY_EXISTS"
  | "PERMISSION_DENIED"
  | "RESOURCE_EXHAUSTED"
  | "FAILED_PRECONDITION"
  | "ABORTED"
  | "OUT_OF_RANGE"
  | "UNIMPLEMENTED"
  | "INTERNAL"
  | "UNAVAILABLE"
  | "DATA_LOSS"
  | "UNAUTHENTICATED";

/** A field of the request that was wrong, and why. */
export interface FieldViolation {
  field: string;
  description: string;
}

/** The resource an error is about. */
export interface ResourceRef {
  type: string;
  name: string;
}

function statusName(code: Code): StatusName {
  return Code[code].replace(/([a-z])([A-Z])/g, "$1_$2").toUpperCase() as StatusName;
}

export class ContextfoldError extends ConnectError {
  /** The gRPC status, by name: `"INVALID_ARGUMENT"`, `"NOT_FOUND"`, … */
  readonly status: StatusName;
  /** Each bad field of the request (from `google.rpc.BadRequest`). */
  readonly fieldViolations: FieldViolation[];
  /** The resource the error is about (from `google.rpc.ResourceInfo`). */
  readonly resource?: ResourceRef;
  /** The machine-readable cause (from `google.rpc.ErrorInfo`). */
  readonly reason?: string;

  constructor(error: ConnectError) {
    super(error.rawMessage, error.code, error.metadata, undefined, error.cause ?? error);
    this.details = error.details;
    this.status = statusName(error.code);
    this.fieldViolations = error
      .findDetails(BadRequestSchema)
      .flatMap((detail) => detail.fieldViolations)
      .map(({ field, description }) => ({ field, description }));
    const [resource] = error.findDetails(ResourceInfoSchema);
    if (resource !== undefined) this.resource = { type: resource.resourceType, name: resource.resourceName };
    const [info] = error.findDetails(ErrorInfoSchema);
    if (info !== undefined) this.reason = info.reason;
  }

  /** The status, the sentence, the reason and each bad field: what a log of the error should show
   * (its details decoded, never their bytes). */
  override toString(): string {
    const lines = [`${this.status}: ${this.rawMessage}`];
    if (this.reason !== undefined) lines.push(`  reason: ${this.reason}`);
    if (this.resource !== undefined) lines.push(`  resource: ${this.resource.type} ${this.resource.name}`);
    for (const { field, description } of this.fieldViolations) lines.push(`  ${field}: ${description}`);
    return lines.join("\n");
  }

  /** What `console.error(error)` and `util.inspect` print: `toString()` and where it was thrown. */
  [Symbol.for("nodejs.util.inspect.custom")](): string {
    const stack = (this.stack ?? "").split("\n").slice(1).join("\n");
    return `ContextfoldError ${this.toString()}${stack ? `\n${stack}` : ""}`;
  }

  // ConnectError counts any error of Connect's shape as an instance; a ContextfoldError is one only
  // when it really is (so `fromError` knows which errors still need decoding).
  static override [Symbol.hasInstance](value: unknown): boolean {
    return Function.prototype[Symbol.hasInstance].call(this, value);
  }

  /** `error` as a `ContextfoldError` (anything a call can throw becomes one). */
  static fromError(error: unknown): ContextfoldError {
    if (error instanceof ContextfoldError) return error;
    return new ContextfoldError(ConnectError.from(error));
  }
}

/**
 * `client` with every method's failure turned into a `ContextfoldError`. (An interceptor would miss
 * failures Connect raises outside the interceptor chain, such as a deadline passing on the client.)
 */
export function decodingErrors<T extends object>(client: T): T {
  return new Proxy(client, {
    get(target, property, receiver) {
      const member = Reflect.get(target, property, receiver);
      if (typeof member !== "function") return member;
      return (...args: unknown[]) => {
        let result: unknown;
        try {
          result = member.apply(target, args);
        } catch (error) {
          throw ContextfoldError.fromError(error);
        }
        // A unary or client-streaming call answers with a promise; a server-streaming one with an
        // async iterable, whose failures come as it is read.
        if (isPromise(result)) {
          return result.then(undefined, (error: unknown) => {
            throw ContextfoldError.fromError(error);
          });
        }
        if (isAsyncIterable(result)) return decodingStream(result);
        return result;
      };
    },
  });
}

function isPromise(value: unknown): value is Promise<unknown> {
  return typeof (value as { then?: unknown } | null)?.then === "function";
}

function isAsyncIterable(value: unknown): value is AsyncIterable<unknown> {
  return typeof (value as { [Symbol.asyncIterator]?: unknown } | null)?.[Symbol.asyncIterator] === "function";
}

async function* decodingStream<T>(stream: AsyncIterable<T>): AsyncGenerator<T> {
  try {
    yield* stream;
  } catch (error) {
    throw ContextfoldError.fromError(error);
  }
}
