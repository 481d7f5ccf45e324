// A contextfold context provider in TypeScript: the current time, for every turn.
//
//   npm ci && npm run generate      # types from ../../../protos
//   npx tsx clock.ts 127.0.0.1:50063
//   contextfold providers register clock-ts --target 127.0.0.1:50063 --trigger every_turn
import { fileURLToPath } from "node:url";
import * as grpc from "@grpc/grpc-js";
import * as protoLoader from "@grpc/proto-loader";
import type { ProtoGrpcType } from "./generated/provider.js";
import type { ContextProviderHandlers } from "./generated/contextfold/v1/ContextProvider.js";

const protos = fileURLToPath(new URL("../../../protos", import.meta.url));
const definition = protoLoader.loadSync("contextfold/v1/provider.proto", {
  includeDirs: [protos],
  keepCase: true,
  defaults: true,
  oneofs: true,
});
const { contextfold } = grpc.loadPackageDefinition(definition) as unknown as ProtoGrpcType;

const handlers: ContextProviderHandlers = {
  // The request carries the conversation, app state and agent; the deadline is the call's.
  Provide(call, callback) {
    const turns = call.request.messages.length;
    callback(null, { text: `<now turns="${turns}">${new Date().toISOString()}</now>` });
  },
};

const server = new grpc.Server();
server.addService(contextfold.v1.ContextProvider.service, handlers);
server.bindAsync(process.argv[2] ?? "127.0.0.1:50063", grpc.ServerCredentials.createInsecure(), (error, port) => {
  if (error) throw error;
  console.log(`provider serving on port ${port}`);
});
for (const signal of ["SIGTERM", "SIGINT"] as const) {
  process.on(signal, () => server.tryShutdown(() => process.exit(0)));
}
