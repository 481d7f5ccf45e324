// A contextfold context provider in TypeScript: the current time, on every turn.
//
//   npx tsx examples/clock-provider.ts 127.0.0.1:50063
//   contextfold providers register clock-ts --target 127.0.0.1:50063 --trigger every_turn
import { startProvider } from "@contextfold/client";

const [host, port] = (process.argv[2] ?? "127.0.0.1:50063").split(":");
const server = await startProvider(
  // The context carries the conversation, app state and agent; `signal` ends with the call's deadline.
  (context) => `<now turns="${context.messages.length}">${new Date().toISOString()}</now>`,
  { host, port: Number(port) },
);
console.log(`provider serving on port ${server.port}`);
for (const signal of ["SIGTERM", "SIGINT"] as const) {
  process.on(signal, () => void server.close().then(() => process.exit(0)));
}
