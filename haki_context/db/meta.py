"""SQL for server-wide metadata (the embedding space of the stored vectors)."""

from __future__ import annotations

from typing import Any, cast

import asyncpg

SPACE_KEY = "embedding_space"


async def embedding_space(conn: asyncpg.Connection) -> str | None:
    return cast(str | None, await conn.fetchval("SELECT value FROM server_meta WHERE key = $1", SPACE_KEY))


async def record_embedding_space(conn: asyncpg.Connection, space: str) -> None:
    await conn.execute(
        "INSERT INTO server_meta (key, value) VALUES ($1, $2) ON CONFLICT (key) DO UPDATE SET value = excluded.value",
        SPACE_KEY,
        space,
    )


async def holds_vectors(conn: asyncpg.Connection) -> bool:
    return bool(await conn.fetchval("SELECT EXISTS (SELECT 1 FROM facts) OR EXISTS (SELECT 1 FROM episode_chunks)"))


async def count_rows(conn: asyncpg.Connection, table: str) -> int:
    """The rows of one of the tables holding vectors (`table` is a constant of the caller's)."""
    return int(await conn.fetchval(f"SELECT count(*) FROM {table}"))


async def text_batch(
    conn: asyncpg.Connection, table: str, after: tuple[Any, ...] | None, limit: int
) -> list[asyncpg.Record]:
    """A keyset batch of (key..., text) from `facts` or `episode_chunks`, for re-embedding."""
    if table == "facts":
        return cast(
            list[asyncpg.Record],
            await conn.fetch(
                "SELECT project_id, id, text FROM facts WHERE ($1::text IS NULL OR (project_id, id) > ($1, $2::uuid))"
                " ORDER BY project_id, id LIMIT $3",
                after[0] if after else None,
                after[1] if after else None,
                limit,
            ),
        )
    return cast(
        list[asyncpg.Record],
        await conn.fetch(
            "SELECT project_id, event_id, chunk, text FROM episode_chunks"
            " WHERE ($1::text IS NULL OR (project_id, event_id, chunk) > ($1, $2::uuid, $3::int))"
            " ORDER BY project_id, event_id, chunk LIMIT $4",
            after[0] if after else None,
            after[1] if after else None,
            after[2] if after else None,
            limit,
        ),
    )


# How long a batch of re-embedding waits for a row another transaction holds before it gives way:
# well under PostgreSQL's deadlock_timeout (1 s), so where a batch and a request's write wait on
# each other (a forget deleting rows the batch updates), the batch is the one rolled back.
_YIELD_AFTER = "100ms"


async def update_embeddings(conn: asyncpg.Connection, table: str, rows: list[tuple[Any, ...]]) -> bool:
    """Write new embeddings, rows (key..., vector) in key order, in one transaction of their own.

    False when the batch gave way to another transaction's row locks (waited past _YIELD_AFTER,
    or chosen as a deadlock's victim): nothing of it was written, and it may be tried again."""
    try:
        async with conn.transaction():
            await conn.execute(f"SET LOCAL lock_timeout = '{_YIELD_AFTER}'")
            if table == "facts":
                await conn.executemany("UPDATE facts SET embedding = $3 WHERE project_id = $1 AND id = $2", rows)
            else:
                await conn.executemany(
                    "UPDATE episode_chunks SET embedding = $4 WHERE project_id = $1 AND event_id = $2 AND chunk = $3",
                    rows,
                )
    except (asyncpg.exceptions.LockNotAvailableError, asyncpg.exceptions.DeadlockDetectedError):
        return False
    return True
