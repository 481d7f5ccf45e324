/**
 * Calls that change nothing are tried again when the connection, not the service, failed them.
 *
 * A replica that stops (a rollout, a scale-down) can cut off a call it never answered: the caller
 * sees UNAVAILABLE, or CANCELLED through some proxies. For calls that only read (Inject and the
 * searches, gets and lists), trying once more on another connection is always safe; writes are
 * never tried again, since the first attempt may have landed. Up to three attempts, 50 ms then
 * 100 ms apart, all within the call's own deadline: a deadline that passes, or a caller that gives
 * up, ends the retries at once.
 *
 * Which calls only read is said once, in the protos (`option idempotency_level = NO_SIDE_EFFECTS`),
 * and read here from the generated descriptors.
 */
import type { DescMethod, DescService } from "@bufbuild/protobuf";
import { MethodOptions_IdempotencyLevel } from "@bufbuild/protobuf/wkt";
import { Code, ConnectError, type Interceptor } from "@connectrpc/connect";
import { setTimeout as sleep } from "node:timers/promises";
import { InjectionService } from "./gen/contextfold/v1/injection_pb.js";
import { MemoryService } from "./gen/contextfold/v1/memory_pb.js";
import { ProviderService } from "./gen/contextfold/v1/provider_pb.js";

function changesNothing(method: DescMethod): boolean {
  return method.idempotency === MethodOptions_IdempotencyLevel.NO_SIDE_EFFECTS;
}

/** The read-only calls of contextfold's services, as `service/method`. */
export const SAFE_TO_REPEAT: ReadonlySet<string> = new Set(
  ([InjectionService, MemoryService, ProviderService] as DescService[]).flatMap((service) =>
    service.methods.filter(changesNothing).map((method) => `${service.typeName}/${method.name}`),
  ),
);

const RETRIED = new Set([Code.Unavailable, Code.Canceled]);
const ATTEMPTS = 3;
const BACKOFF_MS = 50;

/**
 * The interceptor `ContextfoldClient` puts first on its transport. Add it to a transport of your own
 * (`ClientOptions.transport`) to keep the behaviour.
 */
export const retrySafeCalls: Interceptor = (next) => async (request) => {
  if (request.stream || !changesNothing(request.method)) {
    return next(request);
  }
  for (let attempt = 0; ; attempt++) {
    try {
      return await next(request);
    } catch (error) {
      // The request's signal carries the caller's abort and the call's deadline, for every attempt.
      const code = error instanceof ConnectError ? error.code : undefined;
      if (attempt + 1 >= ATTEMPTS || code === undefined || !RETRIED.has(code) || request.signal.aborted) throw error;
      try {
        await sleep(BACKOFF_MS * 2 ** attempt, undefined, { signal: request.signal });
      } catch {
        throw error; // the deadline passed, or the caller gave up, while waiting
      }
    }
  }
};
