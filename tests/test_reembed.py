"""`haki-context reembed` beside requests: a batch gives way to a write that holds the same rows
(a forget), so neither fails and the batch is written after it."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator

import asyncpg
import pytest

from haki_context.core.embedding.embedder import Embedder, HashingEncoder
from haki_context.core.embedding.space import reembed
from haki_context.core.serving.runtime import open_pool
from haki_context.db import migrate
from haki_context.settings import Settings

DATABASE = "haki_reembed"


@pytest.fixture
async def dsn(pg_uri: str) -> AsyncIterator[str]:
    admin = await asyncpg.connect(pg_uri)
    await admin.execute(f"DROP DATABASE IF EXISTS {DATABASE}")
    await admin.execute(f"CREATE DATABASE {DATABASE}")
    url = pg_uri.replace("/postgres?", f"/{DATABASE}?")
    await migrate.apply(url)
    try:
        yield url
    finally:
        await admin.execute(f"DROP DATABASE IF EXISTS {DATABASE} WITH (FORCE)")
        await admin.close()


async def insert_fact(conn: asyncpg.Connection, fact_id: uuid.UUID, text: str, embedder: Embedder) -> None:
    await conn.execute(
        "INSERT INTO facts (project_id, id, subject_id, predicate, value, value_hash, status, volatility,"
        " recorded_at, text, embedding) VALUES ('p', $1, 's', $2, '\"v\"', $2, 'ACTIVE', 'STABLE', now(), $2, $3)",
        fact_id,
        text,
        (await embedder.embed_many([text]))[0],
    )


async def reembed_waiting_on_a_lock(conn: asyncpg.Connection) -> bool:
    return bool(
        await conn.fetchval(
            "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE 'UPDATE facts SET embedding%'"
        )
    )


async def test_a_reembed_batch_gives_way_to_a_forget_holding_its_rows_in_another_order(dsn: str) -> None:
    embedder = Embedder(HashingEncoder())
    first, second = sorted([uuid.uuid4(), uuid.uuid4()])  # a batch updates in key order: first, then second
    pool = await open_pool(dsn, Settings(), min_size=1, max_size=3)
    forget = await asyncpg.connect(dsn)
    try:
        async with pool.acquire() as conn:
            await insert_fact(conn, first, "kept", embedder)
            await insert_fact(conn, second, "forgotten", embedder)
        # A forget's transaction locks `second`, then deletes `first` while the batch, holding
        # `first`, waits for `second`: a deadlock, unless the batch gives way.
        transaction = forget.transaction()
        await transaction.start()
        await forget.execute("DELETE FROM facts WHERE project_id = 'p' AND id = $1", second)
        job = asyncio.create_task(reembed(pool, embedder, batch_size=10))
        async with asyncio.timeout(10):
            async with pool.acquire() as watcher:
                while not await reembed_waiting_on_a_lock(watcher):
                    await asyncio.sleep(0.002)
        await forget.execute("DELETE FROM facts WHERE project_id = 'p' AND id = $1", first)
        await transaction.commit()
        async with asyncio.timeout(30):
            counts = await job
        assert counts == {"facts": 2, "episode_chunks": 0}  # both read; neither left to write
        async with pool.acquire() as conn:
            assert await conn.fetchval("SELECT count(*) FROM facts") == 0
    finally:
        await forget.close()
        await pool.close()
        embedder.close()


async def test_a_batch_that_keeps_giving_way_stops_the_command_with_its_reason(
    dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from haki_context.core.embedding import space

    monkeypatch.setattr(space, "_GIVE_UP_S", 0.3)
    embedder = Embedder(HashingEncoder())
    pool = await open_pool(dsn, Settings(), min_size=1, max_size=3)
    holder = await asyncpg.connect(dsn)
    try:
        async with pool.acquire() as conn:
            await insert_fact(conn, uuid.uuid4(), "held", embedder)
        transaction = holder.transaction()
        await transaction.start()
        await holder.execute("SELECT 1 FROM facts FOR UPDATE")  # held for as long as the test lasts
        with pytest.raises(space.ReembedBlocked, match="gave way to concurrent writes"):
            await reembed(pool, embedder, batch_size=10)
        await transaction.rollback()
    finally:
        await holder.close()
        await pool.close()
        embedder.close()
