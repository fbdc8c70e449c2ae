"""The Query root. Every field starts by asking for the READ scope (a key without it gets
FORBIDDEN); `context` needs no more, though it writes its own trace."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

import strawberry

from ..core.history.traces import StatsBucket
from ..core.limits import DEFAULT_BUDGET
from ..core.serving.auth import Scope
from ..resolvers import context_query, queries, series
from .enums import ConflictStatus, FactStatus, Tokenizer
from .observe import ObserveContext
from .packet import ContextPacket, ContextTrace, StatsOverview
from .pagination import Connection, to_connection
from .records import ConflictSetType, EventType, FactType
from .replay import ReplayType, replay_field
from .series import StatsBucketRow


@strawberry.type
class Query:
    @strawberry.field(
        description="Assemble the context packet for one subject: the hot path of every agent call.",
        extensions=[ObserveContext()],
    )
    async def context(
        self,
        info: strawberry.Info,
        subject_id: str,
        query: str,
        budget: int | None = DEFAULT_BUDGET,
        *,
        as_of: Annotated[
            datetime | None,
            strawberry.argument(
                description="Answer as the memory stood at this past instant: facts recorded by then and not yet"
                " ended then, validity and volatility horizons evaluated then, conflict sets open then, events"
                " recorded by then (exact scans). INVALID_INPUT in the future or before the project existed."
            ),
        ] = None,
        tokenizer: Annotated[
            Tokenizer | None,
            strawberry.argument(
                description="Count the budget and usedTokens in this tokenizer (default: the server's,"
                " HAKI_TOKENIZER); the trace's settings record names it, and a replay counts in it again."
            ),
        ] = None,
    ) -> ContextPacket:
        info.context.require(Scope.READ)
        return await context_query.context(
            info.context, subject_id, query, budget, tuple(info.path.as_list()), as_of=as_of, tokenizer=tokenizer
        )

    @strawberry.field(
        description="A persisted trace of an earlier context call, by id; null when unknown or outside the caller's project."
    )
    async def trace(self, info: strawberry.Info, id: strawberry.ID) -> ContextTrace | None:
        info.context.require(Scope.READ)
        return await context_query.trace(info.context, id)

    @strawberry.field(
        description="Traces newest first, for dashboards. Relay-style cursor pagination; first is at most 100."
    )
    async def traces(
        self,
        info: strawberry.Info,
        subject_id: str | None = None,
        since: datetime | None = None,
        first: int | None = 20,
        after: str | None = None,
    ) -> Connection[ContextTrace]:
        info.context.require(Scope.READ)
        return to_connection(await context_query.traces_page(info.context, subject_id, since, first, after))

    @strawberry.field(description="A fact by id; null when unknown, malformed or outside the caller's project.")
    async def fact(self, info: strawberry.Info, id: strawberry.ID) -> FactType | None:
        info.context.require(Scope.READ)
        return await queries.fact(info.context, id)

    @strawberry.field(description="Facts of a subject, newest recorded first. `first` is 1..100.")
    async def facts(
        self,
        info: strawberry.Info,
        subject_id: str,
        status: FactStatus | None = None,
        first: int | None = 50,
        after: str | None = None,
    ) -> Connection[FactType]:
        info.context.require(Scope.READ)
        return to_connection(await queries.facts(info.context, subject_id, status, first, after))

    @strawberry.field(description="An event by id; null when unknown, malformed or outside the caller's project.")
    async def event(self, info: strawberry.Info, id: strawberry.ID) -> EventType | None:
        info.context.require(Scope.READ)
        return await queries.event(info.context, id)

    @strawberry.field(description="Events of a subject, latest occurrence first. `first` is 1..100.")
    async def events(
        self, info: strawberry.Info, subject_id: str, first: int | None = 50, after: str | None = None
    ) -> Connection[EventType]:
        info.context.require(Scope.READ)
        return to_connection(await queries.events(info.context, subject_id, first, after))

    @strawberry.field(description="Conflict sets, newest first, optionally of one subject and one status.")
    async def conflicts(
        self,
        info: strawberry.Info,
        subject_id: str | None = None,
        status: ConflictStatus | None = None,
        first: int | None = 50,
        after: str | None = None,
    ) -> Connection[ConflictSetType]:
        info.context.require(Scope.READ)
        return to_connection(await queries.conflicts(info.context, subject_id, status, first, after))

    replay: ReplayType = strawberry.field(
        resolver=replay_field,
        description="Run a stored context call again at its own instant (or, with compareWithNow, against the"
        " memory as it stands now), under the settings it ran under or `with` overrides, by the exact plan; the"
        " new packet and the diff against the stored decisions. A trace is written only with persist: true.",
    )

    @strawberry.field(description="Usage overview of the caller's project over a window (default: all time).")
    async def stats(self, info: strawberry.Info, since: datetime | None = None) -> StatsOverview:
        info.context.require(Scope.READ)
        return await context_query.stats(info.context, since)

    @strawberry.field(
        description="Usage figures of the caller's project over [since, until) (until: now), bucket by bucket, "
        "for plots: every bucket of the window in order, those without calls included; at most 1000 buckets."
    )
    async def stats_series(
        self, info: strawberry.Info, since: datetime, bucket: StatsBucket, until: datetime | None = None
    ) -> list[StatsBucketRow]:
        info.context.require(Scope.READ)
        rows = await series.stats_series(info.context, since, until, bucket)
        return [StatsBucketRow.of(row) for row in rows]
