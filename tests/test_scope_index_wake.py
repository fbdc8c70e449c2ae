"""A write that takes a scope to HAKI_SCOPE_INDEX_ROWS wakes the server's index pass at once, so
the scope leaves the exact scan when the build is done, not up to HAKI_SCOPE_INDEX_INTERVAL_S later."""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path

import asyncpg
import httpx
import pytest
from conftest import GraphQLClient, make_settings
from contextlib_helpers import assert_fact, record

from haki_context.app import create_app
from haki_context.core.serving.scope_indexes import ScopeGrowth
from haki_context.db import migrate
from haki_context.db.scope_indexes import ScopeRows
from haki_context.settings import Settings

MIN_ROWS = 10
# Far longer than the test: the pass at start-up finds nothing, and no timed pass comes after it.
INTERVAL_S = 3600.0
BUILT_WITHIN_S = 30.0
CLI = str(Path(sys.executable).parent / "haki-context")


@pytest.fixture(scope="module")
async def dsn(pg_uri: str) -> str:
    """A database of its own: the builder considers every scope of a database."""
    admin = await asyncpg.connect(pg_uri)
    try:
        await admin.execute("DROP DATABASE IF EXISTS haki_scope_wake")
        await admin.execute("CREATE DATABASE haki_scope_wake")
    finally:
        await admin.close()
    dsn = pg_uri.replace("/postgres?", "/haki_scope_wake?")
    await migrate.apply(dsn)
    return dsn


@contextlib.asynccontextmanager
async def _served(dsn: str) -> AsyncIterator[GraphQLClient]:
    """The app as served (its lifespan runs the index pass), on that database; entered and left
    in the test's own task, as the lifespan's task group requires."""
    app = create_app(make_settings(dsn, scope_index_rows=MIN_ROWS, scope_index_interval_s=INTERVAL_S))
    async with app.router.lifespan_context(app):
        http = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://testserver")
        async with http:
            yield GraphQLClient(http)


async def _ready_tables(dsn: str, subject: str) -> set[str]:
    conn = await asyncpg.connect(dsn)
    try:
        rows = await conn.fetch(
            "SELECT table_name FROM scope_vector_indexes WHERE subject_id = $1 AND ready_at IS NOT NULL", subject
        )
    finally:
        await conn.close()
    return {r["table_name"] for r in rows}


async def _wait_ready(dsn: str, subject: str, tables: set[str]) -> float:
    started = time.monotonic()
    while (ready := await _ready_tables(dsn, subject)) != tables:
        assert time.monotonic() - started < BUILT_WITHIN_S, f"{subject}: only {ready} indexed"
        await asyncio.sleep(0.1)
    return time.monotonic() - started


async def test_events_that_take_a_scope_to_the_threshold_get_it_indexed_at_once(dsn: str) -> None:
    async with _served(dsn) as served:
        await record(served, "growing", [f"turn {i} about topic {i % 3}" for i in range(MIN_ROWS - 1)])
        await asyncio.sleep(1.0)  # no pass for a scope still below the threshold
        assert await _ready_tables(dsn, "growing") == set()
        await record(served, "growing", ["the turn that reaches it"])
        await _wait_ready(dsn, "growing", {"episode_chunks"})


async def test_a_fact_that_takes_a_scope_to_the_threshold_gets_it_indexed_at_once(dsn: str) -> None:
    async with _served(dsn) as served:
        for i in range(MIN_ROWS):
            await assert_fact(served, "asserted", f"p{i}", f"value {i}", mode="ADD")
        await _wait_ready(dsn, "asserted", {"facts"})


def _cli(dsn: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HAKI_")}
    env.update({"HAKI_DATABASE_URL": dsn, "HAKI_EMBED_PROVIDER": "hashing", "HAKI_SCOPE_INDEX_ROWS": str(MIN_ROWS)})
    return subprocess.run([CLI, *args], env=env, capture_output=True, text=True, timeout=120, check=False)


async def test_an_import_that_takes_a_subject_to_the_threshold_builds_its_indexes_before_it_ends(
    dsn: str, tmp_path: Path
) -> None:
    async with _served(dsn) as served:
        await record(served, "exported", [f"turn {i}" for i in range(MIN_ROWS)])
    out = tmp_path / "exported.jsonl"
    assert _cli(dsn, "export", "--project", "default", "--subject", "exported", "--out", str(out)).returncode == 0
    loaded = _cli(dsn, "import", "--project", "default", "--subject", "imported", str(out))
    assert loaded.returncode == 0, loaded.stderr
    assert f"built the episode_chunks indexes of default/imported ({MIN_ROWS} rows)" in loaded.stdout
    assert await _ready_tables(dsn, "imported") == {"episode_chunks"}


def _rows(before: int, after: int) -> ScopeRows:
    return ScopeRows("s", "facts", before, after)


async def test_only_reaching_an_indexed_size_wakes_the_pass() -> None:
    settings = Settings(scope_index_rows=100, ivf_index_rows=1000)
    growth = ScopeGrowth()
    growth.saw([_rows(0, 99), _rows(100, 150), _rows(1000, 2000)], settings)  # below, or past it already
    assert not await growth.crossed_within(0.01)
    for before, after in [(99, 100), (50, 120), (999, 1000)]:
        growth.saw([_rows(before, after)], settings)
        assert await growth.crossed_within(0.01)
        assert not await growth.crossed_within(0.01)  # told once per crossing
    growth.saw([_rows(0, 10**6)], Settings(scope_index_rows=0, ivf_index_rows=0))  # 0: no size to reach
    assert not await growth.crossed_within(0.01)
