"""The app's own start-up, run as uvicorn runs it (the lifespan), against the test database."""

from __future__ import annotations

import asyncio
import gc

import asyncpg
import httpx
from conftest import make_settings

from haki_context.app import GC_YOUNG_THRESHOLD, create_app, open_runtime
from haki_context.settings import Settings


async def test_startup_objects_are_left_out_of_garbage_collection(migrated: str) -> None:
    before_threshold = gc.get_threshold()
    app = create_app(make_settings(migrated, scope_index_interval_s=0))
    try:
        async with app.router.lifespan_context(app):
            assert gc.get_freeze_count() > 10_000  # the schema, the pool, the embedder...
            assert gc.get_threshold()[0] == GC_YOUNG_THRESHOLD
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
                assert (await client.get("/readyz")).json()["status"] == "ready"
    finally:
        gc.unfreeze()  # the rest of the suite runs with the interpreter's defaults
        gc.set_threshold(*before_threshold)


async def _hold(pool: asyncpg.Pool, n: int) -> None:
    """Hold `n` connections at once, then give them back (the pool opens what it lacks)."""
    conns = [await pool.acquire() for _ in range(n)]
    for c in conns:
        await pool.release(c)


async def test_idle_connections_stay_open_by_default(migrated: str) -> None:
    # asyncpg's own default closed every connection idle for 300 s beyond the pool's minimum:
    # the next call opened a new one and planned its statements anew (+17.6 ms, benchmarks/idle.py).
    assert Settings().pool_idle_lifetime_s == 0
    runtime, stack = await open_runtime(make_settings(migrated, scope_index_interval_s=0))
    async with stack:
        await _hold(runtime.pool, 3)
        await asyncio.sleep(1.0)
        assert runtime.pool.get_size() == 3


async def test_connections_idle_past_the_setting_are_closed_down_to_the_minimum(migrated: str) -> None:
    settings = make_settings(migrated, scope_index_interval_s=0, pool_idle_lifetime_s=0.3, pool_min_size=1)
    runtime, stack = await open_runtime(settings)
    async with stack:
        await _hold(runtime.pool, 3)
        assert runtime.pool.get_size() == 3
        await asyncio.sleep(1.0)
        assert runtime.pool.get_size() == 1


async def test_start_plans_the_retrieval_statements_without_running_them(migrated: str) -> None:
    runtime, stack = await open_runtime(make_settings(migrated, scope_index_interval_s=0))
    async with stack:
        conns = [await runtime.pool.acquire() for _ in range(runtime.settings.pool_min_size)]
        try:
            for conn in conns:
                prepared = [r["statement"] for r in await conn.fetch("SELECT statement FROM pg_prepared_statements")]
                # facts, episodes, multi-hop: explained on every connection, none of them run yet, so
                # their own plan cache starts from nothing
                assert sum(text.startswith("EXPLAIN") for text in prepared) == 3
                assert not any(text.lstrip().startswith(("WITH size AS", "SELECT e.entity")) for text in prepared)
        finally:
            for conn in conns:
                await runtime.pool.release(conn)
