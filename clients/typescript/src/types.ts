/**
 * Readable names for the results of the client's methods. Each is a type of
 * src/generated/graphql.ts (generated from schema.graphql and clients/python/queries.graphql), never
 * written by hand: a change of the schema or of an operation changes them.
 */

import type {
  AssertFactMutation,
  ContextQuery,
  EventFieldsFragment,
  EventInput,
  EventsQuery,
  FactFieldsFragment,
  FactInput,
  FactsQuery,
  ForgetSubjectMutation,
  GetTraceQuery,
  ReplayQuery,
  StatsQuery,
  TracesQuery,
} from "./generated/graphql.js";

/** What `context` answers: `rendered` goes in the prompt; `traceId` finds the call's trace. */
export type ContextPacket = ContextQuery["context"];
export type PacketFact = ContextPacket["facts"][number];
export type PacketEpisode = ContextPacket["episodes"][number];
/** A stored call asked again: the new packet and the diff against the stored decisions. */
export type Replay = ReplayQuery["replay"];
export type ReplayChange = Replay["diff"]["changes"][number];
/** A context call's trace, with every decision in rank order. */
export type Trace = NonNullable<GetTraceQuery["trace"]>;
export type TraceDecision = Trace["decisions"][number];
export type TracePage = TracesQuery["traces"];
export type Fact = FactFieldsFragment;
export type FactPage = FactsQuery["facts"];
export type Event = EventFieldsFragment;
export type EventPage = EventsQuery["events"];
export type Stats = StatsQuery["stats"];
export type FactAssertion = AssertFactMutation["assertFact"];
export type ForgetResult = ForgetSubjectMutation["forgetSubject"];

/** An instant: a Date, or an ISO 8601 string with its offset. */
export type Instant = Date | string;
/** `T` with the fields `K` (DateTime in the schema) given as an Instant. */
export type WithInstants<T, K extends keyof T> = Omit<T, K> & { [P in K]?: Instant | null };
/** An event to record (`EventInput`, `occurredAt` as an Instant). */
export type EventInputLike = WithInstants<EventInput, "occurredAt">;
/** A fact to write (`FactInput`, `validFrom` and `validTo` as Instants). */
export type FactInputLike = WithInstants<FactInput, "validFrom" | "validTo">;
