/**
 * Write a context provider in a few lines: a function from the injection context to text.
 *
 *   const server = await startProvider((context) => `<now>${new Date().toISOString()}</now>`, { port: 50063 });
 *
 * Register it with `ProviderService.RegisterProvider` (target `127.0.0.1:50063`) and every
 * `Inject` in its namespace asks it. Returning `undefined` or `""` means nothing this call. Its text
 * is folded in as returned: escape what you interpolate into markup (`escapeXml`).
 */
import http2 from "node:http2";
import type { AddressInfo } from "node:net";
import type { JsonObject } from "@bufbuild/protobuf";
import type { ConnectRouter } from "@connectrpc/connect";
import { connectNodeAdapter } from "@connectrpc/connect-node";
import { fromProtoMessages, type MessageData } from "./convert.js";
import { ContextProvider } from "./gen/contextfold/v1/provider_pb.js";

/** What a provider is told about the model call it contributes to. */
export interface ProvideContext {
  messages: MessageData[];
  appState: JsonObject;
  agent: { id: string; name: string };
  /** The name the provider is registered under. */
  provider: string;
  /** The namespace (tenant) the call is made for: a provider shared by tenants tells them apart by it. */
  namespace: string;
  /** The id of the `Inject` call, as in contextfold's log. */
  requestId: string;
  /** Milliseconds until contextfold stops waiting; `undefined` when it set no deadline. */
  timeRemainingMs: number | undefined;
  /** Aborted when contextfold stops waiting: pass it on to what you call. */
  signal: AbortSignal;
}

export type ProvideFunction = (
  context: ProvideContext,
) => string | null | undefined | Promise<string | null | undefined>;

export interface ProviderServer {
  /** The port it listens on (useful with port 0). */
  readonly port: number;
  /** Stop accepting calls, let those in flight finish, then resolve. */
  close(): Promise<void>;
}

/** Escape text for XML content or a quoted attribute: `&` first, then `<`, `>`, `"`, `'`. */
export function escapeXml(value: string): string {
  return value
    .replaceAll("&", "&amp;")
    .replaceAll("<", "&lt;")
    .replaceAll(">", "&gt;")
    .replaceAll('"', "&quot;")
    .replaceAll("'", "&#39;");
}

/** Serve `provide` as a `contextfold.v1.ContextProvider` over gRPC (plaintext HTTP/2). */
export async function startProvider(
  provide: ProvideFunction,
  { host = "127.0.0.1", port = 0 }: { host?: string; port?: number } = {},
): Promise<ProviderServer> {
  const routes = (router: ConnectRouter) =>
    router.service(ContextProvider, {
      async provide(request, context) {
        const text = await provide({
          messages: fromProtoMessages(request.messages),
          appState: request.appState ?? {},
          agent: { id: request.agent?.id ?? "", name: request.agent?.name ?? "" },
          provider: request.provider,
          namespace: request.namespace,
          requestId: request.requestId,
          timeRemainingMs: context.timeoutMs(),
          signal: context.signal,
        });
        return { text: text ?? "" };
      },
    });
  const server = http2.createServer(connectNodeAdapter({ routes }));
  const sessions = new Set<http2.ServerHttp2Session>();
  server.on("session", (session) => {
    sessions.add(session);
    session.once("close", () => sessions.delete(session));
  });
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(port, host, () => resolve());
  });
  return {
    port: (server.address() as AddressInfo).port,
    close: () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve());
        for (const session of sessions) session.close();
      }),
  };
}
