"""`stats`: every field of StatsOverview, computed from per-trace counts, scoped to the project."""

from __future__ import annotations

import random
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg
import pytest
from conftest import ProjectClient, client_for
from contextlib_helpers import assert_fact, context, record, with_settings

from haki_context.core.models import ReasonCode
from haki_context.core.serving.runtime import Runtime
from haki_context.db import migrate
from haki_context.db.traces import REASON_COLUMNS, STATS_SQL

STATS = """query($since: DateTime) { stats(since: $since) {
  contextCalls injectionRate hitRate emptyCalls noRelevantMemoryCalls degradedCalls avgFactsServed avgUsedTokens
  latencyP50Ms latencyP95Ms reasonCodes { reasonCode count } activeFacts events openConflicts oldestOpenConflictSeconds
} }"""


async def test_stats_of_a_project_without_calls(project_client: ProjectClient) -> None:
    stats = (await project_client.execute(STATS))["stats"]
    assert stats["contextCalls"] == 0 and stats["injectionRate"] == 0 and stats["hitRate"] == 0
    assert stats["latencyP50Ms"] is None and stats["latencyP95Ms"] is None
    assert stats["oldestOpenConflictSeconds"] is None
    assert {r["count"] for r in stats["reasonCodes"]} == {0} and len(stats["reasonCodes"]) == len(ReasonCode)


async def test_every_reason_code_has_its_count_column(migrated: str) -> None:
    """A trace keeps one count per reason code, and stats read them by REASON_COLUMNS: a code
    missing there would be counted nowhere, and no error would say so."""
    assert set(REASON_COLUMNS) == {code.value for code in ReasonCode}
    assert len(set(REASON_COLUMNS.values())) == len(REASON_COLUMNS)
    conn = await asyncpg.connect(migrated)
    try:
        rows = await conn.fetch(
            "SELECT column_name, data_type, is_nullable FROM information_schema.columns"
            " WHERE table_schema = 'public' AND table_name = 'context_traces'"
        )
    finally:
        await conn.close()
    columns = {r["column_name"]: r for r in rows}
    for code, column in REASON_COLUMNS.items():
        assert column in columns, f"{code}'s count column {column} is not in context_traces"
        row = columns[column]
        assert (row["data_type"], row["is_nullable"]) == ("integer", "NO"), (code, dict(row))


async def test_every_stats_field(project_client: ProjectClient, subject: str) -> None:
    await assert_fact(project_client, subject, "a", "apples")
    await assert_fact(project_client, subject, "b", "bananas")
    await assert_fact(project_client, subject, "b", "berries", mode="CONTEST")
    await record(project_client, subject, ["we ate apples"])
    served = await context(project_client, subject, "apples")  # a fact and the episode; DEGRADED (conflict)
    await context(project_client, subject + "-empty", "anything")  # serves nothing
    stats = (await project_client.execute(STATS))["stats"]
    assert stats["contextCalls"] == 2
    assert stats["injectionRate"] == 0.5 and stats["hitRate"] == 0.5
    assert stats["emptyCalls"] == 1
    assert stats["noRelevantMemoryCalls"] == 0
    assert stats["degradedCalls"] == 1
    assert stats["avgFactsServed"] == len(served["facts"]) / 2
    assert stats["avgUsedTokens"] == served["usedTokens"] / 2
    assert 0 < stats["latencyP50Ms"] <= stats["latencyP95Ms"]
    codes = {r["reasonCode"]: r["count"] for r in stats["reasonCodes"]}
    trace = served["trace"]["decisions"]
    assert codes["CONFLICT_OPEN"] == 2 and codes["TOP_SCORE"] == sum(d["reasonCode"] == "TOP_SCORE" for d in trace)
    assert stats["activeFacts"] == 3 and stats["events"] == 1 and stats["openConflicts"] == 1
    assert stats["oldestOpenConflictSeconds"] >= 0
    later = (await project_client.execute(STATS, {"since": "2999-01-01T00:00:00+00:00"}))["stats"]
    assert later["contextCalls"] == 0 and later["activeFacts"] == 3  # totals are not windowed


async def test_no_relevant_memory_calls_are_counted(
    runtime: Runtime, project_client: ProjectClient, subject: str
) -> None:
    gated = client_for(with_settings(runtime, recall_max_distance=0.2))
    try:
        headers = {"authorization": f"Bearer {project_client.key}"}
        await gated.execute(
            'mutation($s: String!) { assertFact(input: {subjectId: $s, predicate: "p", value: "violin"}) { outcome } }',
            {"s": subject},
            **headers,
        )
        await gated.execute(
            'query($s: String!) { context(subjectId: $s, query: "tax forms") { traceId } }', {"s": subject}, **headers
        )
    finally:
        await gated.http.aclose()
    stats = (await project_client.execute(STATS))["stats"]
    assert stats["noRelevantMemoryCalls"] == 1 and stats["emptyCalls"] == 1 and stats["injectionRate"] == 0


@pytest.fixture(scope="module")
async def traces_db(pg_uri: str) -> AsyncIterator[asyncpg.Connection]:
    """100,000 traces over 10 projects in a database of their own, analysed as in production."""
    admin = await asyncpg.connect(pg_uri)
    await admin.execute("DROP DATABASE IF EXISTS haki_stats")
    await admin.execute("CREATE DATABASE haki_stats")
    await admin.close()
    dsn = pg_uri.replace("/postgres?", "/haki_stats?")
    await migrate.apply(dsn)
    conn = await asyncpg.connect(dsn)
    rng = random.Random(3)
    start = datetime.now(UTC) - timedelta(days=30)
    rows: list[tuple[Any, ...]] = [
        (
            f"p{i % 10}",
            uuid.uuid4(),
            "s",
            "q",
            900,
            rng.randint(0, 900),
            "OK",
            None,
            [],
            start + timedelta(seconds=i * 25),
            1.0,
            2.0,
            0.5,
            1.0,
            rng.uniform(5, 50),
            rng.randint(0, 5),
            rng.randint(0, 8),
            3,
            2,
            0,
            3,
            0,
            2,
            0,
            0,
            0,
        )
        for i in range(100_000)
    ]
    columns = [
        "project_id",
        "id",
        "subject_id",
        "query",
        "budget_tokens",
        "used_tokens",
        "status",
        "empty_reason",
        "warnings",
        "created_at",
        "embed_ms",
        "retrieve_ms",
        "pack_ms",
        "persist_ms",
        "total_ms",
        "facts_served",
        "episodes_served",
        "n_included",
        "n_excluded",
        "n_blocked",
        "n_top_score",
        "n_multi_hop",
        "n_over_budget",
        "n_below_floor",
        "n_conflict_open",
        "n_volatility_expired",
    ]
    await conn.copy_records_to_table("context_traces", records=rows, columns=columns)
    await conn.execute("VACUUM ANALYZE context_traces")
    yield conn
    await conn.close()


async def test_stats_plan_reads_the_covering_index_not_the_table(traces_db: asyncpg.Connection) -> None:
    plan = "\n".join(r[0] for r in await traces_db.fetch("EXPLAIN " + STATS_SQL, "p3", None))
    assert "Index Only Scan using context_traces_stats" in plan, plan
    assert "Seq Scan on context_traces" not in plan and "trace_decisions" not in plan
    windowed = "\n".join(
        r[0] for r in await traces_db.fetch("EXPLAIN " + STATS_SQL, "p3", datetime.now(UTC) - timedelta(days=10))
    )
    assert "Index Only Scan using context_traces_stats" in windowed, windowed
    assert "Seq Scan on context_traces" not in windowed
