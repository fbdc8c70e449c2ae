"""GraphQL input types of the mutations."""

from __future__ import annotations

from datetime import datetime

import strawberry
from strawberry.scalars import JSON

from .enums import AssertMode, Volatility


@strawberry.input(description="One source event to record.")
class EventInput:
    subject_id: str = strawberry.field(description="The subject (1..128 characters).")
    kind: str = strawberry.field(description='e.g. "conversation.message" (1..128 characters).')
    payload: JSON = strawberry.field(description="Any JSON, at most 256 KiB serialized.")
    occurred_at: datetime | None = strawberry.field(
        default=None, description="Default: when it is recorded (in a batch, a microsecond apart in the order given)."
    )


@strawberry.input(description="A fact to write about a subject.")
class FactInput:
    subject_id: str = strawberry.field(description="The subject (1..128 characters).")
    predicate: str = strawberry.field(description="What the fact is about (1..128 characters).")
    value: JSON = strawberry.field(description="The value (any JSON).")
    confidence: float | None = strawberry.field(default=None, description="0..1")
    valid_from: datetime | None = strawberry.field(
        default=None, description="Business validity start; default null (recency then uses recordedAt)."
    )
    valid_to: datetime | None = strawberry.field(
        default=None, description="Business validity end; a fact whose validTo has passed is never served."
    )
    source_event_ids: list[strawberry.ID] | None = strawberry.field(
        default=None, description="Provenance; every id must be an event of the same subject."
    )
    volatility: Volatility | None = strawberry.field(
        default=Volatility.STABLE, description="How fast the fact goes stale."
    )
    mode: AssertMode | None = strawberry.field(
        default=AssertMode.SUPERSEDE, description="What happens to an earlier ACTIVE fact of the same predicate."
    )
