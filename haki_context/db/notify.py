"""The listening side of the trace channel: one dedicated connection that LISTENs.

Its connection is not the pool's: a LISTEN lasts as long as the session, and a pooled
connection is shared by calls that must not inherit it.
"""

from __future__ import annotations

from collections.abc import Callable

import asyncpg

from .traces import TRACE_CHANNEL

# How the listening connection names itself in pg_stat_activity.
LISTENER_NAME = "haki-context live traces"

# asyncpg's listener signature: (connection, backend pid, channel, payload).
Listener = Callable[[asyncpg.Connection, int, str, str], None]


async def listen(dsn: str, on_trace: Listener, *, timeout_s: float = 10.0) -> asyncpg.Connection:
    """A new connection to `dsn` LISTENing on the trace channel, calling `on_trace` per notification."""
    conn = await asyncpg.connect(dsn, timeout=timeout_s, server_settings={"application_name": LISTENER_NAME})
    try:
        await conn.add_listener(TRACE_CHANNEL, on_trace)
    except BaseException:
        conn.terminate()
        raise
    return conn


async def ping(conn: asyncpg.Connection, timeout_s: float) -> None:
    """Raise unless the listening connection still answers within `timeout_s`."""
    await conn.fetchval("SELECT 1", timeout=timeout_s)
