/**
 * `HakiClient`: the server's operations as typed methods, over plain fetch.
 *
 * Each method runs one typed document of src/generated/graphql.ts (generated from
 * schema.graphql and clients/python/queries.graphql) and returns its result's typed field. An option left
 * undefined is not sent, so the server's default applies (`budget` 900, `first` 50 or 20...).
 * Every failure is thrown as a `HakiError` carrying the server's code; UNAVAILABLE is retried
 * first (see RetryPolicy). The methods are the Python client's (clients/python), in camelCase.
 */

import type { DocumentTypeDecoration } from "@graphql-typed-document-node/core";

import { soleOperationName } from "./consistency.js";
import { ExportCheck, type ExportLine } from "./export.js";
import {
  AssertFactDocument,
  ContextDocument,
  EventsDocument,
  FactsDocument,
  ForgetSubjectDocument,
  GetEventDocument,
  GetFactDocument,
  GetTraceDocument,
  RecordEventDocument,
  RecordEventsDocument,
  ReplayDocument,
  RetractFactDocument,
  StatsDocument,
  TracesDocument,
  type AssertMode,
  type Decision,
  type FactStatus,
  type ItemKind,
  type ReplayOverrides,
  type Tokenizer,
  type Volatility,
} from "./generated/graphql.js";
import { RetryPolicy, type RetryOptions } from "./retry.js";
import { type FetchLike, Transport } from "./transport.js";
import type {
  ContextPacket,
  Event,
  EventInputLike,
  EventPage,
  Fact,
  FactAssertion,
  FactInputLike,
  FactPage,
  ForgetResult,
  Instant,
  Replay,
  Stats,
  Trace,
  TracePage,
} from "./types.js";

export const DEFAULT_URL = "http://127.0.0.1:8000";
export const DEFAULT_KIND = "conversation.message";

export interface HakiClientOptions {
  /** Sent as `Authorization: Bearer <key>`; leave it out against a server in development mode. */
  apiKey?: string;
  /** Per HTTP request (for an export, per wait for its next part), in milliseconds. Default 30000. */
  timeoutMs?: number;
  /** The retries on UNAVAILABLE; `{ attempts: 1 }` turns them off. */
  retry?: RetryPolicy | RetryOptions;
  /** Sent on every request, after the client's own. */
  headers?: Record<string, string>;
  /** Replaces the global fetch (tests, proxies, a fetch with its own agent). */
  fetch?: FetchLike;
  /** Start from a token another client held (read-your-writes across processes). */
  consistencyToken?: string;
  /** Also adopt the tokens of queries' responses (a `context` call writes its trace), for an
   * application that reads a trace back right after its call. */
  adoptQueryTokens?: boolean;
}

export interface ContextOptions {
  /** Tokens the packet may use (server default 900). */
  budget?: number;
  /** The packet as the memory stood at this past instant. */
  asOf?: Instant;
  /** Count the budget in this model's tokens (CL100K_BASE: GPT-4; O200K_BASE: GPT-4o). */
  tokenizer?: Tokenizer;
}

export interface ReplayOptions {
  /** Run under other settings: budget, profile, settings, currentSettings. */
  overrides?: ReplayOverrides;
  /** Ask the memory as it stands now instead of at the call's instant. */
  compareWithNow?: boolean;
  /** Write a trace of the replay (none by default). */
  persist?: boolean;
}

export interface TraceOptions {
  decision?: Decision;
  itemKind?: ItemKind;
}

export interface PageOptions {
  /** Items in the page (1..100). */
  first?: number;
  /** The previous page's `pageInfo.endCursor`. */
  after?: string;
}

export interface TracesOptions extends PageOptions {
  subjectId?: string;
  since?: Instant;
}

export interface FactsOptions extends PageOptions {
  status?: FactStatus;
}

export interface RememberOptions {
  /** The events' kind. Default "conversation.message". */
  kind?: string;
  occurredAt?: Instant;
}

export interface AssertFactOptions {
  /** 0..1 */
  confidence?: number;
  validFrom?: Instant;
  validTo?: Instant;
  /** Provenance: events of the same subject. */
  sourceEventIds?: string[];
  volatility?: Volatility;
  /** What happens to an earlier ACTIVE fact of the predicate (default SUPERSEDE). */
  mode?: AssertMode;
}

function iso(instant: Instant | null | undefined): string | null | undefined {
  return instant instanceof Date ? instant.toISOString() : instant;
}

function eventInput(event: EventInputLike) {
  return { ...event, occurredAt: iso(event.occurredAt) };
}

function factInput(fact: FactInputLike) {
  return { ...fact, validFrom: iso(fact.validFrom), validTo: iso(fact.validTo) };
}

/**
 * Client of a haki-context server.
 *
 * ```ts
 * const haki = new HakiClient("http://127.0.0.1:8000", { apiKey: key });
 * const packet = await haki.context("user-42", "Which language for invoices?");
 * ```
 *
 * Read-your-writes: the client keeps the consistency token of its mutations' responses (the
 * highest one) and sends it on every later request, so that a read replica serves the request
 * only once it has replayed those writes.
 */
export class HakiClient {
  readonly #transport: Transport;
  readonly #operationNames = new Map<string, string | undefined>();

  constructor(baseUrl: string = DEFAULT_URL, options: HakiClientOptions = {}) {
    this.#transport = new Transport(baseUrl, {
      apiKey: options.apiKey,
      timeoutMs: options.timeoutMs ?? 30000,
      retry: options.retry instanceof RetryPolicy ? options.retry : new RetryPolicy(options.retry),
      headers: options.headers,
      fetch: options.fetch,
      consistencyToken: options.consistencyToken,
      adoptQueryTokens: options.adoptQueryTokens,
    });
  }

  /** The server's root URL, as requests use it. */
  get baseUrl(): string {
    return this.#transport.baseUrl;
  }

  /** The highest consistency token of this client's writes (like `0/16B3748`), sent on each
   * request; null before any write. Setting it replaces the one held (null forgets it); a
   * malformed one throws TypeError. */
  get consistencyToken(): string | null {
    return this.#transport.consistency.token;
  }

  set consistencyToken(token: string | null) {
    this.#transport.consistency.replace(token);
  }

  /** Hold `token` (another client's, say) when it is higher than the one held; the token held
   * then. TypeError when it is malformed. */
  advanceConsistencyToken(token: string): string {
    return this.#transport.consistency.advance(token);
  }

  /**
   * Any GraphQL document: its `data` (same key, retries, errors and consistency token). Typed
   * when given a typed document (the generated ones, or your own). When the operation it runs
   * (`operationName`'s, or the document's only one) is a mutation, the response's consistency
   * token is adopted, as for the methods that write.
   */
  async execute<TResult = Record<string, unknown>, TVariables = Record<string, unknown>>(
    document: string | DocumentTypeDecoration<TResult, TVariables>,
    variables?: TVariables,
    operationName?: string,
  ): Promise<TResult> {
    return (await this.#transport.execute(String(document), operationName, variables)) as TResult;
  }

  // ------------------------------------------------------------------ reads

  /** The context packet for one subject: what to put in the prompt before a model call. */
  async context(subjectId: string, query: string, options: ContextOptions = {}): Promise<ContextPacket> {
    const { budget, asOf, tokenizer } = options;
    return (await this.#run(ContextDocument, { subjectId, query, budget, asOf: iso(asOf), tokenizer })).context;
  }

  /** A stored context call asked again at its own instant under the settings it ran under (or
   * `overrides`), or with `compareWithNow` against the memory as it stands now; the new packet
   * and the diff against the stored decisions. NotFoundError for a trace unknown, pruned or
   * forgotten. */
  async replay(traceId: string, options: ReplayOptions = {}): Promise<Replay> {
    const { overrides, compareWithNow = false, persist = false } = options;
    return (await this.#run(ReplayDocument, { traceId, with: overrides, compareWithNow, persist })).replay;
  }

  /** A context call's trace with its decisions (filtered when asked); null when unknown. */
  async trace(traceId: string, options: TraceOptions = {}): Promise<Trace | null> {
    return (await this.#run(GetTraceDocument, { id: traceId, ...options })).trace;
  }

  /** Traces newest first, one page (pass `pageInfo.endCursor` as `after` for the next). */
  async traces(options: TracesOptions = {}): Promise<TracePage> {
    return (await this.#run(TracesDocument, { ...options, since: iso(options.since) })).traces;
  }

  /** A fact by id; null when unknown or another project's. */
  async fact(factId: string): Promise<Fact | null> {
    return (await this.#run(GetFactDocument, { id: factId })).fact;
  }

  /** A subject's facts, newest recorded first, one page. */
  async facts(subjectId: string, options: FactsOptions = {}): Promise<FactPage> {
    return (await this.#run(FactsDocument, { subjectId, ...options })).facts;
  }

  /** An event by id; null when unknown or another project's. */
  async event(eventId: string): Promise<Event | null> {
    return (await this.#run(GetEventDocument, { id: eventId })).event;
  }

  /** A subject's events, latest occurrence first, one page. */
  async events(subjectId: string, options: PageOptions = {}): Promise<EventPage> {
    return (await this.#run(EventsDocument, { subjectId, ...options })).events;
  }

  /** The project's usage overview over a window (default: all time). */
  async stats(options: { since?: Instant } = {}): Promise<Stats> {
    return (await this.#run(StatsDocument, { since: iso(options.since) })).stats;
  }

  // ----------------------------------------------------------------- writes

  /** Record one event per payload (e.g. the turns of a conversation), all or nothing. */
  async remember(subjectId: string, payloads: readonly unknown[], options: RememberOptions = {}): Promise<Event[]> {
    const { kind = DEFAULT_KIND, occurredAt } = options;
    return this.recordEvents(payloads.map((payload) => ({ subjectId, kind, payload, occurredAt })));
  }

  /** Record one event. */
  async recordEvent(subjectId: string, kind: string, payload: unknown, options: { occurredAt?: Instant } = {}): Promise<Event> {
    const input = eventInput({ subjectId, kind, payload, occurredAt: options.occurredAt });
    return (await this.#run(RecordEventDocument, { input })).recordEvent;
  }

  /** Record many events (at most 1000) in one call, all or nothing. */
  async recordEvents(events: readonly EventInputLike[]): Promise<Event[]> {
    return (await this.#run(RecordEventsDocument, { inputs: events.map(eventInput) })).recordEvents;
  }

  /** Write a fact; `mode` says what happens to an earlier active fact of the predicate. */
  async assertFact(subjectId: string, predicate: string, value: unknown, options: AssertFactOptions = {}): Promise<FactAssertion> {
    const input = factInput({ subjectId, predicate, value, ...options });
    return (await this.#run(AssertFactDocument, { input })).assertFact;
  }

  /** Write several facts, one call each, in order. Not all or nothing: the first failure is
   * thrown, and the facts before it stay written. */
  async assertFacts(facts: readonly FactInputLike[]): Promise<FactAssertion[]> {
    const assertions: FactAssertion[] = [];
    for (const fact of facts) {
      assertions.push((await this.#run(AssertFactDocument, { input: factInput(fact) })).assertFact);
    }
    return assertions;
  }

  /** Take a fact out of service (RETRACTED); it stays readable. */
  async retractFact(factId: string, options: { reason?: string } = {}): Promise<Fact> {
    return (await this.#run(RetractFactDocument, { id: factId, reason: options.reason })).retractFact;
  }

  // ------------------------------------------------------- forget and export

  /** Delete everything the project holds about the subject, in one transaction (the key needs
   * the `erase` scope); the counts deleted per kind. */
  async forgetSubject(subjectId: string): Promise<ForgetResult> {
    return (await this.#run(ForgetSubjectDocument, { subjectId })).forgetSubject;
  }

  /** The subject's memory as it streams from `GET /export` (the key needs the `read` scope): the
   * header, each event, fact and conflict set, then the `end` line, one object per line
   * (`JSON.stringify` of each, one per line, is a file `haki-context import` reads). Errors come
   * while iterating; a stream cut short throws IncompleteExportError after its last line. */
  async *exportSubject(subjectId: string): AsyncGenerator<ExportLine> {
    const check = new ExportCheck(subjectId);
    for await (const line of this.#transport.streamLines("/export", { subjectId })) {
      yield check.parse(line);
    }
    check.finish();
  }

  async #run<TResult, TVariables>(document: DocumentTypeDecoration<TResult, TVariables>, variables: TVariables): Promise<TResult> {
    const query = String(document);
    let name = this.#operationNames.get(query);
    if (name === undefined && !this.#operationNames.has(query)) {
      name = soleOperationName(query);
      this.#operationNames.set(query, name);
    }
    return (await this.#transport.execute(query, name, variables)) as TResult;
  }
}
