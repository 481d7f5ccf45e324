/**
 * Calls that change nothing are tried again when the connection, not the service, failed them.
 *
 * A replica that stops (a rollout, a scale-down) can cut off a call it never answered: the caller
 * sees UNAVAILABLE, or CANCELLED through some proxies. For calls that only read (Inject and the
 * searches, gets and lists), trying once more on another connection is always safe; writes are
 * never tried again, since the first attempt may have landed. Up to three attempts, 50 ms then
 * 100 ms apart, all within the call's own deadline: a deadline that passes, or a caller that gives
 * up, ends the retries at once.
 */
import { Code, ConnectError, type Interceptor } from "@connectrpc/connect";
import { setTimeout as sleep } from "node:timers/promises";

/** The read-only calls, as `service/method`. */
export const SAFE_TO_REPEAT: ReadonlySet<string> = new Set([
  "contextfold.v1.InjectionService/Inject",
  "contextfold.v1.MemoryService/ListStores",
  "contextfold.v1.MemoryService/SearchMemories",
  "contextfold.v1.MemoryService/GetMemory",
  "contextfold.v1.MemoryService/ListMemories",
  "contextfold.v1.ProviderService/GetProvider",
  "contextfold.v1.ProviderService/ListProviders",
]);

const RETRIED = new Set([Code.Unavailable, Code.Canceled]);
const ATTEMPTS = 3;
const BACKOFF_MS = 50;

/**
 * The interceptor `ContextfoldClient` puts first on its transport. Add it to a transport of your own
 * (`ClientOptions.transport`) to keep the behaviour.
 */
export const retrySafeCalls: Interceptor = (next) => async (request) => {
  if (request.stream || !SAFE_TO_REPEAT.has(`${request.service.typeName}/${request.method.name}`)) {
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
