"""Trace retention: old traces and their decisions go, in batches; recent ones stay."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from conftest import ProjectClient
from contextlib_helpers import assert_fact, context

from haki_context.core.history.traces import prune
from haki_context.core.serving.runtime import Runtime


async def _age(runtime: Runtime, trace_id: str, days: int) -> None:
    async with runtime.pool.acquire() as conn:
        await conn.execute(
            "UPDATE context_traces SET created_at = created_at - make_interval(days => $2) WHERE id = $1::uuid",
            trace_id,
            days,
        )


async def _exists(runtime: Runtime, trace_id: str) -> tuple[bool, int]:
    async with runtime.pool.acquire() as conn:
        trace = await conn.fetchval("SELECT count(*) FROM context_traces WHERE id = $1::uuid", trace_id)
        decisions = await conn.fetchval("SELECT count(*) FROM trace_decisions WHERE trace_id = $1::uuid", trace_id)
    return trace == 1, decisions


async def test_prune_deletes_old_traces_with_their_decisions_in_batches(
    runtime: Runtime, project_client: ProjectClient, subject: str
) -> None:
    await assert_fact(project_client, subject, "a", "one")
    old = [(await context(project_client, subject, f"q{i}", selection="traceId"))["traceId"] for i in range(5)]
    new = (await context(project_client, subject, "fresh", selection="traceId"))["traceId"]
    for trace_id in old:
        await _age(runtime, trace_id, 40)
    assert (await _exists(runtime, old[0]))[1] == 1
    deleted = await prune(runtime.pool, 30, batch_size=2)  # three batches: 2, 2, 1
    assert deleted >= 5
    for trace_id in old:
        assert await _exists(runtime, trace_id) == (False, 0)
    assert await _exists(runtime, new) == (True, 1)
    query = "query($id: ID!) { trace(id: $id) { id } }"
    assert (await project_client.execute(query, {"id": old[0]}))["trace"] is None


def test_prune_command_uses_the_retention_setting(pg_uri: str, tmp_path: Path) -> None:
    env = {**os.environ, "HAKI_DATABASE_URL": pg_uri, "HAKI_TRACE_RETENTION_DAYS": "3650"}
    done = subprocess.run(
        [Path(sys.executable).parent / "haki-context", "prune"], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert "older than 3650 day(s)" in done.stdout
    env.pop("HAKI_TRACE_RETENTION_DAYS")
    refused = subprocess.run(
        [Path(sys.executable).parent / "haki-context", "prune"], env=env, capture_output=True, text=True, timeout=120
    )
    assert refused.returncode == 2 and "HAKI_TRACE_RETENTION_DAYS" in refused.stderr
