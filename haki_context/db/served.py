"""SQL for what a stored trace served: the rows its served items' lines are rebuilt from."""

from __future__ import annotations

from typing import cast

import asyncpg

# Both kinds in one statement, so one round trip: each fact's text and the dates its line is
# dated by, each episode chunk's text, excerpt and date, by primary key. An item missing from
# the answer was deleted since the call (its subject forgotten).
_SERVED_ITEMS = """
SELECT 'FACT' AS item_kind, f.id AS item_id, NULL::int AS chunk, f.text, f.valid_from, f.recorded_at,
       NULL::timestamptz AS occurred_at, NULL::text AS excerpt, NULL::bool AS is_turn
FROM facts f
WHERE f.project_id = $1 AND f.id = ANY($2::uuid[])
UNION ALL
SELECT 'EPISODE', c.event_id, c.chunk, c.text, NULL, NULL, c.occurred_at, c.excerpt, c.is_turn
FROM unnest($3::uuid[], $4::int[]) AS k(event_id, chunk)
JOIN episode_chunks c ON c.project_id = $1 AND c.event_id = k.event_id AND c.chunk = k.chunk
"""


async def served_items(
    conn: asyncpg.Connection, project_id: str, fact_ids: list[str], chunks: list[tuple[str, int]]
) -> list[asyncpg.Record]:
    """The stored rows of some facts (by id) and episode chunks (by event id and chunk) of a
    project, in no particular order; one row per item found (`item_kind` FACT or EPISODE)."""
    rows = await conn.fetch(
        _SERVED_ITEMS,
        project_id,
        fact_ids,
        [event_id for event_id, _ in chunks],
        [chunk for _, chunk in chunks],
    )
    return cast(list[asyncpg.Record], rows)
