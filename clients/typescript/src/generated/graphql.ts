/** Internal type. DO NOT USE DIRECTLY. */
type Exact<T extends { [key: string]: unknown }> = { [K in keyof T]: T[K] };
/** Internal type. DO NOT USE DIRECTLY. */
export type Incremental<T> = T | { [P in keyof T]?: P extends ' $fragmentName' | '__typename' ? T[P] : never };
import type { DocumentTypeDecoration } from '@graphql-typed-document-node/core';
export type AssertMode =
  | 'ADD'
  | 'CONTEST'
  | 'SUPERSEDE';

export type AssertOutcome =
  | 'CONFLICT_OPENED'
  | 'CREATED'
  | 'REINFORCED'
  | 'SUPERSEDED_PREVIOUS';

export type ConflictStatus =
  | 'DISMISSED'
  | 'OPEN'
  | 'RESOLVED';

export type Decision =
  | 'BLOCKED'
  | 'EXCLUDED'
  | 'INCLUDED';

/** Why a packet serves nothing. NO_RELEVANT_MEMORY: the recall gate set every candidate aside (the subject holds memory, none of it about the query). NO_MEMORY: the subject held nothing to consider at the call's instant. BUDGET_TOO_SMALL: items fit for the query were found but none fits the budget (the trace's OVER_BUDGET decisions give their tokens). */
export type EmptyReason =
  | 'BUDGET_TOO_SMALL'
  | 'NO_MEMORY'
  | 'NO_RELEVANT_MEMORY';

/** One source event to record. */
export type EventInput = {
  /** e.g. "conversation.message" (1..128 characters). */
  kind: string;
  /** Default: when it is recorded (in a batch, a microsecond apart in the order given). */
  occurredAt?: string | null | undefined;
  /** Any JSON, at most 256 KiB serialized. */
  payload: unknown;
  /** The subject (1..128 characters). */
  subjectId: string;
};

/** A fact to write about a subject. */
export type FactInput = {
  /** 0..1 */
  confidence?: number | null | undefined;
  /** What happens to an earlier ACTIVE fact of the same predicate. */
  mode?: AssertMode | null | undefined;
  /** What the fact is about (1..128 characters). */
  predicate: string;
  /** Provenance; every id must be an event of the same subject. */
  sourceEventIds?: Array<string | number> | null | undefined;
  /** The subject (1..128 characters). */
  subjectId: string;
  /** Business validity start; default null (recency then uses recordedAt). */
  validFrom?: string | null | undefined;
  /** Business validity end; a fact whose validTo has passed is never served. */
  validTo?: string | null | undefined;
  /** The value (any JSON). */
  value: unknown;
  /** How fast the fact goes stale. */
  volatility?: Volatility | null | undefined;
};

export type FactStatus =
  | 'ACTIVE'
  | 'RETRACTED'
  | 'SUPERSEDED';

export type ItemKind =
  | 'EPISODE'
  | 'FACT';

export type PacketStatus =
  | 'DEGRADED'
  | 'OK';

/** A named set of ranking settings (HAKI_RANKING_PROFILE). */
export type RankingProfile =
  /** The plain cosine-and-full-text ranking without cues: episodes by cosine alone (8, as compact JSON), facts by cosine and cover-density full text, facts packed first, no speaker, date or neighbour cue, cited turns served. */
  | 'CLASSIC'
  /** The shipped ranking. */
  | 'DEFAULT'
  | 'SEED';

export type ReasonCode =
  | 'BELOW_RELEVANCE_FLOOR'
  | 'CITED_BY_FACT'
  | 'CONFLICT_OPEN'
  | 'MULTI_HOP_EXPANSION'
  | 'OVER_BUDGET'
  | 'SAME_TEXT_SERVED'
  | 'SOURCES_SERVED'
  | 'TOP_SCORE'
  | 'VOLATILITY_EXPIRED';

/** How an item's decision differs in a replay. */
export type ReplayChangeKind =
  | 'ADDED'
  | 'DECISION_CHANGED'
  | 'MOVED'
  | 'REMOVED'
  | 'SCORE_CHANGED';

/** What a replay changes of the stored call; nothing by default. */
export type ReplayOverrides = {
  /** Another token budget (default: the call's). */
  budget?: number | null | undefined;
  /** Run under the server's current settings instead of the recorded ones. */
  currentSettings?: boolean;
  /** Another ranking profile, its values applied over the recorded settings. */
  profile?: RankingProfile | null | undefined;
  /** Decision settings by name and value, applied last, e.g. {"weight_recency": 0.3} (see SettingsRecord.values for the names). */
  settings?: unknown;
};

/** What a packet's budget and usedTokens count. ESTIMATE: a served line's characters / 4 (the default, HAKI_TOKENIZER; real tokenizers count 11-33% more on conversation text). CL100K_BASE: OpenAI's GPT-4 and GPT-3.5 encoding. O200K_BASE: OpenAI's GPT-4o encoding and later models'. Under either encoding the packet's rendered text counts at most usedTokens in it. */
export type Tokenizer =
  | 'CL100K_BASE'
  | 'ESTIMATE'
  | 'O200K_BASE';

export type Volatility =
  | 'EPHEMERAL'
  | 'SLOW'
  | 'STABLE'
  | 'VOLATILE';

export type EventFieldsFragment = { id: string, subjectId: string, kind: string, payload: unknown, occurredAt: string, recordedAt: string, excerpt: string };

export type FactFieldsFragment = { id: string, subjectId: string, predicate: string, value: unknown, confidence: number | null, status: FactStatus, volatility: Volatility, validFrom: string | null, validTo: string | null, recordedAt: string, lastReinforcedAt: string | null, version: number, sourceEventIds: Array<string>, supersededBy: { id: string } | null };

export type PageInfoFieldsFragment = { hasNextPage: boolean, endCursor: string | null };

export type TraceSummaryFieldsFragment = { id: string, subjectId: string, query: string, budgetTokens: number, usedTokens: number, status: PacketStatus, emptyReason: EmptyReason | null, warnings: Array<string>, createdAt: string, counts: { included: number, excluded: number, blocked: number }, timings: { embedMs: number, retrieveMs: number, packMs: number, persistMs: number, totalMs: number } };

export type ContextQueryVariables = Exact<{
  subjectId: string;
  query: string;
  budget?: number | null | undefined;
  asOf?: string | null | undefined;
  tokenizer?: Tokenizer | null | undefined;
}>;


export type ContextQuery = { context: { traceId: string, rendered: string, status: PacketStatus, emptyReason: EmptyReason | null, warnings: Array<string>, budgetTokens: number, usedTokens: number, facts: Array<{ id: string, predicate: string, value: unknown, confidence: number | null, validFrom: string | null, validTo: string | null, score: number, tokens: number, reasonCode: ReasonCode, viaEntity: string | null, sourceEventIds: Array<string> }>, episodes: Array<{ eventId: string, chunk: number, kind: string, occurredAt: string, excerpt: string, score: number, tokens: number }> } };

export type ReplayDecisionFieldsFragment = { decision: Decision, reasonCode: ReasonCode, rank: number | null, score: number | null, fact: { predicate: string, value: unknown } | null };

export type ReplayQueryVariables = Exact<{
  traceId: string | number;
  with?: ReplayOverrides | null | undefined;
  persist?: boolean;
  compareWithNow?: boolean;
}>;


export type ReplayQuery = { replay: { asOf: string, comparedWithNow: boolean, persisted: boolean, notes: Array<string>, settings: { id: string, rankingProfile: string, values: unknown, embedderName: string, embedderSpace: string }, packet: { traceId: string, rendered: string, status: PacketStatus, usedTokens: number, budgetTokens: number, facts: Array<{ id: string, predicate: string, value: unknown, reasonCode: ReasonCode }>, episodes: Array<{ eventId: string, chunk: number, excerpt: string }> }, original: { id: string, subjectId: string, query: string, createdAt: string, asOf: string | null }, diff: { identical: boolean, added: number, removed: number, moved: number, scoreChanged: number, decisionChanged: number, changes: Array<{ itemKind: ItemKind, itemId: string, chunk: number | null, kinds: Array<ReplayChangeKind>, rankDelta: number | null, componentsChanged: Array<string>, why: string | null, before: { decision: Decision, reasonCode: ReasonCode, rank: number | null, score: number | null, fact: { predicate: string, value: unknown } | null } | null, after: { decision: Decision, reasonCode: ReasonCode, rank: number | null, score: number | null, fact: { predicate: string, value: unknown } | null } | null }> } } };

export type GetTraceQueryVariables = Exact<{
  id: string | number;
  decision?: Decision | null | undefined;
  itemKind?: ItemKind | null | undefined;
}>;


export type GetTraceQuery = { trace: { id: string, subjectId: string, query: string, budgetTokens: number, usedTokens: number, status: PacketStatus, emptyReason: EmptyReason | null, warnings: Array<string>, createdAt: string, decisions: Array<{ itemKind: ItemKind, itemId: string, chunk: number | null, decision: Decision, reasonCode: ReasonCode, rank: number | null, score: number | null, similarity: number | null, fullText: number | null, recency: number | null, distance: number | null, tokens: number, viaEntity: string | null, fact: { predicate: string, value: unknown } | null, event: { kind: string, excerpt: string } | null }>, counts: { included: number, excluded: number, blocked: number }, timings: { embedMs: number, retrieveMs: number, packMs: number, persistMs: number, totalMs: number } } | null };

export type TracesQueryVariables = Exact<{
  subjectId?: string | null | undefined;
  since?: string | null | undefined;
  first?: number | null | undefined;
  after?: string | null | undefined;
}>;


export type TracesQuery = { traces: { edges: Array<{ cursor: string, node: { id: string, subjectId: string, query: string, budgetTokens: number, usedTokens: number, status: PacketStatus, emptyReason: EmptyReason | null, warnings: Array<string>, createdAt: string, counts: { included: number, excluded: number, blocked: number }, timings: { embedMs: number, retrieveMs: number, packMs: number, persistMs: number, totalMs: number } } }>, pageInfo: { hasNextPage: boolean, endCursor: string | null } } };

export type GetFactQueryVariables = Exact<{
  id: string | number;
}>;


export type GetFactQuery = { fact: { id: string, subjectId: string, predicate: string, value: unknown, confidence: number | null, status: FactStatus, volatility: Volatility, validFrom: string | null, validTo: string | null, recordedAt: string, lastReinforcedAt: string | null, version: number, sourceEventIds: Array<string>, supersededBy: { id: string } | null } | null };

export type FactsQueryVariables = Exact<{
  subjectId: string;
  status?: FactStatus | null | undefined;
  first?: number | null | undefined;
  after?: string | null | undefined;
}>;


export type FactsQuery = { facts: { edges: Array<{ cursor: string, node: { id: string, subjectId: string, predicate: string, value: unknown, confidence: number | null, status: FactStatus, volatility: Volatility, validFrom: string | null, validTo: string | null, recordedAt: string, lastReinforcedAt: string | null, version: number, sourceEventIds: Array<string>, supersededBy: { id: string } | null } }>, pageInfo: { hasNextPage: boolean, endCursor: string | null } } };

export type GetEventQueryVariables = Exact<{
  id: string | number;
}>;


export type GetEventQuery = { event: { id: string, subjectId: string, kind: string, payload: unknown, occurredAt: string, recordedAt: string, excerpt: string } | null };

export type EventsQueryVariables = Exact<{
  subjectId: string;
  first?: number | null | undefined;
  after?: string | null | undefined;
}>;


export type EventsQuery = { events: { edges: Array<{ cursor: string, node: { id: string, subjectId: string, kind: string, payload: unknown, occurredAt: string, recordedAt: string, excerpt: string } }>, pageInfo: { hasNextPage: boolean, endCursor: string | null } } };

export type StatsQueryVariables = Exact<{
  since?: string | null | undefined;
}>;


export type StatsQuery = { stats: { contextCalls: number, injectionRate: number, emptyCalls: number, noRelevantMemoryCalls: number, degradedCalls: number, avgFactsServed: number, avgUsedTokens: number, latencyP50Ms: number | null, latencyP95Ms: number | null, activeFacts: number, events: number, openConflicts: number, oldestOpenConflictSeconds: number | null, reasonCodes: Array<{ reasonCode: ReasonCode, count: number }> } };

export type RecordEventMutationVariables = Exact<{
  input: EventInput;
}>;


export type RecordEventMutation = { recordEvent: { id: string, subjectId: string, kind: string, payload: unknown, occurredAt: string, recordedAt: string, excerpt: string } };

export type RecordEventsMutationVariables = Exact<{
  inputs: Array<EventInput> | EventInput;
}>;


export type RecordEventsMutation = { recordEvents: Array<{ id: string, subjectId: string, kind: string, payload: unknown, occurredAt: string, recordedAt: string, excerpt: string }> };

export type AssertFactMutationVariables = Exact<{
  input: FactInput;
}>;


export type AssertFactMutation = { assertFact: { outcome: AssertOutcome, fact: { id: string, subjectId: string, predicate: string, value: unknown, confidence: number | null, status: FactStatus, volatility: Volatility, validFrom: string | null, validTo: string | null, recordedAt: string, lastReinforcedAt: string | null, version: number, sourceEventIds: Array<string>, supersededBy: { id: string } | null }, superseded: Array<{ id: string, subjectId: string, predicate: string, value: unknown, confidence: number | null, status: FactStatus, volatility: Volatility, validFrom: string | null, validTo: string | null, recordedAt: string, lastReinforcedAt: string | null, version: number, sourceEventIds: Array<string>, supersededBy: { id: string } | null }>, conflict: { id: string, status: ConflictStatus, reason: string | null, createdAt: string } | null } };

export type RetractFactMutationVariables = Exact<{
  id: string | number;
  reason?: string | null | undefined;
}>;


export type RetractFactMutation = { retractFact: { id: string, subjectId: string, predicate: string, value: unknown, confidence: number | null, status: FactStatus, volatility: Volatility, validFrom: string | null, validTo: string | null, recordedAt: string, lastReinforcedAt: string | null, version: number, sourceEventIds: Array<string>, supersededBy: { id: string } | null } };

export type ForgetSubjectMutationVariables = Exact<{
  subjectId: string;
}>;


export type ForgetSubjectMutation = { forgetSubject: { erasureId: string, subjectId: string, forgottenAt: string, events: number, episodeChunks: number, facts: number, conflictSets: number, conflictMembers: number, traces: number, traceDecisions: number, scopeLexemes: number, scopeIndexes: number } };

export class TypedDocumentString<TResult, TVariables>
  extends String
  implements DocumentTypeDecoration<TResult, TVariables>
{
  __apiType?: NonNullable<DocumentTypeDecoration<TResult, TVariables>['__apiType']>;
  private value: string;
  public __meta__?: Record<string, any> | undefined;

  constructor(value: string, __meta__?: Record<string, any> | undefined) {
    super(value);
    this.value = value;
    this.__meta__ = __meta__;
  }

  override toString(): string & DocumentTypeDecoration<TResult, TVariables> {
    return this.value;
  }
}
export const EventFieldsFragmentDoc = new TypedDocumentString(`
    fragment EventFields on Event {
  id
  subjectId
  kind
  payload
  occurredAt
  recordedAt
  excerpt
}
    `, {"fragmentName":"EventFields"}) as unknown as TypedDocumentString<EventFieldsFragment, unknown>;
export const FactFieldsFragmentDoc = new TypedDocumentString(`
    fragment FactFields on Fact {
  id
  subjectId
  predicate
  value
  confidence
  status
  volatility
  validFrom
  validTo
  recordedAt
  lastReinforcedAt
  version
  sourceEventIds
  supersededBy {
    id
  }
}
    `, {"fragmentName":"FactFields"}) as unknown as TypedDocumentString<FactFieldsFragment, unknown>;
export const PageInfoFieldsFragmentDoc = new TypedDocumentString(`
    fragment PageInfoFields on PageInfo {
  hasNextPage
  endCursor
}
    `, {"fragmentName":"PageInfoFields"}) as unknown as TypedDocumentString<PageInfoFieldsFragment, unknown>;
export const TraceSummaryFieldsFragmentDoc = new TypedDocumentString(`
    fragment TraceSummaryFields on ContextTrace {
  id
  subjectId
  query
  budgetTokens
  usedTokens
  status
  emptyReason
  warnings
  createdAt
  counts {
    included
    excluded
    blocked
  }
  timings {
    embedMs
    retrieveMs
    packMs
    persistMs
    totalMs
  }
}
    `, {"fragmentName":"TraceSummaryFields"}) as unknown as TypedDocumentString<TraceSummaryFieldsFragment, unknown>;
export const ReplayDecisionFieldsFragmentDoc = new TypedDocumentString(`
    fragment ReplayDecisionFields on TraceDecision {
  decision
  reasonCode
  rank
  score
  fact {
    predicate
    value
  }
}
    `, {"fragmentName":"ReplayDecisionFields"}) as unknown as TypedDocumentString<ReplayDecisionFieldsFragment, unknown>;
export const ContextDocument = new TypedDocumentString(`
    query Context($subjectId: String!, $query: String!, $budget: Int, $asOf: DateTime, $tokenizer: Tokenizer) {
  context(
    subjectId: $subjectId
    query: $query
    budget: $budget
    asOf: $asOf
    tokenizer: $tokenizer
  ) {
    traceId
    rendered
    status
    emptyReason
    warnings
    budgetTokens
    usedTokens
    facts {
      id
      predicate
      value
      confidence
      validFrom
      validTo
      score
      tokens
      reasonCode
      viaEntity
      sourceEventIds
    }
    episodes {
      eventId
      chunk
      kind
      occurredAt
      excerpt
      score
      tokens
    }
  }
}
    `) as unknown as TypedDocumentString<ContextQuery, ContextQueryVariables>;
export const ReplayDocument = new TypedDocumentString(`
    query Replay($traceId: ID!, $with: ReplayOverrides, $persist: Boolean! = false, $compareWithNow: Boolean! = false) {
  replay(
    traceId: $traceId
    with: $with
    persist: $persist
    compareWithNow: $compareWithNow
  ) {
    asOf
    comparedWithNow
    persisted
    notes
    settings {
      id
      rankingProfile
      values
      embedderName
      embedderSpace
    }
    packet {
      traceId
      rendered
      status
      usedTokens
      budgetTokens
      facts {
        id
        predicate
        value
        reasonCode
      }
      episodes {
        eventId
        chunk
        excerpt
      }
    }
    original {
      id
      subjectId
      query
      createdAt
      asOf
    }
    diff {
      identical
      added
      removed
      moved
      scoreChanged
      decisionChanged
      changes {
        itemKind
        itemId
        chunk
        kinds
        rankDelta
        componentsChanged
        why
        before {
          ...ReplayDecisionFields
        }
        after {
          ...ReplayDecisionFields
        }
      }
    }
  }
}
    fragment ReplayDecisionFields on TraceDecision {
  decision
  reasonCode
  rank
  score
  fact {
    predicate
    value
  }
}`) as unknown as TypedDocumentString<ReplayQuery, ReplayQueryVariables>;
export const GetTraceDocument = new TypedDocumentString(`
    query GetTrace($id: ID!, $decision: Decision, $itemKind: ItemKind) {
  trace(id: $id) {
    ...TraceSummaryFields
    decisions(decision: $decision, itemKind: $itemKind) {
      itemKind
      itemId
      chunk
      decision
      reasonCode
      rank
      score
      similarity
      fullText
      recency
      distance
      tokens
      viaEntity
      fact {
        predicate
        value
      }
      event {
        kind
        excerpt
      }
    }
  }
}
    fragment TraceSummaryFields on ContextTrace {
  id
  subjectId
  query
  budgetTokens
  usedTokens
  status
  emptyReason
  warnings
  createdAt
  counts {
    included
    excluded
    blocked
  }
  timings {
    embedMs
    retrieveMs
    packMs
    persistMs
    totalMs
  }
}`) as unknown as TypedDocumentString<GetTraceQuery, GetTraceQueryVariables>;
export const TracesDocument = new TypedDocumentString(`
    query Traces($subjectId: String, $since: DateTime, $first: Int, $after: String) {
  traces(subjectId: $subjectId, since: $since, first: $first, after: $after) {
    edges {
      cursor
      node {
        ...TraceSummaryFields
      }
    }
    pageInfo {
      ...PageInfoFields
    }
  }
}
    fragment PageInfoFields on PageInfo {
  hasNextPage
  endCursor
}
fragment TraceSummaryFields on ContextTrace {
  id
  subjectId
  query
  budgetTokens
  usedTokens
  status
  emptyReason
  warnings
  createdAt
  counts {
    included
    excluded
    blocked
  }
  timings {
    embedMs
    retrieveMs
    packMs
    persistMs
    totalMs
  }
}`) as unknown as TypedDocumentString<TracesQuery, TracesQueryVariables>;
export const GetFactDocument = new TypedDocumentString(`
    query GetFact($id: ID!) {
  fact(id: $id) {
    ...FactFields
  }
}
    fragment FactFields on Fact {
  id
  subjectId
  predicate
  value
  confidence
  status
  volatility
  validFrom
  validTo
  recordedAt
  lastReinforcedAt
  version
  sourceEventIds
  supersededBy {
    id
  }
}`) as unknown as TypedDocumentString<GetFactQuery, GetFactQueryVariables>;
export const FactsDocument = new TypedDocumentString(`
    query Facts($subjectId: String!, $status: FactStatus, $first: Int, $after: String) {
  facts(subjectId: $subjectId, status: $status, first: $first, after: $after) {
    edges {
      cursor
      node {
        ...FactFields
      }
    }
    pageInfo {
      ...PageInfoFields
    }
  }
}
    fragment FactFields on Fact {
  id
  subjectId
  predicate
  value
  confidence
  status
  volatility
  validFrom
  validTo
  recordedAt
  lastReinforcedAt
  version
  sourceEventIds
  supersededBy {
    id
  }
}
fragment PageInfoFields on PageInfo {
  hasNextPage
  endCursor
}`) as unknown as TypedDocumentString<FactsQuery, FactsQueryVariables>;
export const GetEventDocument = new TypedDocumentString(`
    query GetEvent($id: ID!) {
  event(id: $id) {
    ...EventFields
  }
}
    fragment EventFields on Event {
  id
  subjectId
  kind
  payload
  occurredAt
  recordedAt
  excerpt
}`) as unknown as TypedDocumentString<GetEventQuery, GetEventQueryVariables>;
export const EventsDocument = new TypedDocumentString(`
    query Events($subjectId: String!, $first: Int, $after: String) {
  events(subjectId: $subjectId, first: $first, after: $after) {
    edges {
      cursor
      node {
        ...EventFields
      }
    }
    pageInfo {
      ...PageInfoFields
    }
  }
}
    fragment EventFields on Event {
  id
  subjectId
  kind
  payload
  occurredAt
  recordedAt
  excerpt
}
fragment PageInfoFields on PageInfo {
  hasNextPage
  endCursor
}`) as unknown as TypedDocumentString<EventsQuery, EventsQueryVariables>;
export const StatsDocument = new TypedDocumentString(`
    query Stats($since: DateTime) {
  stats(since: $since) {
    contextCalls
    injectionRate
    emptyCalls
    noRelevantMemoryCalls
    degradedCalls
    avgFactsServed
    avgUsedTokens
    latencyP50Ms
    latencyP95Ms
    activeFacts
    events
    openConflicts
    oldestOpenConflictSeconds
    reasonCodes {
      reasonCode
      count
    }
  }
}
    `) as unknown as TypedDocumentString<StatsQuery, StatsQueryVariables>;
export const RecordEventDocument = new TypedDocumentString(`
    mutation RecordEvent($input: EventInput!) {
  recordEvent(input: $input) {
    ...EventFields
  }
}
    fragment EventFields on Event {
  id
  subjectId
  kind
  payload
  occurredAt
  recordedAt
  excerpt
}`) as unknown as TypedDocumentString<RecordEventMutation, RecordEventMutationVariables>;
export const RecordEventsDocument = new TypedDocumentString(`
    mutation RecordEvents($inputs: [EventInput!]!) {
  recordEvents(inputs: $inputs) {
    ...EventFields
  }
}
    fragment EventFields on Event {
  id
  subjectId
  kind
  payload
  occurredAt
  recordedAt
  excerpt
}`) as unknown as TypedDocumentString<RecordEventsMutation, RecordEventsMutationVariables>;
export const AssertFactDocument = new TypedDocumentString(`
    mutation AssertFact($input: FactInput!) {
  assertFact(input: $input) {
    outcome
    fact {
      ...FactFields
    }
    superseded {
      ...FactFields
    }
    conflict {
      id
      status
      reason
      createdAt
    }
  }
}
    fragment FactFields on Fact {
  id
  subjectId
  predicate
  value
  confidence
  status
  volatility
  validFrom
  validTo
  recordedAt
  lastReinforcedAt
  version
  sourceEventIds
  supersededBy {
    id
  }
}`) as unknown as TypedDocumentString<AssertFactMutation, AssertFactMutationVariables>;
export const RetractFactDocument = new TypedDocumentString(`
    mutation RetractFact($id: ID!, $reason: String) {
  retractFact(id: $id, reason: $reason) {
    ...FactFields
  }
}
    fragment FactFields on Fact {
  id
  subjectId
  predicate
  value
  confidence
  status
  volatility
  validFrom
  validTo
  recordedAt
  lastReinforcedAt
  version
  sourceEventIds
  supersededBy {
    id
  }
}`) as unknown as TypedDocumentString<RetractFactMutation, RetractFactMutationVariables>;
export const ForgetSubjectDocument = new TypedDocumentString(`
    mutation ForgetSubject($subjectId: String!) {
  forgetSubject(subjectId: $subjectId) {
    erasureId
    subjectId
    forgottenAt
    events
    episodeChunks
    facts
    conflictSets
    conflictMembers
    traces
    traceDecisions
    scopeLexemes
    scopeIndexes
  }
}
    `) as unknown as TypedDocumentString<ForgetSubjectMutation, ForgetSubjectMutationVariables>;