"""SQL for projects and API keys (only a hash of each key is stored)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import cast

import asyncpg

# What a key created without naming its scopes may do (the column's default, migration 0011).
DEFAULT_SCOPES = ("read", "write")


@dataclass(frozen=True)
class KeyRecord:
    project_id: str
    key_id: str
    prefix: str
    name: str | None
    created_at: datetime
    revoked_at: datetime | None
    scopes: tuple[str, ...] = DEFAULT_SCOPES


@dataclass(frozen=True)
class KeyGrant:
    """What a live key gives its holder: a project, and what it may do there."""

    project_id: str
    key_id: str
    scopes: tuple[str, ...]


async def ensure_project(conn: asyncpg.Connection, project_id: str) -> None:
    await conn.execute("INSERT INTO projects (project_id) VALUES ($1) ON CONFLICT DO NOTHING", project_id)


async def insert_key(
    conn: asyncpg.Connection,
    project_id: str,
    *,
    key_id: str,
    key_hash: bytes,
    prefix: str,
    name: str | None,
    scopes: Sequence[str] = DEFAULT_SCOPES,
) -> None:
    async with conn.transaction():
        await ensure_project(conn, project_id)
        await conn.execute(
            "INSERT INTO api_keys (project_id, key_id, key_hash, prefix, name, scopes)"
            " VALUES ($1, $2, $3, $4, $5, $6::text[])",
            project_id,
            key_id,
            key_hash,
            prefix,
            name,
            list(scopes),
        )


async def list_keys(conn: asyncpg.Connection, project_id: str | None) -> list[KeyRecord]:
    rows = await conn.fetch(
        "SELECT project_id, key_id, prefix, name, created_at, revoked_at, scopes FROM api_keys"
        " WHERE $1::text IS NULL OR project_id = $1 ORDER BY project_id, created_at, key_id",
        project_id,
    )
    return [
        KeyRecord(
            r["project_id"],
            str(r["key_id"]),
            r["prefix"],
            r["name"],
            r["created_at"],
            r["revoked_at"],
            tuple(r["scopes"]),
        )
        for r in rows
    ]


async def revoke_key(conn: asyncpg.Connection, key_id: str) -> bool:
    """Revoke by key id (or by its printed prefix); True when a live key was revoked."""
    result = await conn.execute(
        "UPDATE api_keys SET revoked_at = now() WHERE revoked_at IS NULL AND (key_id::text = $1 OR prefix = $1)",
        key_id,
    )
    return cast(str, result) != "UPDATE 0"


async def grant_for_hash(conn: asyncpg.Connection | asyncpg.Pool, key_hash: bytes) -> KeyGrant | None:
    """The project, id and scopes of the live key with this hash; None when unknown or revoked."""
    row = await conn.fetchrow(
        "SELECT project_id, key_id, scopes FROM api_keys WHERE key_hash = $1 AND revoked_at IS NULL", key_hash
    )
    if row is None:
        return None
    return KeyGrant(row["project_id"], str(row["key_id"]), tuple(row["scopes"]))
