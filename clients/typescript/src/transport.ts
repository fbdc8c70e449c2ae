/**
 * HTTP for the operations: the key, the retries on UNAVAILABLE, the consistency token and the errors.
 *
 * Every call is `POST <baseUrl>/graphql` with plain fetch (Node.js 20+ and browsers), with
 * `Authorization: Bearer <key>` when a key is given, and every failure becomes a `HakiError`
 * (never a silent null). Only UNAVAILABLE (HTTP 503: the database is down, the server sheds load,
 * or a concurrent write rolled the call's back) is retried, and only when no root field
 * answered: nothing of the call was written, so a retry cannot apply a write twice. Any other
 * error, an UNAVAILABLE beside data (an earlier field of the document ran), and a call that got
 * no answer at all (which may have run), is thrown at once.
 *
 * Every request sends the highest consistency token the client's mutations got back (see
 * consistency.ts), so that a read replica serves it only once it has replayed those writes; a
 * retry sends it again.
 */

import { ConsistencyToken, isMutation } from "./consistency.js";
import {
  HttpStatusError,
  InvalidResponseError,
  TransportError,
  UnavailableError,
  errorFor,
  isRecord,
} from "./errors.js";
import { RetryPolicy, retryAfterMs } from "./retry.js";

/** GraphQL over HTTP's media type first: a server that negotiates it answers parse and
 * validation failures with a 4xx; plain JSON stays acceptable for servers that speak only it. */
export const ACCEPT = "application/graphql-response+json, application/json;q=0.9";
const NDJSON = "application/x-ndjson";

/** What the client calls to send a request: the global fetch, or one given (tests, proxies). */
export type FetchLike = (input: string, init: RequestInit) => Promise<Response>;

export interface TransportOptions {
  apiKey?: string | undefined;
  timeoutMs: number;
  retry: RetryPolicy;
  headers?: Record<string, string> | undefined;
  fetch?: FetchLike | undefined;
  consistencyToken?: string | null | undefined;
  adoptQueryTokens?: boolean | undefined;
}

/** The server's root: a trailing slash and `/graphql` are accepted. */
export function endpoint(baseUrl: string): string {
  const base = baseUrl.replace(/\/+$/, "");
  return base.endsWith("/graphql") ? base.slice(0, -"/graphql".length) : base;
}

/** The `data` of a GraphQL answer whose body read as JSON is `body` (undefined when it is not
 * JSON), or the HakiError it stands for. */
export function graphqlAnswer(response: Response, body: unknown, text: string): Record<string, unknown> {
  const retryAfter = retryAfterMs(response.headers.get("retry-after"));
  if (isRecord(body) && Array.isArray(body["errors"]) && body["errors"].length > 0) {
    const data = isRecord(body["data"]) ? body["data"] : null;
    throw errorFor(body["errors"], { statusCode: response.status, data, retryAfterMs: retryAfter });
  }
  if (response.status === 503) {
    throw new UnavailableError("the server is unavailable (HTTP 503)", { statusCode: 503, retryAfterMs: retryAfter });
  }
  if (!response.ok) {
    throw new HttpStatusError(`HTTP ${response.status}: ${text.slice(0, 200)}`, { statusCode: response.status });
  }
  if (!isRecord(body) || !isRecord(body["data"])) {
    throw new InvalidResponseError(`not a GraphQL response: ${JSON.stringify(text.slice(0, 200))}`, {
      statusCode: response.status,
    });
  }
  return body["data"];
}

function parseJson(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    return undefined;
  }
}

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

export class Transport {
  readonly baseUrl: string;
  readonly retry: RetryPolicy;
  readonly consistency: ConsistencyToken;
  readonly adoptQueryTokens: boolean;
  readonly #timeoutMs: number;
  readonly #headers: Record<string, string>;
  readonly #fetch: FetchLike;

  constructor(baseUrl: string, options: TransportOptions) {
    this.baseUrl = endpoint(baseUrl);
    this.retry = options.retry;
    this.consistency = new ConsistencyToken(options.consistencyToken ?? null);
    this.adoptQueryTokens = options.adoptQueryTokens ?? false;
    this.#timeoutMs = options.timeoutMs;
    this.#headers = { Accept: ACCEPT, ...(options.apiKey === undefined ? {} : { Authorization: `Bearer ${options.apiKey}` }) };
    Object.assign(this.#headers, options.headers ?? {});
    // Called through a closure: a browser's fetch called as a method of another object throws.
    this.#fetch = options.fetch ?? ((input, init) => globalThis.fetch(input, init));
  }

  /** The operation's `data`; a HakiError when it failed (after the retries, for UNAVAILABLE).
   * It sends the consistency token held, and adopts a mutation's (a write may have committed even
   * when an error follows, so before the errors are read). */
  async execute(query: string, operationName: string | undefined, variables: unknown): Promise<Record<string, unknown>> {
    const body = JSON.stringify({ query, operationName, variables: variables ?? {} });
    const adopt = this.adoptQueryTokens || isMutation(query, operationName);
    const started = performance.now();
    let failed = 0;
    for (;;) {
      const [response, text] = await this.#send("/graphql", {
        method: "POST",
        headers: { ...this.#headers, "Content-Type": "application/json", ...this.consistency.headers() },
        body,
      });
      const json = parseJson(text);
      if (adopt) this.consistency.adopt(response.headers, json);
      try {
        return graphqlAnswer(response, json, text);
      } catch (error) {
        failed += 1;
        const wait = this.#retryWait(error, failed, started);
        if (wait === null) throw error;
        await sleep(wait);
      }
    }
  }

  /** The non-empty lines of a streamed GET. A refusal (which comes before any line) is thrown as a
   * HakiError, after the retries for UNAVAILABLE; a stream cut once lines flow is not retried
   * (its lines were handed out). The timeout counts while waiting for each part of the answer,
   * not for the whole stream: a long export that keeps flowing is not cut. */
  async *streamLines(path: string, params: Record<string, string>): AsyncGenerator<string> {
    const url = `${path}?${new URLSearchParams(params).toString()}`;
    const started = performance.now();
    let failed = 0;
    for (;;) {
      const idle = new IdleTimeout(this.#timeoutMs);
      const init = { method: "GET", headers: { ...this.#headers, Accept: NDJSON, ...this.consistency.headers() } };
      try {
        const response = await this.#fetchOrThrow(url, init, idle.signal);
        if (response.ok) {
          yield* this.#lines(response, idle);
          return;
        }
        idle.reset();
        const text = await this.#readText(response);
        let refusal: unknown;
        try {
          graphqlAnswer(response, parseJson(text), text);
          refusal = new HttpStatusError(`HTTP ${response.status}`, { statusCode: response.status });
        } catch (error) {
          refusal = error;
        }
        failed += 1;
        const wait = this.#retryWait(refusal, failed, started);
        if (wait === null) throw refusal;
        await sleep(wait);
      } finally {
        idle.clear();
      }
    }
  }

  /** Milliseconds before the next try after `error`; null when it is not retried or no try is left. */
  #retryWait(error: unknown, failed: number, started: number): number | null {
    if (!(error instanceof UnavailableError)) return null;
    if (error.data !== null && Object.values(error.data).some((value) => value !== null && value !== undefined)) {
      return null; // a root field answered: the document ran in part, and must not run again
    }
    return this.retry.delay(failed, error.retryAfterMs, performance.now() - started);
  }

  async #send(path: string, init: RequestInit): Promise<[Response, string]> {
    // One timeout for the answer and its body: a body that stalls is no answer either.
    const signal = AbortSignal.timeout(this.#timeoutMs);
    const response = await this.#fetchOrThrow(path, init, signal);
    return [response, await this.#readText(response)];
  }

  async #fetchOrThrow(path: string, init: RequestInit, signal: AbortSignal): Promise<Response> {
    try {
      return await this.#fetch(`${this.baseUrl}${path}`, { ...init, signal });
    } catch (cause) {
      throw new TransportError(`no answer from ${this.baseUrl}: ${describe(cause)}`, { cause });
    }
  }

  async #readText(response: Response): Promise<string> {
    try {
      return await response.text();
    } catch (cause) {
      throw new TransportError(`the answer of ${this.baseUrl} was cut: ${describe(cause)}`, { cause });
    }
  }

  async *#lines(response: Response, idle: IdleTimeout): AsyncGenerator<string> {
    if (response.body === null) {
      idle.reset();
      yield* nonEmptyLines(await this.#readText(response));
      return;
    }
    const reader = response.body.getReader();
    const decoder = new TextDecoder();
    let pending = "";
    let done = false;
    try {
      while (!done) {
        idle.reset();
        let chunk: ReadableStreamReadResult<Uint8Array>;
        try {
          chunk = await reader.read();
        } catch (cause) {
          throw new TransportError(`the stream of ${this.baseUrl} was cut: ${describe(cause)}`, { cause });
        }
        idle.clear(); // the consumer may take its time with the lines handed out
        done = chunk.done;
        pending += done ? decoder.decode() : decoder.decode(chunk.value, { stream: true });
        const parts = pending.split("\n");
        pending = done ? "" : (parts.pop() ?? "");
        yield* nonEmptyLines(parts.join("\n"));
      }
    } finally {
      // A consumer that breaks off early leaves the rest unread: close the connection's stream.
      if (!done) await reader.cancel().catch(() => undefined);
      reader.releaseLock();
    }
  }
}

/** An abort signal that fires when `ms` pass without a reset: a timeout per wait, not per stream. */
class IdleTimeout {
  readonly #controller = new AbortController();
  readonly #ms: number;
  #timer: ReturnType<typeof setTimeout> | undefined;

  constructor(ms: number) {
    this.#ms = ms;
    this.reset();
  }

  get signal(): AbortSignal {
    return this.#controller.signal;
  }

  reset(): void {
    this.clear();
    this.#timer = setTimeout(() => this.#controller.abort(new DOMException("timed out", "TimeoutError")), this.#ms);
  }

  clear(): void {
    if (this.#timer !== undefined) clearTimeout(this.#timer);
    this.#timer = undefined;
  }
}

function nonEmptyLines(text: string): string[] {
  return text.split(/\r?\n/).filter((line) => line.trim() !== "");
}

function describe(error: unknown): string {
  if (error instanceof Error) {
    const cause = error.cause instanceof Error ? ` (${error.cause.message})` : "";
    return `${error.name}: ${error.message}${cause}`;
  }
  return String(error);
}
