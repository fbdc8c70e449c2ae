"""Whether a database answers: one statement on a fresh connection, bounded in time."""

from __future__ import annotations

import asyncio

import asyncpg


async def ping(dsn: str, timeout_s: float) -> bool:
    """True when a new connection to `dsn` opens and answers `SELECT 1` within `timeout_s`.

    A fresh connection, not the pool's: the pool may hold connections to a server that
    is gone, and checking must never take a connection a request is waiting for.
    """
    try:
        async with asyncio.timeout(timeout_s):
            conn = await asyncpg.connect(dsn, timeout=timeout_s)
            try:
                return bool(await conn.fetchval("SELECT 1") == 1)
            finally:
                await conn.close(timeout=timeout_s)
    except (OSError, TimeoutError, asyncpg.PostgresError, asyncpg.InterfaceError):
        return False


async def connect(dsn: str, timeout_s: float) -> asyncpg.Connection:
    """A connection of its own to `dsn` (a check's, never the pool's), opened within `timeout_s`."""
    return await asyncpg.connect(dsn, timeout=timeout_s)


async def connection_limit(conn: asyncpg.Connection) -> tuple[int, int]:
    """The server's `max_connections`, and how many of them are kept for superusers and roles
    with pg_use_reserved_connections (the rest is what clients such as this server may use)."""
    row = await conn.fetchrow(
        "SELECT current_setting('max_connections')::int AS most,"
        " current_setting('superuser_reserved_connections')::int"
        " + coalesce(current_setting('reserved_connections', true)::int, 0) AS reserved"
    )
    assert row is not None
    return int(row["most"]), int(row["reserved"])
