"""Domain values, as frozen dataclasses, and the closed sets as enums."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Generic, TypeVar


class FactStatus(str, enum.Enum):
    ACTIVE = "ACTIVE"
    SUPERSEDED = "SUPERSEDED"
    RETRACTED = "RETRACTED"


class FactEndReason(str, enum.Enum):
    """Why a fact stopped being ACTIVE (its system time ended)."""

    SUPERSEDED = "SUPERSEDED"
    RETRACTED = "RETRACTED"


class Volatility(str, enum.Enum):
    STABLE = "STABLE"
    SLOW = "SLOW"
    VOLATILE = "VOLATILE"
    EPHEMERAL = "EPHEMERAL"


class AssertMode(str, enum.Enum):
    SUPERSEDE = "SUPERSEDE"
    CONTEST = "CONTEST"
    ADD = "ADD"


class AssertOutcome(str, enum.Enum):
    CREATED = "CREATED"
    SUPERSEDED_PREVIOUS = "SUPERSEDED_PREVIOUS"
    REINFORCED = "REINFORCED"
    CONFLICT_OPENED = "CONFLICT_OPENED"


class ConflictStatus(str, enum.Enum):
    OPEN = "OPEN"
    RESOLVED = "RESOLVED"
    DISMISSED = "DISMISSED"


class PacketStatus(str, enum.Enum):
    OK = "OK"
    DEGRADED = "DEGRADED"


class EmptyReason(str, enum.Enum):
    """Why a packet serves nothing (core/context/assembler.py decides which)."""

    NO_RELEVANT_MEMORY = "NO_RELEVANT_MEMORY"  # the recall gate set every candidate aside
    NO_MEMORY = "NO_MEMORY"  # the subject held nothing to consider (at the call's instant)
    BUDGET_TOO_SMALL = "BUDGET_TOO_SMALL"  # items fit for the query were found, none fit the budget


class ItemKind(str, enum.Enum):
    FACT = "FACT"
    EPISODE = "EPISODE"


class Decision(str, enum.Enum):
    INCLUDED = "INCLUDED"
    EXCLUDED = "EXCLUDED"
    BLOCKED = "BLOCKED"


class ReasonCode(str, enum.Enum):
    TOP_SCORE = "TOP_SCORE"
    MULTI_HOP_EXPANSION = "MULTI_HOP_EXPANSION"
    OVER_BUDGET = "OVER_BUDGET"
    BELOW_RELEVANCE_FLOOR = "BELOW_RELEVANCE_FLOOR"
    CONFLICT_OPEN = "CONFLICT_OPEN"
    VOLATILITY_EXPIRED = "VOLATILITY_EXPIRED"
    CITED_BY_FACT = "CITED_BY_FACT"  # excluded: a conversation turn a served fact cites as its source
    SOURCES_SERVED = "SOURCES_SERVED"  # excluded: a fact whose every source turn is served above it
    SAME_TEXT_SERVED = "SAME_TEXT_SERVED"  # excluded: an item whose text is the same as one served above it


@dataclass(frozen=True)
class Event:
    id: str
    subject_id: str
    kind: str
    payload: Any
    occurred_at: datetime
    recorded_at: datetime
    excerpt: str


@dataclass(slots=True)  # not frozen: a debugging selection loads one per decision (see core/packet.py)
class Fact:
    id: str
    subject_id: str
    predicate: str
    value: Any
    confidence: float | None
    status: FactStatus
    volatility: Volatility
    valid_from: datetime | None
    valid_to: datetime | None
    recorded_at: datetime
    last_reinforced_at: datetime | None
    source_event_ids: tuple[str, ...]
    superseded_by: str | None
    version: int
    open_conflict_id: str | None = None
    # System time's end: when the fact stopped being ACTIVE, and why. NULL with a reason set means
    # the instant is unknown (a retraction made before the server kept it).
    ended_at: datetime | None = None
    end_reason: FactEndReason | None = None


@dataclass(frozen=True)
class ConflictSet:
    id: str
    subject_id: str
    status: ConflictStatus
    reason: str | None
    fact_ids: tuple[str, ...]
    created_at: datetime
    resolved_at: datetime | None
    kept_fact_id: str | None


@dataclass(frozen=True)
class FactAssertion:
    fact: Fact
    outcome: AssertOutcome
    superseded: tuple[Fact, ...] = ()
    conflict: ConflictSet | None = None


T = TypeVar("T")


@dataclass(frozen=True)
class Page(Generic[T]):
    """One page of a keyset-paginated list: items with their cursors."""

    items: list[tuple[str, T]] = field(default_factory=list)
    has_next_page: bool = False
