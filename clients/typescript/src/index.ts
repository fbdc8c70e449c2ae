/**
 * haki-context-client: a typed client of haki-context, the GraphQL memory server for AI agents.
 * Plain fetch, no GraphQL runtime: Node.js 20+ and browsers.
 */

export {
  DEFAULT_KIND,
  DEFAULT_URL,
  HakiClient,
  type AssertFactOptions,
  type ContextOptions,
  type FactsOptions,
  type HakiClientOptions,
  type PageOptions,
  type RememberOptions,
  type ReplayOptions,
  type TraceOptions,
  type TracesOptions,
} from "./client.js";
export { TOKEN_EXTENSION, TOKEN_HEADER, documentOperations, isMutation, tokenPosition } from "./consistency.js";
export {
  BudgetExceededError,
  ForbiddenError,
  GraphQLRequestError,
  HakiError,
  HttpStatusError,
  IllegalTransitionError,
  IncompleteExportError,
  InternalError,
  InvalidInputError,
  InvalidResponseError,
  NotFoundError,
  PayloadTooLargeError,
  QueryTooComplexError,
  StatementTimeoutError,
  TransportError,
  UnauthenticatedError,
  UnavailableError,
  errorFor,
  type GraphQLErrorEntry,
  type HakiErrorCode,
  type HakiErrorOptions,
} from "./errors.js";
export { EXPORT_FORMAT, type ExportLine } from "./export.js";
export { RetryPolicy, retryAfterMs, type RetryOptions } from "./retry.js";
export type { FetchLike } from "./transport.js";
export type * from "./types.js";
// The typed documents and the schema's types they use (enums, inputs, each operation's result
// and variables), for `execute` and for your own annotations.
export * from "./generated/graphql.js";
