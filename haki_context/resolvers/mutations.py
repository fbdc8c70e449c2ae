"""Mutation resolvers: GraphQL inputs (read by attribute) to core commands."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any, Protocol

from ..core.memory import conflicts, erasure, events, facts
from ..core.models import AssertMode, ConflictSet, Event, Fact, FactAssertion, Volatility
from .context import RequestContext


class EventFields(Protocol):
    """What the resolvers read of an event input (the schema's EventInput)."""

    @property
    def subject_id(self) -> str: ...
    @property
    def kind(self) -> str: ...
    @property
    def payload(self) -> Any: ...  # any JSON
    @property
    def occurred_at(self) -> datetime | None: ...


class FactFields(Protocol):
    """What the resolvers read of a fact input (the schema's FactInput)."""

    @property
    def subject_id(self) -> str: ...
    @property
    def predicate(self) -> str: ...
    @property
    def value(self) -> Any: ...  # any JSON
    @property
    def confidence(self) -> float | None: ...
    @property
    def valid_from(self) -> datetime | None: ...
    @property
    def valid_to(self) -> datetime | None: ...
    @property
    def source_event_ids(self) -> Sequence[str] | None: ...
    @property
    def volatility(self) -> Volatility | None: ...
    @property
    def mode(self) -> AssertMode | None: ...


def _event_input(item: EventFields) -> events.EventInput:
    return events.EventInput(
        subject_id=item.subject_id, kind=item.kind, payload=item.payload, occurred_at=item.occurred_at
    )


async def record_event(ctx: RequestContext, item: EventFields) -> Event:
    (event,) = await events.record_events(ctx.rt, ctx.project_id, [_event_input(item)])
    return event


async def record_events(ctx: RequestContext, items: Sequence[EventFields]) -> list[Event]:
    return await events.record_events(ctx.rt, ctx.project_id, [_event_input(i) for i in items])


async def assert_fact(ctx: RequestContext, item: FactFields) -> FactAssertion:
    command = facts.FactInput(
        subject_id=item.subject_id,
        predicate=item.predicate,
        value=item.value,
        confidence=item.confidence,
        valid_from=item.valid_from,
        valid_to=item.valid_to,
        source_event_ids=tuple(item.source_event_ids or ()),
        volatility=item.volatility or Volatility.STABLE,
        mode=item.mode or AssertMode.SUPERSEDE,
    )
    return await facts.assert_fact(ctx.rt, ctx.project_id, command)


async def retract_fact(ctx: RequestContext, id: str, reason: str | None) -> Fact:
    return await facts.retract_fact(ctx.rt, ctx.project_id, id, reason)


async def open_conflict(ctx: RequestContext, fact_ids: Sequence[str], reason: str | None) -> ConflictSet:
    return await conflicts.open_conflict(ctx.rt, ctx.project_id, list(fact_ids), reason)


async def resolve_conflict(ctx: RequestContext, id: str, keep_fact_id: str) -> ConflictSet:
    return await conflicts.resolve_conflict(ctx.rt, ctx.project_id, id, keep_fact_id)


async def dismiss_conflict(ctx: RequestContext, id: str) -> ConflictSet:
    return await conflicts.dismiss_conflict(ctx.rt, ctx.project_id, id)


async def forget_subject(ctx: RequestContext, subject_id: str) -> erasure.ForgetCounts:
    return await erasure.forget_subject(ctx.rt.pool, ctx.caller, subject_id)
