"""GraphQL types of stored records: Event, Fact, ConflictSet, FactAssertion.

Resolvers return the core's frozen dataclasses; these types read their
attributes directly (no copying), and only loader-backed fields are async.
"""

from __future__ import annotations

from datetime import datetime

import strawberry
from strawberry.scalars import JSON

from ..resolvers import queries
from .enums import AssertOutcome, ConflictStatus, FactEndReason, FactStatus, Volatility


@strawberry.type(name="Event", description="A source event: something that happened, as the agent recorded it.")
class EventType:
    id: strawberry.ID = strawberry.field(description="Opaque id (a UUID).")
    subject_id: str = strawberry.field(description="The subject this event belongs to.")
    kind: str = strawberry.field(description='What kind of event, e.g. "conversation.message".')
    payload: JSON = strawberry.field(description="The event's JSON payload as recorded.")
    occurred_at: datetime = strawberry.field(description="When it happened (default: when recorded).")
    recorded_at: datetime = strawberry.field(description="When the server stored it.")
    excerpt: str = strawberry.field(description='"<kind> <compact JSON payload>", at most 300 characters.')


@strawberry.type(name="Fact", description="A durable statement about a subject, with its lifecycle.")
class FactType:
    id: strawberry.ID = strawberry.field(description="Opaque id (a UUID).")
    subject_id: str = strawberry.field(description="The subject the fact is about.")
    predicate: str = strawberry.field(description='What the fact says something about, e.g. "invoice_language".')
    value: JSON = strawberry.field(description="The fact's value (any JSON).")
    confidence: float | None = strawberry.field(description="The writer's confidence, 0..1.")
    status: FactStatus = strawberry.field(description="ACTIVE, SUPERSEDED or RETRACTED.")
    volatility: Volatility = strawberry.field(description="How fast the fact goes stale.")
    valid_from: datetime | None = strawberry.field(description="Business validity start.")
    valid_to: datetime | None = strawberry.field(description="Business validity end; past it the fact is never served.")
    recorded_at: datetime = strawberry.field(description="When the server stored it.")
    last_reinforced_at: datetime | None = strawberry.field(description="Last time an equal value was asserted again.")
    version: int = strawberry.field(description="Bumped by every status change.")
    ended_at: datetime | None = strawberry.field(
        description="When the fact stopped being ACTIVE (system time; null while ACTIVE, or when the instant"
        " is unknown: a retraction made before the server kept it, see endReason)."
    )
    end_reason: FactEndReason | None = strawberry.field(
        description="Why the fact stopped being ACTIVE: SUPERSEDED (see supersededBy) or RETRACTED; null while"
        " ACTIVE. A fact retracted after it was superseded keeps SUPERSEDED: it stopped being served then."
    )

    @strawberry.field(description="Ids of the events this fact was drawn from.")
    def source_event_ids(self) -> list[strawberry.ID]:
        return list(self.source_event_ids)

    @strawberry.field(description="The events this fact was drawn from (batched per request).")
    async def source_events(self, info: strawberry.Info) -> list[EventType]:
        return await queries.events_of(info.context, self.source_event_ids)

    @strawberry.field(description="The fact that replaced this one, when SUPERSEDED.")
    async def superseded_by(self, info: strawberry.Info) -> FactType | None:
        return await queries.fact_of(info.context, self.superseded_by)


@strawberry.type(name="ConflictSet", description="Facts declared contradictory: while OPEN, none of them is served.")
class ConflictSetType:
    id: strawberry.ID = strawberry.field(description="Opaque id (a UUID).")
    subject_id: str = strawberry.field(description="The subject of every fact in the set.")
    status: ConflictStatus = strawberry.field(description="OPEN, RESOLVED or DISMISSED.")
    reason: str | None = strawberry.field(description="Why the set was opened, when given.")
    created_at: datetime = strawberry.field(description="When the set was opened.")
    resolved_at: datetime | None = strawberry.field(description="When the set was resolved or dismissed.")
    # Read by the resolvers below, not fields of the schema.
    fact_ids: strawberry.Private[tuple[str, ...]]
    kept_fact_id: strawberry.Private[str | None]

    @strawberry.field(description="The facts of the set (batched per request).")
    async def facts(self, info: strawberry.Info) -> list[FactType]:
        return await queries.facts_of(info.context, self.fact_ids)

    @strawberry.field(description="The fact kept by resolveConflict.")
    async def kept_fact(self, info: strawberry.Info) -> FactType | None:
        return await queries.fact_of(info.context, self.kept_fact_id)


@strawberry.type(name="FactAssertion", description="What assertFact did.")
class FactAssertionType:
    fact: FactType = strawberry.field(description="The fact written (or reinforced).")
    outcome: AssertOutcome = strawberry.field(
        description="CREATED, SUPERSEDED_PREVIOUS, REINFORCED or CONFLICT_OPENED."
    )
    superseded: list[FactType] = strawberry.field(description="Facts this call moved to SUPERSEDED.")
    conflict: ConflictSetType | None = strawberry.field(description="The conflict set, when CONFLICT_OPENED.")
