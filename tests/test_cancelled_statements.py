"""Statements cancelled half way through asyncpg's exchange with the server (db/pool.py,
ServerConnection).

A call cancelled while it sends a batch of rows (a call cut at the end of the shutdown's grace
period, say) ends at once: asyncpg's executemany, cancelled while it waits to send more, would
swallow the cancellation and wait for an answer the server never sends. A call cancelled between
a statement's prepare and its execution (a sibling GraphQL field failed, say) leaves its
connection no armed statement timeout that would fail the next call to use it."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from haki_context.core.serving.runtime import open_pool
from haki_context.settings import Settings


async def test_a_batch_cancelled_while_it_is_sent_ends_at_once_and_its_connection_is_dropped(migrated: str) -> None:
    # 20,000 rows fill the socket's buffer: asyncpg waits to send more when the cancel comes.
    pool = await open_pool(migrated, Settings(statement_timeout_ms=10_000), min_size=1, max_size=1)
    try:
        async with pool.acquire() as conn:
            pid = conn.get_server_pid()
            await conn.execute("CREATE TEMP TABLE sent (n int, text text)")
            batch = asyncio.ensure_future(
                conn.executemany("INSERT INTO sent VALUES ($1, $2)", [(i, "x" * 200) for i in range(20_000)])
            )
            await asyncio.sleep(0.01)
            batch.cancel()
            started = asyncio.get_running_loop().time()
            with pytest.raises(asyncio.CancelledError):
                await batch
            assert asyncio.get_running_loop().time() - started < 1.0  # not the client's 15 s wait
        async with pool.acquire() as conn:  # dropped: another connection answers
            assert conn.get_server_pid() != pid
            assert await conn.fetchval("SELECT 1") == 1
    finally:
        await pool.close()


async def test_a_statement_cancelled_after_its_prepare_leaves_no_timeout_on_its_connection(migrated: str) -> None:
    pool = await open_pool(migrated, Settings(statement_timeout_ms=500), min_size=1, max_size=1)
    try:
        async with pool.acquire() as conn:
            await conn.execute("CREATE TYPE pg_temp.mood AS ENUM ('calm')")
            raw = conn._con  # the pool's proxy forwards no attribute assignment
            introspect = raw._introspect_types

            async def cancelled_while_introspecting(*args: Any, **kwargs: Any) -> Any:
                # The statement's Parse/Describe was answered; the call is cancelled before its Bind.
                task = asyncio.current_task()
                assert task is not None
                task.cancel()
                await asyncio.sleep(0)
                return await introspect(*args, **kwargs)

            raw._introspect_types = cancelled_while_introspecting
            call = asyncio.ensure_future(conn.fetchval("SELECT 'calm'::pg_temp.mood"))
            with pytest.raises(asyncio.CancelledError):
                await call
            del raw._introspect_types
        await asyncio.sleep(1.0)  # past the statement timeout
        async with pool.acquire() as conn:
            assert await conn.fetchval("SELECT 1") == 1
    finally:
        await pool.close()
