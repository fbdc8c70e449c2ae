"""SQL for conflict sets and their members. Callers hold the transaction."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import asyncpg

from .columns import CONFLICT_COLUMNS


async def create(
    conn: asyncpg.Connection,
    project_id: str,
    *,
    conflict_id: str,
    subject_id: str,
    fact_ids: list[str],
    reason: str | None,
    now: datetime,
) -> asyncpg.Record:
    """A new OPEN set holding `fact_ids`; the facts are marked as members of an open set."""
    await conn.execute(
        "INSERT INTO conflict_sets (project_id, id, subject_id, status, reason, created_at)"
        " VALUES ($1, $2, $3, 'OPEN', $4, $5)",
        project_id,
        conflict_id,
        subject_id,
        reason,
        now,
    )
    await add_members(conn, project_id, conflict_id, fact_ids, now)
    return await get_one(conn, project_id, conflict_id)


async def add_members(
    conn: asyncpg.Connection, project_id: str, conflict_id: str, fact_ids: list[str], now: datetime
) -> None:
    """Add facts to an OPEN set, dated `now`: a past instant's blocking reads when each joined."""
    await conn.execute(
        """
        INSERT INTO conflict_members (project_id, conflict_id, position, fact_id, added_at)
        SELECT $1, $2, coalesce((SELECT max(position) + 1 FROM conflict_members
                                 WHERE project_id = $1 AND conflict_id = $2), 0) + t.i - 1, t.f, $4
        FROM unnest($3::uuid[]) WITH ORDINALITY AS t(f, i)
        """,
        project_id,
        conflict_id,
        fact_ids,
        now,
    )
    await conn.execute(
        "UPDATE facts SET open_conflict_id = $2 WHERE project_id = $1 AND id = ANY($3::uuid[])",
        project_id,
        conflict_id,
        fact_ids,
    )


async def close(
    conn: asyncpg.Connection,
    project_id: str,
    conflict_id: str,
    *,
    status: str,
    now: datetime,
    kept_fact_id: str | None,
) -> asyncpg.Record:
    """Close an OPEN set (RESOLVED or DISMISSED); its facts stop being members of an open set."""
    await conn.execute(
        "UPDATE conflict_sets SET status = $3, resolved_at = $4, kept_fact_id = $5 WHERE project_id = $1 AND id = $2",
        project_id,
        conflict_id,
        status,
        now,
        kept_fact_id,
    )
    await conn.execute(
        "UPDATE facts SET open_conflict_id = NULL WHERE project_id = $1 AND open_conflict_id = $2",
        project_id,
        conflict_id,
    )
    return await get_one(conn, project_id, conflict_id)


async def lock(conn: asyncpg.Connection, project_id: str, conflict_id: str) -> asyncpg.Record | None:
    """The set, locked for update until the transaction ends; None when unknown."""
    row = await conn.fetchrow(
        f"SELECT {CONFLICT_COLUMNS} FROM conflict_sets c WHERE c.project_id = $1 AND c.id = $2 FOR UPDATE",
        project_id,
        conflict_id,
    )
    return row


async def get_one(conn: asyncpg.Connection, project_id: str, conflict_id: str) -> asyncpg.Record:
    row = await conn.fetchrow(
        f"SELECT {CONFLICT_COLUMNS} FROM conflict_sets c WHERE c.project_id = $1 AND c.id = $2",
        project_id,
        conflict_id,
    )
    return row


async def get_conflicts(conn: asyncpg.Connection, project_id: str, ids: list[str]) -> list[asyncpg.Record | None]:
    rows = await conn.fetch(
        f"SELECT {CONFLICT_COLUMNS} FROM conflict_sets c WHERE c.project_id = $1 AND c.id = ANY($2::uuid[])",
        project_id,
        ids,
    )
    found = {str(r["id"]): r for r in rows}
    return [found.get(i) for i in ids]


async def page_conflicts(
    conn: asyncpg.Connection,
    project_id: str,
    *,
    subject_id: str | None,
    status: str | None,
    limit: int,
    after: tuple[datetime, str] | None,
) -> list[asyncpg.Record]:
    """Conflict sets newest first, optionally of one subject and one status."""
    args: list[Any] = [project_id, subject_id, status, limit]
    keyset = ""
    if after is not None:
        keyset = " AND (c.created_at, c.id) < ($5, $6::uuid)"
        args += [after[0], after[1]]
    rows = await conn.fetch(
        f"SELECT {CONFLICT_COLUMNS} FROM conflict_sets c WHERE c.project_id = $1"
        f" AND ($2::text IS NULL OR c.subject_id = $2) AND ($3::text IS NULL OR c.status = $3){keyset}"
        " ORDER BY c.created_at DESC, c.id DESC LIMIT $4",
        *args,
    )
    return list(rows)
