"""SQL for facts: inserts, status changes and reads. Callers hold the transaction."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

import asyncpg
import numpy as np

from .columns import FACT_COLUMNS
from .subject_locks import ERASE_LOCK_KEY


@dataclass(frozen=True)
class NewFact:
    id: str
    subject_id: str
    predicate: str
    value: Any
    value_hash: str
    confidence: float | None
    volatility: str
    valid_from: datetime | None
    valid_to: datetime | None
    recorded_at: datetime
    source_event_ids: list[str]
    text: str


async def lock_subject(conn: asyncpg.Connection, project_id: str, subject_id: str) -> None:
    """Serialise fact and conflict writes of one (project, subject) until the transaction ends.

    Per subject, not per predicate: a conflict set can hold facts of several
    predicates, and closing it touches all of them, so two writes on different
    predicates (or a write and resolveConflict) could take the same rows in
    opposite orders and deadlock. Every such write takes this one lock first,
    before any row lock, so they queue instead. The subject's erase lock is shared first, in the
    same round trip (db/subject_locks.py): a forget of the subject waits for the write, or the
    write for the forget.
    """
    await conn.execute(
        f"SELECT pg_advisory_xact_lock_shared({ERASE_LOCK_KEY}),"
        " pg_advisory_xact_lock(hashtextextended($1 || chr(31) || $2, 0))",
        project_id,
        subject_id,
    )


async def active_for_predicate(
    conn: asyncpg.Connection, project_id: str, subject_id: str, predicate: str
) -> list[tuple[asyncpg.Record, str]]:
    """ACTIVE facts of (subject, predicate) with their value hashes, locked for update."""
    rows = await conn.fetch(
        f"SELECT {FACT_COLUMNS}, value_hash FROM facts"
        " WHERE project_id = $1 AND subject_id = $2 AND predicate = $3 AND status = 'ACTIVE'"
        " ORDER BY recorded_at, id FOR UPDATE",
        project_id,
        subject_id,
        predicate,
    )
    return [(r, r["value_hash"]) for r in rows]


async def insert_fact(
    conn: asyncpg.Connection, project_id: str, fact: NewFact, embedding: np.ndarray
) -> asyncpg.Record:
    row = await conn.fetchrow(
        f"""
        INSERT INTO facts (project_id, id, subject_id, predicate, value, value_hash, confidence, status,
                           volatility, valid_from, valid_to, recorded_at, source_event_ids, text, embedding)
        VALUES ($1, $2, $3, $4, $5, $6, $7, 'ACTIVE', $8, $9, $10, $11, $12::uuid[], $13, $14)
        RETURNING {FACT_COLUMNS}
        """,
        project_id,
        fact.id,
        fact.subject_id,
        fact.predicate,
        fact.value,
        fact.value_hash,
        fact.confidence,
        fact.volatility,
        fact.valid_from,
        fact.valid_to,
        fact.recorded_at,
        fact.source_event_ids,
        fact.text,
        embedding,
    )
    return row


async def reinforce(
    conn: asyncpg.Connection, project_id: str, fact_id: str, now: datetime, source_event_ids: list[str]
) -> asyncpg.Record:
    """Move lastReinforcedAt (and list the reinforcement: a past instant's horizon reads the
    latest one before it) and add provenance; no new version."""
    row = await conn.fetchrow(
        f"""
        UPDATE facts SET last_reinforced_at = $3, reinforced_at = reinforced_at || $3::timestamptz,
            source_event_ids = ARRAY(SELECT DISTINCT x FROM unnest(source_event_ids || $4::uuid[]) AS x ORDER BY x)
        WHERE project_id = $1 AND id = $2
        RETURNING {FACT_COLUMNS}
        """,
        project_id,
        fact_id,
        now,
        source_event_ids,
    )
    return row


async def supersede(
    conn: asyncpg.Connection,
    project_id: str,
    fact_ids: list[str],
    *,
    by_id: str,
    valid_to: datetime,
    ended_at: datetime,
) -> list[asyncpg.Record]:
    """Move ACTIVE facts to SUPERSEDED (validTo set unless already earlier, supersededBy set, version bumped).

    `valid_to` ends the fact in the world (valid time); `ended_at` is when the server stopped
    serving it (system time), recorded with the reason SUPERSEDED. The validTo it had while
    ACTIVE is kept (active_valid_to): a past instant's validity reads that one.
    """
    rows = await conn.fetch(
        f"""
        UPDATE facts SET status = 'SUPERSEDED', superseded_by = $3,
            valid_to = CASE WHEN valid_to IS NOT NULL AND valid_to < $4 THEN valid_to ELSE $4 END,
            version = version + 1, open_conflict_id = NULL, ended_at = $5, end_reason = 'SUPERSEDED',
            active_valid_to = valid_to
        WHERE project_id = $1 AND id = ANY($2::uuid[])
        RETURNING {FACT_COLUMNS}
        """,
        project_id,
        fact_ids,
        by_id,
        valid_to,
        ended_at,
    )
    order = {fid: i for i, fid in enumerate(fact_ids)}
    return sorted(rows, key=lambda r: order[str(r["id"])])


async def retract(
    conn: asyncpg.Connection, project_id: str, fact_id: str, reason: str | None, now: datetime
) -> asyncpg.Record:
    """Move a fact to RETRACTED. An ACTIVE fact ends now; a SUPERSEDED one keeps the end of its
    supersession, since that is when it stopped being served."""
    row = await conn.fetchrow(
        f"""
        UPDATE facts SET status = 'RETRACTED', retract_reason = $3, version = version + 1,
            ended_at = CASE WHEN status = 'ACTIVE' THEN $4 ELSE ended_at END,
            end_reason = CASE WHEN status = 'ACTIVE' THEN 'RETRACTED' ELSE end_reason END
        WHERE project_id = $1 AND id = $2
        RETURNING {FACT_COLUMNS}
        """,
        project_id,
        fact_id,
        reason,
        now,
    )
    return row


async def get_facts(
    conn: asyncpg.Connection, project_id: str, ids: list[str], *, for_update: bool = False
) -> list[asyncpg.Record | None]:
    """Facts by id, in the order asked; None where unknown (or of another project)."""
    lock = " ORDER BY id FOR UPDATE" if for_update else ""
    rows = await conn.fetch(
        f"SELECT {FACT_COLUMNS} FROM facts WHERE project_id = $1 AND id = ANY($2::uuid[]){lock}",
        project_id,
        ids,
    )
    found = {str(r["id"]): r for r in rows}
    return [found.get(i) for i in ids]


async def page_facts(
    conn: asyncpg.Connection,
    project_id: str,
    subject_id: str,
    *,
    status: str | None,
    limit: int,
    after: tuple[datetime, str] | None,
) -> list[asyncpg.Record]:
    """Facts of a subject, newest recorded first, keyset after `after`."""
    args: list[Any] = [project_id, subject_id, status, limit]
    keyset = ""
    if after is not None:
        keyset = " AND (recorded_at, id) < ($5, $6::uuid)"
        args += [after[0], after[1]]
    rows = await conn.fetch(
        f"SELECT {FACT_COLUMNS} FROM facts WHERE project_id = $1 AND subject_id = $2"
        f" AND ($3::text IS NULL OR status = $3){keyset}"
        " ORDER BY recorded_at DESC, id DESC LIMIT $4",
        *args,
    )
    return list(rows)
