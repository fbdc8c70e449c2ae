"""Rows to domain values: the column lists and converters every read shares."""

from __future__ import annotations

from typing import Any

import asyncpg

from ..core.models import ConflictSet, ConflictStatus, Event, Fact, FactStatus, Volatility

EVENT_COLUMNS = "id, subject_id, kind, payload, occurred_at, recorded_at, excerpt"

FACT_COLUMNS = (
    "id, subject_id, predicate, value, confidence, status, volatility, valid_from, valid_to, "
    "recorded_at, last_reinforced_at, source_event_ids, superseded_by, version, open_conflict_id"
)

CONFLICT_COLUMNS = (
    "c.id, c.subject_id, c.status, c.reason, c.created_at, c.resolved_at, c.kept_fact_id, "
    "ARRAY(SELECT m.fact_id FROM conflict_members m"
    " WHERE m.project_id = c.project_id AND m.conflict_id = c.id ORDER BY m.position) AS fact_ids"
)


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
