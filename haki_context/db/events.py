"""SQL for events and their episode chunks."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

import asyncpg
import numpy as np
import orjson

from .columns import EVENT_COLUMNS
from .scope_indexes import ScopeRows, add_rows


@dataclass(frozen=True)
class NewEvent:
    id: str
    subject_id: str
    kind: str
    payload: Any
    occurred_at: datetime
    recorded_at: datetime
    excerpt: str


@dataclass(frozen=True)
class NewChunk:
    event_id: str
    position: int
    subject_id: str
    kind: str
    occurred_at: datetime
    text: str
    excerpt: str
    is_turn: bool = False
    speaker: str | None = None


async def insert_events(conn: asyncpg.Connection, project_id: str, events: list[NewEvent]) -> None:
    """Insert event rows (the caller holds the transaction that also writes their chunks)."""
    await conn.execute(
        """
        INSERT INTO events (project_id, id, subject_id, kind, payload, occurred_at, recorded_at, excerpt)
        SELECT $1, t.id, t.subject_id, t.kind, t.payload::jsonb, t.occurred_at, t.recorded_at, t.excerpt
        FROM unnest($2::uuid[], $3::text[], $4::text[], $5::text[],
                    $6::timestamptz[], $7::timestamptz[], $8::text[])
             AS t(id, subject_id, kind, payload, occurred_at, recorded_at, excerpt)
        """,
        project_id,
        [e.id for e in events],
        [e.subject_id for e in events],
        [e.kind for e in events],
        # Payloads travel as JSON text: asyncpg's array encoder would read a list
        # payload as another array dimension (a 1-element list lost its brackets).
        [orjson.dumps(e.payload).decode() for e in events],
        [e.occurred_at for e in events],
        [e.recorded_at for e in events],
        [e.excerpt for e in events],
    )


async def insert_chunks(
    conn: asyncpg.Connection, project_id: str, chunks: list[NewChunk], embeddings: np.ndarray
) -> None:
    """Insert episode chunks with their embeddings."""
    # executemany (pipelined) because asyncpg has no codec for vector[] arrays.
    await conn.executemany(
        """
        INSERT INTO episode_chunks
            (project_id, event_id, chunk, subject_id, kind, occurred_at, text, excerpt, is_turn, speaker, embedding)
        VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)
        """,
        [
            (
                project_id,
                c.event_id,
                c.position,
                c.subject_id,
                c.kind,
                c.occurred_at,
                c.text,
                c.excerpt,
                c.is_turn,
                c.speaker,
                v,
            )
            for c, v in zip(chunks, embeddings)
        ],
    )


async def add_chunk_counts(conn: asyncpg.Connection, project_id: str, chunks: list[NewChunk]) -> list[ScopeRows]:
    """Keep `subjects.chunk_rows` (which chooses the search plan) in step with the inserts."""
    counts: dict[str, int] = {}
    for c in chunks:
        counts[c.subject_id] = counts.get(c.subject_id, 0) + 1
    return await add_rows(conn, project_id, "episode_chunks", counts)


async def get_events(conn: asyncpg.Connection, project_id: str, ids: list[str]) -> list[asyncpg.Record | None]:
    """Events by id, in the order asked; None where unknown (or of another project)."""
    rows = await conn.fetch(
        f"SELECT {EVENT_COLUMNS} FROM events WHERE project_id = $1 AND id = ANY($2::uuid[])",
        project_id,
        ids,
    )
    found = {str(r["id"]): r for r in rows}
    return [found.get(i) for i in ids]


async def event_subjects(conn: asyncpg.Connection, project_id: str, ids: list[str]) -> dict[str, str]:
    """id -> subject of the events that exist in the project."""
    rows = await conn.fetch(
        "SELECT id, subject_id FROM events WHERE project_id = $1 AND id = ANY($2::uuid[])", project_id, ids
    )
    return {str(r["id"]): r["subject_id"] for r in rows}


async def page_events(
    conn: asyncpg.Connection,
    project_id: str,
    subject_id: str,
    limit: int,
    after: tuple[datetime, str] | None,
) -> list[asyncpg.Record]:
    """Events of a subject, newest occurrence first, keyset after `after`; fetches `limit` rows."""
    if after is None:
        rows = await conn.fetch(
            f"SELECT {EVENT_COLUMNS} FROM events WHERE project_id = $1 AND subject_id = $2"
            " ORDER BY occurred_at DESC, id DESC LIMIT $3",
            project_id,
            subject_id,
            limit,
        )
    else:
        rows = await conn.fetch(
            f"SELECT {EVENT_COLUMNS} FROM events WHERE project_id = $1 AND subject_id = $2"
            " AND (occurred_at, id) < ($3, $4::uuid)"
            " ORDER BY occurred_at DESC, id DESC LIMIT $5",
            project_id,
            subject_id,
            after[0],
            after[1],
            limit,
        )
    return list(rows)
