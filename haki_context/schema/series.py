"""GraphQL types of `statsSeries`: usage figures over time, bucket by bucket."""

from __future__ import annotations

from datetime import datetime

import strawberry

from ..core.history import traces
from ..core.history.traces import TracePhase
from ..core.models import ReasonCode
from .packet import ReasonCodeCount

strawberry.enum(traces.StatsBucket, description="The width of a series' buckets (UTC; weeks start on Monday).")
strawberry.enum(traces.TracePhase, description="A step of a context call its trace times (TraceTimings).")


@strawberry.type(description="Percentiles of one phase's duration over a bucket's context calls.")
class PhaseLatency:
    phase: TracePhase = strawberry.field(description="The phase (TOTAL: the whole call, trace write included).")
    p50_ms: float | None = strawberry.field(description="Median milliseconds; null with no calls.")
    p95_ms: float | None = strawberry.field(description="95th percentile in milliseconds; null with no calls.")


@strawberry.type(description="Usage figures of one bucket of a series, computed as `stats` computes them.")
class StatsBucketRow:
    start: datetime = strawberry.field(description="Where the bucket starts (the window's start for the first).")
    end: datetime = strawberry.field(description="Where the bucket ends, exclusive (the window's end for the last).")
    context_calls: int = strawberry.field(description="Context calls (traces) in the bucket.")
    injected_calls: int = strawberry.field(description="Calls that served at least one fact.")
    empty_calls: int = strawberry.field(description="Calls that served nothing at all (no fact, no episode).")
    no_relevant_memory_calls: int = strawberry.field(
        description="Calls the recall gate emptied (emptyReason NO_RELEVANT_MEMORY)."
    )
    degraded_calls: int = strawberry.field(description="Calls with status DEGRADED.")
    facts_served: int = strawberry.field(description="Facts served over the bucket's calls.")
    used_tokens: int = strawberry.field(description="Tokens served over the bucket's calls.")
    _row: strawberry.Private[traces.StatsBucketRow]

    @strawberry.field(description="injectedCalls / contextCalls; 0 with no calls.")
    def injection_rate(self) -> float:
        return self._row.injection_rate

    @strawberry.field(description="emptyCalls / contextCalls; 0 with no calls.")
    def empty_rate(self) -> float:
        return self._row.empty_rate

    @strawberry.field(description="Decisions BLOCKED (CONFLICT_OPEN and VOLATILITY_EXPIRED) in the bucket.")
    def blocked_decisions(self) -> int:
        return self._row.reason_count(ReasonCode.CONFLICT_OPEN, ReasonCode.VOLATILITY_EXPIRED)

    @strawberry.field(description="Decisions the recall gate excluded (BELOW_RELEVANCE_FLOOR) in the bucket.")
    def gated_decisions(self) -> int:
        return self._row.reason_count(ReasonCode.BELOW_RELEVANCE_FLOOR)

    @strawberry.field(description="Decisions by reason code over the bucket, from per-trace counts.")
    def reason_codes(self) -> list[ReasonCodeCount]:
        return [ReasonCodeCount(reason_code=code, count=n) for code, n in self._row.reason_codes]

    @strawberry.field(description="p50 and p95 of each phase (EMBED, RETRIEVE, PACK, PERSIST, TOTAL), in that order.")
    def latency(self) -> list[PhaseLatency]:
        return [PhaseLatency(phase=p.phase, p50_ms=p.p50_ms, p95_ms=p.p95_ms) for p in self._row.latency]

    @classmethod
    def of(cls, row: traces.StatsBucketRow) -> StatsBucketRow:
        """The GraphQL view of a core bucket row."""
        return cls(
            start=row.start,
            end=row.end,
            context_calls=row.context_calls,
            injected_calls=row.injected_calls,
            empty_calls=row.empty_calls,
            no_relevant_memory_calls=row.no_relevant_memory_calls,
            degraded_calls=row.degraded_calls,
            facts_served=row.facts_served,
            used_tokens=row.used_tokens,
            _row=row,
        )
