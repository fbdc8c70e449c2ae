"""Database rows to domain values (the db layer returns rows; the core speaks dataclasses)."""

from __future__ import annotations

from typing import Any

import asyncpg

from ..db.traces import REASON_COLUMNS
from .models import (
    ConflictSet,
    ConflictStatus,
    Decision,
    EmptyReason,
    Event,
    Fact,
    FactEndReason,
    FactStatus,
    ItemKind,
    PacketStatus,
    ReasonCode,
    Volatility,
)
from .packet import ContextTrace, DecisionCounts, TraceDecision, TraceTimings


def _str(value: Any) -> str | None:
    return None if value is None else str(value)


def event_from_row(row: asyncpg.Record) -> Event:
    return Event(
        id=str(row["id"]),
        subject_id=row["subject_id"],
        kind=row["kind"],
        payload=row["payload"],
        occurred_at=row["occurred_at"],
        recorded_at=row["recorded_at"],
        excerpt=row["excerpt"],
    )


def fact_from_row(row: asyncpg.Record) -> Fact:
    return Fact(
        id=str(row["id"]),
        subject_id=row["subject_id"],
        predicate=row["predicate"],
        value=row["value"],
        confidence=row["confidence"],
        status=FactStatus(row["status"]),
        volatility=Volatility(row["volatility"]),
        valid_from=row["valid_from"],
        valid_to=row["valid_to"],
        recorded_at=row["recorded_at"],
        last_reinforced_at=row["last_reinforced_at"],
        source_event_ids=tuple(str(i) for i in row["source_event_ids"]),
        superseded_by=_str(row["superseded_by"]),
        version=row["version"],
        open_conflict_id=_str(row["open_conflict_id"]),
        ended_at=row["ended_at"],
        end_reason=FactEndReason(row["end_reason"]) if row["end_reason"] else None,
    )


def conflict_from_row(row: asyncpg.Record) -> ConflictSet:
    return ConflictSet(
        id=str(row["id"]),
        subject_id=row["subject_id"],
        status=ConflictStatus(row["status"]),
        reason=row["reason"],
        fact_ids=tuple(str(i) for i in row["fact_ids"]),
        created_at=row["created_at"],
        resolved_at=row["resolved_at"],
        kept_fact_id=_str(row["kept_fact_id"]),
    )


def facts_or_none(rows: list[Any]) -> list[Fact | None]:
    return [None if r is None else fact_from_row(r) for r in rows]


def events_or_none(rows: list[Any]) -> list[Event | None]:
    return [None if r is None else event_from_row(r) for r in rows]


def conflicts_or_none(rows: list[Any]) -> list[ConflictSet | None]:
    return [None if r is None else conflict_from_row(r) for r in rows]


def conflict_or_none(row: Any) -> ConflictSet | None:
    return None if row is None else conflict_from_row(row)


def trace_from_row(row: asyncpg.Record) -> ContextTrace:
    return ContextTrace(
        id=str(row["id"]),
        subject_id=row["subject_id"],
        query=row["query"],
        budget_tokens=row["budget_tokens"],
        used_tokens=row["used_tokens"],
        status=PacketStatus(row["status"]),
        empty_reason=EmptyReason(row["empty_reason"]) if row["empty_reason"] else None,
        warnings=tuple(row["warnings"]),
        created_at=row["created_at"],
        timings=TraceTimings(row["embed_ms"], row["retrieve_ms"], row["pack_ms"], row["persist_ms"], row["total_ms"]),
        counts=DecisionCounts(row["n_included"], row["n_excluded"], row["n_blocked"]),
        reason_counts={ReasonCode(code): row[col] for code, col in REASON_COLUMNS.items()},
        facts_served=row["facts_served"],
        episodes_served=row["episodes_served"],
        settings_id=row["settings_id"],
        as_of=row["as_of"],
    )


def decision_from_row(row: asyncpg.Record) -> TraceDecision:
    return TraceDecision(
        item_kind=ItemKind(row["item_kind"]),
        item_id=str(row["item_id"]),
        chunk=row["chunk"],
        decision=Decision(row["decision"]),
        reason_code=ReasonCode(row["reason_code"]),
        rank=row["rank"],
        score=row["score"],
        similarity=row["similarity"],
        full_text=row["full_text"],
        recency=row["recency"],
        distance=row["distance"],
        tokens=row["tokens"],
        via_entity=row["via_entity"],
    )
