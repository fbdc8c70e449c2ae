"""A database that cannot be reached is UNAVAILABLE (HTTP 503), answered fast."""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path

import asyncpg
from conftest import client_for

from haki_context.core.serving.runtime import Runtime
from haki_context.db.pool import init_connection


async def test_unreachable_database_is_unavailable_503(runtime: Runtime, tmp_path: Path) -> None:

    dsn = f"postgresql://postgres@/postgres?host={tmp_path}"  # no server listens there
    pool = await asyncpg.create_pool(dsn, min_size=0, max_size=2, init=init_connection, timeout=2.0)
    down = client_for(replace(runtime, pool=pool))
    try:
        started = time.monotonic()
        response = await down.post('{ context(subjectId: "s", query: "q") { traceId } }')
        assert time.monotonic() - started < 5
        assert response.status_code == 503
        assert response.json()["errors"][0]["extensions"]["code"] == "UNAVAILABLE"
        ready = await down.http.get("/readyz")
        assert ready.status_code == 503
    finally:
        await down.http.aclose()
        await pool.close()
