/**
 * The errors of the client: one `HakiError` per failed call, carrying the server's code.
 *
 *     HakiError                   .code: the GraphQL error's `extensions.code`, or a client code
 *     ├── InvalidInputError       INVALID_INPUT
 *     ├── BudgetExceededError     BUDGET_EXCEEDED
 *     ├── NotFoundError           NOT_FOUND
 *     ├── IllegalTransitionError  ILLEGAL_TRANSITION
 *     ├── UnauthenticatedError    UNAUTHENTICATED
 *     ├── ForbiddenError          FORBIDDEN
 *     ├── QueryTooComplexError    QUERY_TOO_COMPLEX
 *     ├── PayloadTooLargeError    PAYLOAD_TOO_LARGE
 *     ├── StatementTimeoutError   TIMEOUT               a statement ran past the server's limit
 *     ├── UnavailableError        UNAVAILABLE           retried by the client, thrown once retries are spent
 *     ├── GraphQLRequestError     GRAPHQL_PARSE_FAILED, GRAPHQL_VALIDATION_FAILED
 *     ├── InternalError           INTERNAL              masked by the server, with a reference
 *     ├── HttpStatusError         HTTP_ERROR            a non-2xx answer without GraphQL errors
 *     ├── InvalidResponseError    INVALID_RESPONSE      an answer that is no GraphQL response
 *     ├── IncompleteExportError   INCOMPLETE_EXPORT     an export stream that ended without its last line
 *     └── TransportError          TRANSPORT_ERROR       no answer: connection refused, reset, timed out
 *
 * A code this client does not know yet is thrown as a plain `HakiError` with that code. The
 * classes and codes are the Python client's (clients/python/src/haki_context_client/errors.py).
 */

/** The codes the server and the client use; a newer server may send another string. */
export type HakiErrorCode =
  | "INVALID_INPUT"
  | "BUDGET_EXCEEDED"
  | "NOT_FOUND"
  | "ILLEGAL_TRANSITION"
  | "UNAUTHENTICATED"
  | "FORBIDDEN"
  | "QUERY_TOO_COMPLEX"
  | "PAYLOAD_TOO_LARGE"
  | "TIMEOUT"
  | "UNAVAILABLE"
  | "GRAPHQL_PARSE_FAILED"
  | "GRAPHQL_VALIDATION_FAILED"
  | "INTERNAL"
  | "HTTP_ERROR"
  | "INVALID_RESPONSE"
  | "INCOMPLETE_EXPORT"
  | "TRANSPORT_ERROR"
  | "UNKNOWN"
  | (string & {});

/** One entry of a GraphQL response's `errors`, as the server sends it. */
export interface GraphQLErrorEntry {
  message: string;
  path?: ReadonlyArray<string | number>;
  locations?: ReadonlyArray<{ line: number; column: number }>;
  extensions?: Record<string, unknown>;
}

export interface HakiErrorOptions {
  /** Overrides the class's code (an unknown server code on a plain HakiError). */
  code?: string;
  /** The HTTP status of the answer; undefined when no answer came. */
  statusCode?: number;
  /** Every GraphQL error of the response. */
  errors?: ReadonlyArray<GraphQLErrorEntry>;
  /** The response's partial `data`, when it had some. */
  data?: Record<string, unknown> | null;
  /** The server's Retry-After, in milliseconds. */
  retryAfterMs?: number | null;
  cause?: unknown;
}

/** A failed call. `code` is the server's `extensions.code` (or one of the client's codes). */
export class HakiError extends Error {
  /** The code of the class; an instance's `code` may differ (see HakiErrorOptions.code). */
  static readonly code: string = "UNKNOWN";

  readonly code: HakiErrorCode;
  readonly statusCode: number | undefined;
  readonly errors: ReadonlyArray<GraphQLErrorEntry>;
  readonly data: Record<string, unknown> | null;
  readonly retryAfterMs: number | null;

  constructor(message: string, options: HakiErrorOptions = {}) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause });
    this.name = new.target.name;
    this.code = options.code ?? (new.target as typeof HakiError).code;
    this.statusCode = options.statusCode;
    this.errors = options.errors ?? [];
    this.data = options.data ?? null;
    this.retryAfterMs = options.retryAfterMs ?? null;
  }

  /** The first GraphQL error's path (the field that failed), when it has one. */
  get path(): ReadonlyArray<string | number> | undefined {
    return this.errors[0]?.path;
  }

  /** The first GraphQL error's extensions (`code`, and `field` or `reference` when given). */
  get extensions(): Record<string, unknown> {
    const extensions = this.errors[0]?.extensions;
    return isRecord(extensions) ? { ...extensions } : { code: this.code };
  }

  override toString(): string {
    return `${this.code}: ${this.message}`;
  }
}

/** A value outside its limits, a malformed id or date, a variable of the wrong type. */
export class InvalidInputError extends HakiError {
  static override readonly code = "INVALID_INPUT";
}

/** The token budget is not a positive integer within the server's maximum. */
export class BudgetExceededError extends HakiError {
  static override readonly code = "BUDGET_EXCEEDED";
}

/** A write named an id that does not exist in the caller's project (or a replay's trace is gone). */
export class NotFoundError extends HakiError {
  static override readonly code = "NOT_FOUND";
}

/** The fact or conflict is not in a state that allows the change. */
export class IllegalTransitionError extends HakiError {
  static override readonly code = "ILLEGAL_TRANSITION";
}

/** No valid API key (unknown, revoked or malformed), outside the server's development mode. */
export class UnauthenticatedError extends HakiError {
  static override readonly code = "UNAUTHENTICATED";
}

/** The key is valid but lacks the scope (read, write, erase) the operation needs. */
export class ForbiddenError extends HakiError {
  static override readonly code = "FORBIDDEN";
}

/** The operation is over a depth, alias, token or `context` field limit. */
export class QueryTooComplexError extends HakiError {
  static override readonly code = "QUERY_TOO_COMPLEX";
}

/** The request body is over the server's limit. */
export class PayloadTooLargeError extends HakiError {
  static override readonly code = "PAYLOAD_TOO_LARGE";
}

/** A database statement ran past the server's statement timeout. */
export class StatementTimeoutError extends HakiError {
  static override readonly code = "TIMEOUT";
}

/** The server cannot serve now (database down, load shed, a write rolled back by a concurrent one);
 * `retryAfterMs` is its hint. Thrown once the client's retries are spent. */
export class UnavailableError extends HakiError {
  static override readonly code = "UNAVAILABLE";
}

/** The document does not parse or does not validate against the server's schema. */
export class GraphQLRequestError extends HakiError {
  static override readonly code = "GRAPHQL_VALIDATION_FAILED";
}

/** An unexpected server failure; `extensions.reference` finds it in the server's log. */
export class InternalError extends HakiError {
  static override readonly code = "INTERNAL";
}

/** A non-2xx HTTP answer that carries no GraphQL error (a proxy's page, a 404). */
export class HttpStatusError extends HakiError {
  static override readonly code = "HTTP_ERROR";
}

/** A 2xx answer that is not a GraphQL response (not JSON, or neither `data` nor `errors`). */
export class InvalidResponseError extends HakiError {
  static override readonly code = "INVALID_RESPONSE";
}

/** An export stream ended without its closing `{"type": "end"}` line, or with counts that
 * disagree with the records before it: the connection was cut; export again. */
export class IncompleteExportError extends HakiError {
  static override readonly code = "INCOMPLETE_EXPORT";
}

/** No answer came: connection refused or reset, or the client's timeout passed. The fetch
 * error is the `cause`. Not retried: the call may have run. */
export class TransportError extends HakiError {
  static override readonly code = "TRANSPORT_ERROR";
}

const BY_CODE: ReadonlyMap<string, typeof HakiError> = new Map<string, typeof HakiError>([
  ...[
    InvalidInputError,
    BudgetExceededError,
    NotFoundError,
    IllegalTransitionError,
    UnauthenticatedError,
    ForbiddenError,
    QueryTooComplexError,
    PayloadTooLargeError,
    StatementTimeoutError,
    UnavailableError,
    InternalError,
  ].map((cls) => [cls.code, cls] as const),
  ["GRAPHQL_PARSE_FAILED", GraphQLRequestError],
  ["GRAPHQL_VALIDATION_FAILED", GraphQLRequestError],
]);

export function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

/** The error for a response's GraphQL errors: the class of the first error's code. An error
 * without a code is INTERNAL on a 2xx answer and HTTP_ERROR on another. */
export function errorFor(
  errors: ReadonlyArray<unknown>,
  options: { statusCode?: number; data?: Record<string, unknown> | null; retryAfterMs?: number | null } = {},
): HakiError {
  const entries = errors.map(asEntry);
  const first = entries[0] ?? { message: "an error without a message" };
  let code = first.extensions?.["code"];
  if (typeof code !== "string") {
    code = options.statusCode === undefined || options.statusCode < 400 ? "INTERNAL" : "HTTP_ERROR";
  }
  const cls = BY_CODE.get(code as string) ?? HakiError;
  return new cls(first.message, { ...options, code: code as string, errors: entries });
}

function asEntry(error: unknown): GraphQLErrorEntry {
  if (!isRecord(error)) return { message: JSON.stringify(error) ?? String(error) };
  const entry: GraphQLErrorEntry = {
    ...(error as Partial<GraphQLErrorEntry>),
    message: typeof error["message"] === "string" ? error["message"] : JSON.stringify(error),
  };
  return entry;
}
