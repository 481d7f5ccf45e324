/**
 * contextfold's TypeScript client: typed stubs generated from the protos, converters between
 * agents' message data and contextfold's messages, errors with their details, and a provider server.
 * The framework adapters are subpath exports: `@contextfold/client/strands` (Strands Agents),
 * `/ai` (the Vercel AI SDK), `/langchain` (LangChain.js), `/langgraph` (LangGraph.js's store) and `/openai-agents` (the OpenAI Agents SDK).
 */
export {
  ContextfoldClient,
  DEFAULT_ADDRESS,
  defaultAddress,
  injectRequest,
  READ_AFTER,
  readingYourWrites,
  type ClientOptions,
  type InjectOptions,
  type InjectResult,
  type ScopeData,
} from "./client.js";
export {
  blockFromProto,
  blockToProto,
  dumps,
  fromProtoMessages,
  loads,
  renderBlock,
  renderForModel,
  toProtoMessages,
  type BlockData,
  type DataValue,
  type InjectedBlockData,
  type MessageData,
} from "./convert.js";
export { filterMessage, type FieldTests, type FilterData } from "./filter.js";
export { ContextfoldError, decodingErrors, type FieldViolation, type ResourceRef, type StatusName } from "./errors.js";
export { InvalidApiKeyError, keyProblem } from "./keys.js";
export { retrySafeCalls, SAFE_TO_REPEAT } from "./retry.js";
export { escapeXml, startProvider, type ProvideContext, type ProvideFunction, type ProviderServer } from "./provider.js";
export * from "./gen/contextfold/v1/conversation_pb.js";
export * from "./gen/contextfold/v1/injection_pb.js";
export * from "./gen/contextfold/v1/memory_pb.js";
export * from "./gen/contextfold/v1/provider_pb.js";
