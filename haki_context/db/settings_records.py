"""SQL of settings records: what context calls ran under, one row per (project, distinct record)."""

from __future__ import annotations

from typing import Any

import asyncpg


async def insert(conn: asyncpg.Connection, project_id: str, record_id: str, body: dict[str, Any]) -> None:
    """Write a record unless the project has it already (its id is its content's hash)."""
    await conn.execute(
        "INSERT INTO settings_records (project_id, id, body) VALUES ($1, $2, $3) ON CONFLICT DO NOTHING",
        project_id,
        record_id,
        body,
    )


async def get(conn: asyncpg.Connection, project_id: str, record_id: str) -> dict[str, Any] | None:
    """A record's body; None when the project has no record of that id."""
    body = await conn.fetchval(
        "SELECT body FROM settings_records WHERE project_id = $1 AND id = $2", project_id, record_id
    )
    return None if body is None else dict(body)
