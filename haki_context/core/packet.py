"""What `context` returns: the packet, its items and its trace.

The values made once per item (hundreds per call) are slotted dataclasses, not
frozen ones: a frozen dataclass's `__init__` sets each field through
`object.__setattr__`, several times slower, and hundreds of items a call make that
count (docs/performance.md). Nothing mutates them.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from .models import Decision, EmptyReason, ItemKind, PacketStatus, ReasonCode


@dataclass(slots=True)
class PacketFact:
    id: str
    predicate: str
    value: Any
    confidence: float | None
    valid_from: datetime | None
    valid_to: datetime | None
    source_event_ids: tuple[str, ...]
    score: float
    tokens: int
    reason_code: ReasonCode
    via_entity: str | None


@dataclass(slots=True)
class Episode:
    event_id: str
    chunk: int
    kind: str
    occurred_at: datetime
    excerpt: str
    score: float
    tokens: int


@dataclass(slots=True)
class TraceDecision:
    """One item considered by one call, and what was decided about it."""

    item_kind: ItemKind
    item_id: str
    chunk: int | None
    decision: Decision
    reason_code: ReasonCode
    rank: int | None
    score: float | None
    similarity: float | None
    full_text: float | None
    recency: float | None
    distance: float | None
    tokens: int
    via_entity: str | None = None


@dataclass(frozen=True)
class TraceTimings:
    embed_ms: float
    retrieve_ms: float
    pack_ms: float
    persist_ms: float
    total_ms: float


@dataclass(frozen=True)
class DecisionCounts:
    included: int
    excluded: int
    blocked: int


@dataclass(frozen=True)
class ContextTrace:
    """A persisted trace. `decisions` is None when not loaded (lists of traces load them on demand)."""

    id: str
    subject_id: str
    query: str
    budget_tokens: int
    used_tokens: int
    status: PacketStatus
    empty_reason: EmptyReason | None
    warnings: tuple[str, ...]
    created_at: datetime
    timings: TraceTimings
    counts: DecisionCounts
    reason_counts: dict[ReasonCode, int]
    facts_served: int
    episodes_served: int
    decisions: tuple[TraceDecision, ...] | None = None
    # The settings record it ran under (core/context/settings_records.py); None before they were kept.
    settings_id: str | None = None
    as_of: datetime | None = None  # the past instant a `context(asOf:)` call answered for


@dataclass(frozen=True)
class ContextPacket:
    trace_id: str
    facts: tuple[PacketFact, ...]
    episodes: tuple[Episode, ...]
    warnings: tuple[str, ...]
    status: PacketStatus
    empty_reason: EmptyReason | None
    budget_tokens: int
    used_tokens: int
    rendered: str
    trace: ContextTrace
