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
