"""GraphQL types of the context packet and its trace."""

from __future__ import annotations

from datetime import datetime

import strawberry
from strawberry.scalars import JSON
from strawberry.types.nodes import FragmentSpread, InlineFragment, SelectedField, Selection

from ..core.models import Decision as CoreDecision
from ..core.models import ItemKind as CoreItemKind
from ..resolvers import context_query, queries
from ..resolvers import replay as replay_resolvers
from .enums import Decision, EmptyReason, ItemKind, PacketStatus, ReasonCode
from .records import EventType, FactType
from .settings_record import SettingsRecordType, settings_type


@strawberry.type(description="How long each step of a context call took, in milliseconds.")
class TraceTimings:
    embed_ms: float = strawberry.field(description="Embedding the query (0 when the query cache hit).")
    retrieve_ms: float = strawberry.field(
        description="Waiting for the retrieval statements (candidates, episodes, multi-hop), "
        "which partly run while the server scores and packs."
    )
    pack_ms: float = strawberry.field(description="Scoring, blocking, gating and packing in the server.")
    persist_ms: float = strawberry.field(
        description="Writing the trace, as the database timed its write statement (commit and round trip not included)."
    )
    total_ms: float = strawberry.field(description="The whole call, trace write included.")


@strawberry.type(description="Decisions of one trace, by kind.")
class DecisionCounts:
    included: int = strawberry.field(description="Items served.")
    excluded: int = strawberry.field(description="Items considered and not served (budget, relevance floor).")
    blocked: int = strawberry.field(description="Facts never eligible (open conflict, volatility expired).")


@strawberry.type(description="One fact or episode considered by a context call, and what was decided.")
class TraceDecision:
    item_kind: ItemKind = strawberry.field(description="FACT or EPISODE.")
    item_id: strawberry.ID = strawberry.field(description="The fact id, or the event id of an episode.")
    chunk: int | None = strawberry.field(description="For an episode: its chunk position; null for facts.")
    decision: Decision = strawberry.field(description="INCLUDED, EXCLUDED or BLOCKED.")
    reason_code: ReasonCode = strawberry.field(description="Why.")
    rank: int | None = strawberry.field(
        description="1-based position in score order within its kind: facts (multi-hop facts numbered after them),"
        " and episodes on their own; null for blocked items. overallRank gives the order across kinds."
    )
    score: float | None = strawberry.field(description="Hybrid score; null for blocked items.")
    similarity: float | None = strawberry.field(description="1 - cosine distance.")
    full_text: float | None = strawberry.field(
        description="Full-text rank: by default the share of the query's idf weight the item holds (0..1)."
    )
    recency: float | None = strawberry.field(description="exp(-age / 30 days) with the defaults.")
    distance: float | None = strawberry.field(description="Cosine distance to the query.")
    tokens: int = strawberry.field(description="Tokens the item takes (or would take) in `rendered`.")
    via_entity: str | None = strawberry.field(description="The shared entity, for MULTI_HOP_EXPANSION.")

    @strawberry.field(
        description="1-based place in the one order the call packed its candidates in, across kinds: under"
        " MERGED packing (the default) the facts and episodes of the main pack in one ranking by score (a fact"
        " first at a tie), then the multi-hop facts; under SECTIONS packing facts, multi-hop facts, then"
        " episodes. Null for blocked items. `rank` counts within a kind; `rendered` lists the served items by"
        " kind (facts, multi-hop facts, episodes), each kind in this order."
    )
    def overall_rank(self) -> int | None:
        # `self` is the core's decision: core/context/served.py's RankedDecision carries the place, which
        # every list of decisions the API returns is given when this field is selected.
        return getattr(self, "overall_rank", None)

    # Plain (sync) resolvers: `decisions` loads every fact and event its selection asks for in
    # one batch first, so these answer from the request's loader at once; an async resolver
    # would cost one awaitable per decision (docs/performance.md).
    @strawberry.field(description="The fact, when itemKind is FACT.")
    def fact(self, info: strawberry.Info) -> FactType | None:
        if self.item_kind is not CoreItemKind.FACT:
            return None
        return queries.fact_loaded(info.context, self.item_id)

    @strawberry.field(description="The event, when itemKind is EPISODE.")
    def event(self, info: strawberry.Info) -> EventType | None:
        if self.item_kind is not CoreItemKind.EPISODE:
            return None
        return queries.event_loaded(info.context, self.item_id)


@strawberry.type(description="The persisted record of one context call: every item considered and why.")
class ContextTrace:
    id: strawberry.ID = strawberry.field(description="The trace id (= the packet's traceId).")
    subject_id: str = strawberry.field(description="The subject asked about.")
    query: str = strawberry.field(description="The query as received (NUL stripped).")
    budget_tokens: int = strawberry.field(description="The token budget of the call.")
    used_tokens: int = strawberry.field(description="Tokens served.")
    status: PacketStatus = strawberry.field(description="OK, or DEGRADED when warnings exist.")
    empty_reason: EmptyReason | None = strawberry.field(
        description="Why nothing was served, when nothing was (see EmptyReason); null otherwise."
    )
    warnings: list[str] = strawberry.field(description="Warnings of the packet.")
    created_at: datetime = strawberry.field(description="The call's instant ('now' of every statement).")
    counts: DecisionCounts = strawberry.field(description="Decisions by kind.")
    as_of: datetime | None = strawberry.field(
        description="The past instant a context(asOf:) call answered for, from the memory as it stood then; null"
        " for a call about its own instant (createdAt)."
    )
    settings_id: strawberry.Private[str | None]

    @strawberry.field(
        description="Every setting that changed the call's decisions, and the embedder; null for a trace made"
        " before settings were recorded."
    )
    async def settings(self, info: strawberry.Info) -> SettingsRecordType | None:
        record = await replay_resolvers.settings_record(info.context, self.settings_id)
        return None if record is None else settings_type(record)

    @strawberry.field(
        description="The packet's `rendered` text as the call served it: rebuilt by the server's own renderer from"
        " the served decisions, the items' stored texts and the settings the call ran under (a trace stores no"
        ' text). "" when nothing was served; null when a served item is no longer stored (its subject'
        " forgotten) or no longer renders to the tokens the call recorded for it."
    )
    async def rendered(self, info: strawberry.Info) -> str | None:
        # `self` is the core's ContextTrace: Strawberry resolves fields by name.
        return await context_query.rendered(info.context, self)  # type: ignore[arg-type]

    @strawberry.field(description="Where the time went.")
    async def timings(self, info: strawberry.Info) -> TraceTimings:
        # `self` is the core's ContextTrace: Strawberry resolves fields by name.
        return await context_query.timings(info.context, self)  # type: ignore[arg-type]

    @strawberry.field(description="One row per fact or episode considered, in rank order; filter by decision.")
    async def decisions(
        self, info: strawberry.Info, decision: Decision | None = None, item_kind: ItemKind | None = None
    ) -> list[TraceDecision]:
        # `self` is the core's ContextTrace: Strawberry resolves fields by name.
        rows = await context_query.decisions(info.context, self)  # type: ignore[arg-type]
        selections = [s for field in info.selected_fields for s in field.selections]
        if _selects(selections, "overallRank"):  # numbered over every decision, before any filter
            rows = await context_query.ranked(info.context, self, rows)  # type: ignore[arg-type]
        if decision is not None:
            rows = [r for r in rows if r.decision is CoreDecision(decision.value)]
        if item_kind is not None:
            rows = [r for r in rows if r.item_kind is CoreItemKind(item_kind.value)]
        await context_query.load_items(
            info.context, rows, facts=_selects(selections, "fact"), events=_selects(selections, "event")
        )
        return rows


def _selects(selections: list[Selection], name: str) -> bool:
    """Whether `name` is selected among `selections`, fragments included."""
    for s in selections:
        if isinstance(s, SelectedField) and s.name == name:
            return True
        if isinstance(s, FragmentSpread | InlineFragment) and _selects(s.selections, name):
            return True
    return False


@strawberry.type(description="A fact served in a packet.")
class PacketFact:
    id: strawberry.ID = strawberry.field(description="The fact id.")
    predicate: str = strawberry.field(description="The fact's predicate.")
    value: JSON = strawberry.field(description="The fact's value.")
    confidence: float | None = strawberry.field(description="The writer's confidence, 0..1.")
    valid_from: datetime | None = strawberry.field(description="Business validity start.")
    valid_to: datetime | None = strawberry.field(description="Business validity end.")
    score: float = strawberry.field(description="The hybrid score it was ranked by.")
    tokens: int = strawberry.field(description="Tokens it takes in `rendered`.")
    reason_code: ReasonCode = strawberry.field(description="TOP_SCORE or MULTI_HOP_EXPANSION.")
    via_entity: str | None = strawberry.field(description="The shared entity, for MULTI_HOP_EXPANSION.")

    @strawberry.field(description="Ids of the events this fact was drawn from.")
    def source_event_ids(self) -> list[strawberry.ID]:
        return list(self.source_event_ids)

    @strawberry.field(description="Source events, loaded in one batch for the whole packet (DataLoader).")
    async def source_events(self, info: strawberry.Info) -> list[EventType]:
        return await queries.events_of(info.context, self.source_event_ids)

    @strawberry.field(description="The whole fact record.")
    async def fact(self, info: strawberry.Info) -> FactType:
        return await queries.fact_of(info.context, self.id)


@strawberry.type(description="A dated episode chunk served in a packet.")
class Episode:
    event_id: strawberry.ID = strawberry.field(description="The event this chunk belongs to.")
    chunk: int = strawberry.field(description="0-based position of this chunk inside its event.")
    kind: str = strawberry.field(description="The event's kind.")
    occurred_at: datetime = strawberry.field(description="When the event happened.")
    excerpt: str = strawberry.field(description="The chunk as served.")
    score: float = strawberry.field(
        description="Its ranking score: the hybrid score, or cosine similarity when episodes are ranked by cosine "
        "(HAKI_EPISODE_RANKING)."
    )
    tokens: int = strawberry.field(description="Tokens it takes in `rendered`.")

    @strawberry.field(description="The whole event record.")
    async def event(self, info: strawberry.Info) -> EventType:
        return await queries.event_of(info.context, self.event_id)


@strawberry.type(description="What to put in the prompt: facts and episodes under a token budget, with the trace.")
class ContextPacket:
    trace_id: strawberry.ID = strawberry.field(
        description=(
            "Id of the persisted trace of this call. Once the call is answered, its trace survives a crash or"
            " restart of this server and a clean stop of the database. By default (HAKI_DURABLE_TRACES=0) traces"
            " commit asynchronously: if the database server itself crashes within a fraction of a second of the"
            " answer, the trace may be lost, whole (never in part), and `trace(id:)` returns null. With"
            " HAKI_DURABLE_TRACES=1 an answered call's trace always survives. Facts and events always commit durably."
        )
    )
    facts: list[PacketFact] = strawberry.field(description="By decreasing score; multi-hop facts after the main pack.")
    episodes: list[Episode] = strawberry.field(description="After the facts, in the same budget.")
    warnings: list[str] = strawberry.field(
        description="e.g. open_conflict: 2 fact(s) hidden pending conflict resolution"
    )
    status: PacketStatus = strawberry.field(description="DEGRADED exactly when warnings is not empty.")
    empty_reason: EmptyReason | None = strawberry.field(
        description=(
            "Why the packet is empty, when it is: NO_RELEVANT_MEMORY only when the recall gate emptied a "
            "non-empty candidate set, NO_MEMORY when the subject held nothing to consider, BUDGET_TOO_SMALL "
            "when items were found but none fits the budget; null when anything was served, or when every "
            "candidate was blocked (the warnings say so)."
        )
    )
    budget_tokens: int = strawberry.field(description="The budget asked for.")
    used_tokens: int = strawberry.field(description="Sum of the tokens of every served fact and episode.")
    rendered: str = strawberry.field(
        description='The packet as one compact text block ready to put in a prompt ("" when nothing is served).'
    )
    trace: ContextTrace = strawberry.field(description="The persisted decision trace of this very call.")


@strawberry.type(description="How many decisions carried one reason code.")
class ReasonCodeCount:
    reason_code: ReasonCode = strawberry.field(description="The reason code.")
    count: int = strawberry.field(description="Decisions with it, over the window.")


@strawberry.type(description="Usage overview of the caller's project over a window.")
class StatsOverview:
    context_calls: int = strawberry.field(description="Context calls (traces) in the window.")
    injection_rate: float = strawberry.field(
        description="Share of context calls that served at least one fact (0 when there were no calls)."
    )
    empty_calls: int = strawberry.field(description="Calls that served nothing at all.")
    no_relevant_memory_calls: int = strawberry.field(
        description="Calls the recall gate emptied (emptyReason NO_RELEVANT_MEMORY)."
    )
    degraded_calls: int = strawberry.field(description="Calls with status DEGRADED.")
    avg_facts_served: float = strawberry.field(description="Mean facts served per call.")
    avg_used_tokens: float = strawberry.field(description="Mean tokens served per call.")
    latency_p50_ms: float | None = strawberry.field(description="Median totalMs; null with no calls.")
    latency_p95_ms: float | None = strawberry.field(description="95th percentile of totalMs; null with no calls.")
    active_facts: int = strawberry.field(description="ACTIVE facts now (not windowed).")
    events: int = strawberry.field(description="Events now (not windowed).")
    open_conflicts: int = strawberry.field(description="OPEN conflict sets now (not windowed).")
    oldest_open_conflict_seconds: float | None = strawberry.field(
        description="Age of the oldest OPEN conflict set; null when none."
    )

    @strawberry.field(
        description="Share of context calls that served at least one fact.", deprecation_reason="Use injectionRate."
    )
    def hit_rate(self) -> float:
        return self.injection_rate

    @strawberry.field(description="Decisions by reason code over the window.")
    def reason_codes(self) -> list[ReasonCodeCount]:
        return [ReasonCodeCount(reason_code=code, count=n) for code, n in self.reason_codes]
