"""SQL of exporting and importing a subject's memory (core/memory/portability.py holds the format).

Export reads through server-side cursors in one REPEATABLE READ, READ ONLY transaction: every
row comes from one snapshot (a fact and the fact that superseded it, a conflict set and its
members, as they were at one instant), and only a cursor's prefetch is in memory at once.
Import writes rows in the state the file gives them, in the caller's transaction.
"""

from __future__ import annotations

from collections.abc import AsyncIterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, cast

import asyncpg
import numpy as np
from asyncpg.transaction import Transaction

from .columns import EVENT_COLUMNS, FACT_COLUMNS

# Rows a cursor fetches per round trip.
PREFETCH = 500

# Stable orders, so two exports of the same memory are the same lines (ids aside).
_EVENTS = f"SELECT {EVENT_COLUMNS} FROM events WHERE project_id = $1 AND subject_id = $2 ORDER BY occurred_at, recorded_at, id"
_FACTS = (
    f"SELECT {FACT_COLUMNS}, retract_reason, active_valid_to, reinforced_at FROM facts WHERE project_id = $1 AND subject_id = $2"
    " ORDER BY recorded_at, id"
)
_CONFLICTS = (
    "SELECT c.id, c.status, c.reason, c.created_at, c.resolved_at, c.kept_fact_id,"
    " ARRAY(SELECT m.fact_id FROM conflict_members m"
    "       WHERE m.project_id = c.project_id AND m.conflict_id = c.id ORDER BY m.position) AS fact_ids,"
    " ARRAY(SELECT m.added_at FROM conflict_members m"
    "       WHERE m.project_id = c.project_id AND m.conflict_id = c.id ORDER BY m.position) AS members_added_at"
    " FROM conflict_sets c WHERE c.project_id = $1 AND c.subject_id = $2 ORDER BY c.created_at, c.id"
)


async def begin_snapshot(conn: asyncpg.Connection, idle_timeout_s: float | None) -> Transaction:
    """Start the export's transaction (REPEATABLE READ, READ ONLY) and return it.

    `idle_timeout_s`: the database ends the session if the transaction waits longer than this
    between two fetches (a client that stopped reading must not hold a snapshot, which keeps
    vacuum from cleaning up, for ever). None: no limit (the command line)."""
    tx = conn.transaction(isolation="repeatable_read", readonly=True)
    await tx.start()
    if idle_timeout_s is not None:
        await conn.execute(
            "SELECT set_config('idle_in_transaction_session_timeout', $1, true)", f"{int(idle_timeout_s * 1000)}ms"
        )
    return tx


def events(conn: asyncpg.Connection, project_id: str, subject_id: str) -> AsyncIterable[asyncpg.Record]:
    """The subject's events, oldest occurrence first (in the snapshot's transaction)."""
    return cast(AsyncIterable[asyncpg.Record], conn.cursor(_EVENTS, project_id, subject_id, prefetch=PREFETCH))


def facts(conn: asyncpg.Connection, project_id: str, subject_id: str) -> AsyncIterable[asyncpg.Record]:
    """The subject's facts in every status, oldest recorded first, with their retraction reasons."""
    return cast(AsyncIterable[asyncpg.Record], conn.cursor(_FACTS, project_id, subject_id, prefetch=PREFETCH))


def conflicts(conn: asyncpg.Connection, project_id: str, subject_id: str) -> AsyncIterable[asyncpg.Record]:
    """The subject's conflict sets in every status, oldest first, with their members in order."""
    return cast(AsyncIterable[asyncpg.Record], conn.cursor(_CONFLICTS, project_id, subject_id, prefetch=PREFETCH))


async def holds_memory(conn: asyncpg.Connection, project_id: str, subject_id: str) -> bool:
    """Whether the subject has any event or fact in the project."""
    found: bool = await conn.fetchval(
        "SELECT EXISTS (SELECT 1 FROM events WHERE project_id = $1 AND subject_id = $2)"
        " OR EXISTS (SELECT 1 FROM facts WHERE project_id = $1 AND subject_id = $2)",
        project_id,
        subject_id,
    )
    return found


@dataclass(frozen=True)
class RestoredFact:
    """A fact as an import writes it: in the state the file gives, with new ids."""

    id: str
    subject_id: str
    predicate: str
    value: Any
    value_hash: str
    confidence: float | None
    status: str
    volatility: str
    valid_from: datetime | None
    valid_to: datetime | None
    recorded_at: datetime
    last_reinforced_at: datetime | None
    source_event_ids: list[str]
    superseded_by: str | None
    version: int
    open_conflict_id: str | None
    retract_reason: str | None
    text: str
    ended_at: datetime | None = None
    end_reason: str | None = None
    active_valid_to: datetime | None = None
    reinforced_at: list[datetime] | None = None  # None: only lastReinforcedAt is known


async def insert_facts(
    conn: asyncpg.Connection, project_id: str, facts: list[RestoredFact], embeddings: np.ndarray
) -> None:
    """Insert facts with their status, links and dates as given (the caller counts them on the subject)."""
    await conn.executemany(
        """
        INSERT INTO facts (project_id, id, subject_id, predicate, value, value_hash, confidence, status, volatility,
                           valid_from, valid_to, recorded_at, last_reinforced_at, source_event_ids, superseded_by,
                           version, open_conflict_id, retract_reason, text, embedding, ended_at, end_reason,
                           active_valid_to, reinforced_at)
        VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14::uuid[], $15, $16, $17, $18, $19, $20,
                $21, $22, $23, $24::timestamptz[])
        """,
        [
            (
                project_id,
                f.id,
                f.subject_id,
                f.predicate,
                f.value,
                f.value_hash,
                f.confidence,
                f.status,
                f.volatility,
                f.valid_from,
                f.valid_to,
                f.recorded_at,
                f.last_reinforced_at,
                f.source_event_ids,
                f.superseded_by,
                f.version,
                f.open_conflict_id,
                f.retract_reason,
                f.text,
                v,
                f.ended_at,
                f.end_reason,
                f.active_valid_to,
                f.reinforced_at
                if f.reinforced_at is not None
                else ([f.last_reinforced_at] if f.last_reinforced_at is not None else []),
            )
            for f, v in zip(facts, embeddings)
        ],
    )


async def link_facts(
    conn: asyncpg.Connection,
    project_id: str,
    superseded_by: list[tuple[str, str]],
    open_conflict: list[tuple[str, str]],
) -> None:
    """Set the links of imported facts to records written after them: (fact, superseding fact)
    and (fact, the OPEN conflict set holding it)."""
    if superseded_by:
        await conn.execute(
            "UPDATE facts f SET superseded_by = t.by FROM unnest($2::uuid[], $3::uuid[]) AS t(id, by)"
            " WHERE f.project_id = $1 AND f.id = t.id",
            project_id,
            [f for f, _ in superseded_by],
            [b for _, b in superseded_by],
        )

    if open_conflict:
        await conn.execute(
            "UPDATE facts f SET open_conflict_id = t.c FROM unnest($2::uuid[], $3::uuid[]) AS t(id, c)"
            " WHERE f.project_id = $1 AND f.id = t.id",
            project_id,
            [f for f, _ in open_conflict],
            [c for _, c in open_conflict],
        )


async def date_supersessions(conn: asyncpg.Connection, project_id: str, fact_ids: list[str]) -> None:
    """Date imported superseded facts whose file kept no history (an export made before it was
    kept) as migration 0012 dates a database: the end by the resolution of the set that kept
    the successor, else by the successor's recording; the validTo while ACTIVE by the cut
    the supersession made. Called once the facts and conflict sets are in."""
    resolved = (
        "(SELECT max(c.resolved_at) FROM conflict_sets c"
        " JOIN conflict_members m ON m.project_id = c.project_id AND m.conflict_id = c.id"
        " WHERE c.project_id = f.project_id AND m.fact_id = f.id"
        " AND c.status = 'RESOLVED' AND c.kept_fact_id = f.superseded_by)"
    )
    successor = "(SELECT {} FROM facts s WHERE s.project_id = f.project_id AND s.id = f.superseded_by)"
    await conn.execute(
        f"UPDATE facts f SET ended_at = coalesce({resolved}, {successor.format('s.recorded_at')}),"
        f" active_valid_to = CASE WHEN f.valid_to < coalesce({resolved},"
        f" {successor.format('coalesce(s.valid_from, s.recorded_at)')}) THEN f.valid_to END"
        " WHERE f.project_id = $1 AND f.id = ANY($2::uuid[]) AND f.end_reason = 'SUPERSEDED'",
        project_id,
        fact_ids,
    )


async def insert_conflict(
    conn: asyncpg.Connection,
    project_id: str,
    *,
    conflict_id: str,
    subject_id: str,
    status: str,
    reason: str | None,
    created_at: datetime,
    resolved_at: datetime | None,
    kept_fact_id: str | None,
    fact_ids: list[str],
    added_at: list[datetime | None],
) -> None:
    """A conflict set in the state given, with its members in order (their facts already name
    an OPEN set as `open_conflict_id`). A member's join instant, when not given, is the set's
    opening or the fact's recording, whichever is later (as migration 0012 dates it)."""
    await conn.execute(
        "INSERT INTO conflict_sets (project_id, id, subject_id, status, reason, created_at, resolved_at, kept_fact_id)"
        " VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
        project_id,
        conflict_id,
        subject_id,
        status,
        reason,
        created_at,
        resolved_at,
        kept_fact_id,
    )
    await conn.execute(
        "INSERT INTO conflict_members (project_id, conflict_id, position, fact_id, added_at)"
        " SELECT $1, $2, t.i - 1, t.f, coalesce(t.a, greatest($4::timestamptz,"
        "   (SELECT f.recorded_at FROM facts f WHERE f.project_id = $1 AND f.id = t.f), $4::timestamptz))"
        " FROM unnest($3::uuid[], $5::timestamptz[]) WITH ORDINALITY AS t(f, a, i)",
        project_id,
        conflict_id,
        fact_ids,
        created_at,
        added_at,
    )
