"""The Mutation root. Every field starts by asking for the scope it needs: WRITE, or ERASE to
forget a subject (a key without it gets FORBIDDEN)."""

from __future__ import annotations

import strawberry

from ..core.serving.auth import Scope
from ..resolvers import mutations
from .erasure import ForgetResultType
from .inputs import EventInput, FactInput
from .records import ConflictSetType, EventType, FactAssertionType, FactType


@strawberry.type
class Mutation:
    @strawberry.mutation(
        description="Record one source event. Its embedding and full-text vector are computed at write time."
    )
    async def record_event(self, info: strawberry.Info, input: EventInput) -> EventType:
        info.context.require(Scope.WRITE)
        return await mutations.record_event(info.context, input)

    @strawberry.mutation(
        description="Record many events in one call (at most 1000), embedded in batches. All or nothing."
    )
    async def record_events(self, info: strawberry.Info, inputs: list[EventInput]) -> list[EventType]:
        info.context.require(Scope.WRITE)
        return await mutations.record_events(info.context, inputs)

    @strawberry.mutation(
        description="Write a fact for a subject. See AssertMode for what happens to an earlier fact of the same predicate."
    )
    async def assert_fact(self, info: strawberry.Info, input: FactInput) -> FactAssertionType:
        info.context.require(Scope.WRITE)
        return await mutations.assert_fact(info.context, input)

    @strawberry.mutation(description="Take a fact out of service (status RETRACTED); it stays readable for audit.")
    async def retract_fact(self, info: strawberry.Info, id: strawberry.ID, reason: str | None = None) -> FactType:
        info.context.require(Scope.WRITE)
        return await mutations.retract_fact(info.context, id, reason)

    @strawberry.mutation(
        description="Declare that these facts contradict each other: while OPEN, none of them is served."
    )
    async def open_conflict(
        self, info: strawberry.Info, fact_ids: list[strawberry.ID], reason: str | None = None
    ) -> ConflictSetType:
        info.context.require(Scope.WRITE)
        return await mutations.open_conflict(info.context, fact_ids, reason)

    @strawberry.mutation(description="Keep one fact (ACTIVE) and supersede every other fact of the set.")
    async def resolve_conflict(
        self, info: strawberry.Info, id: strawberry.ID, keep_fact_id: strawberry.ID
    ) -> ConflictSetType:
        info.context.require(Scope.WRITE)
        return await mutations.resolve_conflict(info.context, id, keep_fact_id)

    @strawberry.mutation(description="Close the set without a winner: every fact of it goes back to being served.")
    async def dismiss_conflict(self, info: strawberry.Info, id: strawberry.ID) -> ConflictSetType:
        info.context.require(Scope.WRITE)
        return await mutations.dismiss_conflict(info.context, id)

    @strawberry.mutation(
        description=(
            "Delete everything the project holds about a subject (events, facts, conflict sets, traces, "
            "its search indexes and counters) in one transaction, and write an audit record that holds "
            "no content. Needs a key with the `erase` scope. Writes racing it land wholly before (and are "
            "deleted) or wholly after (and stay)."
        )
    )
    async def forget_subject(self, info: strawberry.Info, subject_id: str) -> ForgetResultType:
        info.context.require(Scope.ERASE)
        return await mutations.forget_subject(info.context, subject_id)
