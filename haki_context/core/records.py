"""Database rows to domain values (the db layer returns rows; the core speaks dataclasses)."""

from __future__ import annotations

from typing import Any

import asyncpg

from .models import ConflictSet, ConflictStatus, Event, Fact, FactStatus, Volatility


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


def facts_or_none(rows: list[Any]) -> list[Fact | None]:
    return [None if r is None else fact_from_row(r) for r in rows]


def events_or_none(rows: list[Any]) -> list[Event | None]:
    return [None if r is None else event_from_row(r) for r in rows]


def conflicts_or_none(rows: list[Any]) -> list[ConflictSet | None]:
    return [None if r is None else conflict_from_row(r) for r in rows]


def conflict_or_none(row: Any) -> ConflictSet | None:
    return None if row is None else conflict_from_row(row)
