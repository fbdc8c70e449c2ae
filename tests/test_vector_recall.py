"""Vector search is right at every scope size, with both plans (exact scan and the scope's own HNSW index).

A 20,000-row table holds a subject with 1% of the rows, one with 50%, one with
30 rows, and others; every scope of 100+ rows gets its own HNSW index (the
tiny one keeps the exact scan). For fact candidates and for episode
candidates, each plan must return min(k, eligible) rows, and at least 0.95 of
them must be right (a row is right when its distance is at most the exact
k-th distance).
"""

from __future__ import annotations

import dataclasses
import random
import uuid
import zlib
from collections.abc import AsyncIterator
from datetime import UTC, datetime

import asyncpg
import numpy as np
import pytest

from haki_context.core.embedding.embedder import HashingEncoder
from haki_context.core.serving.runtime import open_pool
from haki_context.core.serving.scope_indexes import build_pending
from haki_context.db import migrate, retrieval, scope_indexes
from haki_context.settings import Settings

pytestmark = pytest.mark.slow

FETCH = Settings().hnsw_fetch_rows  # rows the server takes from an HNSW scan (the default)

K = 64
SUBJECTS = {"one-percent": 200, "half": 10_000, "tiny": 30}
TABLE_ROWS = 20_000
QUERIES = 20
SCOPE_INDEX_ROWS = 100  # every scope but the tiny one gets its own HNSW index


def _texts(rng: random.Random, n: int) -> list[str]:
    vocab = [f"w{i}" for i in range(3000)]
    return [" ".join(rng.choices(vocab, k=12)) for _ in range(n)]


@pytest.fixture(scope="module")
async def recall_pool(pg_uri: str) -> AsyncIterator[asyncpg.Pool]:
    """A database of its own, bulk-loaded, with the scopes' HNSW indexes built after the load."""
    admin = await asyncpg.connect(pg_uri)
    await admin.execute("DROP DATABASE IF EXISTS haki_recall")
    await admin.execute("CREATE DATABASE haki_recall")
    await admin.close()
    dsn = pg_uri.replace("/postgres?", "/haki_recall?")
    await migrate.apply(dsn)
    pool = await open_pool(dsn, Settings(statement_timeout_ms=300_000), min_size=1, max_size=2)
    rng = random.Random(7)
    owners = [s for s, n in SUBJECTS.items() for _ in range(n)]
    owners += [f"other-{i % 7}" for i in range(TABLE_ROWS - len(owners))]
    texts = _texts(rng, len(owners))
    vectors = HashingEncoder().encode(texts)
    now = datetime.now(UTC)
    ids = [uuid.uuid4() for _ in owners]
    async with pool.acquire() as conn:
        await conn.copy_records_to_table(
            "facts",
            records=[
                ("p", i, s, "note", t, str(n), "ACTIVE", "STABLE", now, t, v)
                for n, (i, s, t, v) in enumerate(zip(ids, owners, texts, vectors))
            ],
            columns=[
                "project_id",
                "id",
                "subject_id",
                "predicate",
                "value",
                "value_hash",
                "status",
                "volatility",
                "recorded_at",
                "text",
                "embedding",
            ],
        )
        await conn.copy_records_to_table(
            "events",
            records=[("p", i, s, "note", {"text": t}, now, now, t) for i, s, t in zip(ids, owners, texts)],
            columns=["project_id", "id", "subject_id", "kind", "payload", "occurred_at", "recorded_at", "excerpt"],
        )
        await conn.copy_records_to_table(
            "episode_chunks",
            records=[("p", i, 0, s, "note", now, t, t, v) for i, s, t, v in zip(ids, owners, texts, vectors)],
            columns=[
                "project_id",
                "event_id",
                "chunk",
                "subject_id",
                "kind",
                "occurred_at",
                "text",
                "excerpt",
                "embedding",
            ],
        )
        await conn.execute(
            "INSERT INTO subjects (project_id, subject_id, fact_rows, chunk_rows)"
            " SELECT 'p', subject_id, count(*), count(*) FROM facts GROUP BY subject_id"
        )
        await conn.execute("ANALYZE")
    built = await build_pending(pool, SCOPE_INDEX_ROWS)
    assert built is not None
    assert {(b.subject_id, b.table) for b in built} == {
        (s, t) for s in ["one-percent", "half", *(f"other-{i}" for i in range(7))] for t in scope_indexes.TABLES
    }
    yield pool
    await pool.close()


async def _exact_kth(conn: asyncpg.Connection, table: str, subject: str, vector: np.ndarray) -> tuple[int, float]:
    rows = await conn.fetch(
        f"SELECT d FROM (SELECT embedding <=> $1 AS d FROM {table} WHERE project_id = 'p' AND subject_id = $2"
        " OFFSET 0) s ORDER BY d LIMIT $3",
        vector,
        subject,
        K,
    )
    return len(rows), rows[-1]["d"]


@pytest.mark.parametrize("plan", ["exact", "hnsw"])
@pytest.mark.parametrize("subject", list(SUBJECTS))
@pytest.mark.parametrize("table", ["facts", "episode_chunks"])
async def test_vector_candidates_are_right_at_every_scope_size(
    recall_pool: asyncpg.Pool, table: str, subject: str, plan: str
) -> None:
    rng = random.Random(zlib.crc32(f"{table}/{subject}/{plan}".encode()))
    queries = HashingEncoder().encode(_texts(rng, QUERIES))
    recalls = []
    for vector in queries:
        params = retrieval.SearchParams(
            project_id="p",
            subject_id=subject,
            vector=vector,
            query="zzzz",
            now=datetime.now(UTC),
            max_lexemes=32,
            lexeme_rows=1000,
            use_scope_index=plan == "hnsw",
            hnsw_fetch=FETCH,
            horizon_volatile_s=1e9,
            horizon_ephemeral_s=1e9,
            full_text_rank="cover_density",
            own_index_tables=frozenset({table}) if plan == "hnsw" else frozenset(),
        )
        async with recall_pool.acquire() as conn:
            if table == "facts":
                found = await retrieval.fact_candidates(conn, params, K, 256)
                distances = [row.distance for row, _ in found.candidates]
            else:
                distances = [c.distance for c in (await retrieval.episode_candidates(conn, params, K, 0)).chunks]
            expected, kth = await _exact_kth(conn, table, subject, vector)
        assert len(distances) == min(K, SUBJECTS[subject]) == expected
        recalls.append(sum(d is not None and d <= kth + 1e-9 for d in distances) / len(distances))

    print(f"{table} {subject} {plan}: mean recall {np.mean(recalls):.3f}, min {min(recalls):.3f}")
    assert float(np.mean(recalls)) >= 0.95, recalls


def _literal(value: object) -> str:
    if isinstance(value, np.ndarray):
        return "'[" + ",".join(map(str, value.tolist())) + "]'"
    if isinstance(value, (str, datetime)):
        return "'" + str(value).replace("'", "''") + "'"
    return str(value).lower() if isinstance(value, bool) else str(value)


async def _generic_plan(conn: asyncpg.Connection, sql: str, args: tuple[object, ...]) -> str:
    """The plan PostgreSQL makes once for every run of `sql` (prepared on `conn` already)."""
    types = await conn.fetchval("SELECT parameter_types::text[] FROM pg_prepared_statements WHERE statement = $1", sql)
    await conn.execute(f"PREPARE generic_probe({', '.join(types)}) AS {sql}")
    try:
        async with conn.transaction():
            await conn.execute("SET LOCAL plan_cache_mode = force_generic_plan")
            rows = await conn.fetch(f"EXPLAIN (COSTS OFF) EXECUTE generic_probe({', '.join(map(_literal, args))})")
        return "\n".join(r[0] for r in rows)
    finally:
        await conn.execute("DEALLOCATE generic_probe")


async def _candidates(
    conn: asyncpg.Connection, table: str, params: retrieval.SearchParams
) -> retrieval.FactCandidates | retrieval.EpisodeCandidates:
    if table == "facts":
        return await retrieval.fact_candidates(conn, params, K, 256)
    return await retrieval.episode_candidates(conn, params, K, 8)


@pytest.mark.parametrize("table", ["facts", "episode_chunks"])
async def test_a_large_scope_is_searched_through_its_own_index_by_a_plan_made_once(
    recall_pool: asyncpg.Pool, table: str
) -> None:
    vector = HashingEncoder().encode(["w1 w2 w3"])[0]
    now = datetime.now(UTC)
    async with recall_pool.acquire() as conn:
        assert await conn.fetchval("SHOW plan_cache_mode") == "auto"
        for subject in ("half", "tiny"):
            params = retrieval.SearchParams(
                project_id="p",
                subject_id=subject,
                vector=vector,
                query="w1",
                now=now,
                max_lexemes=32,
                lexeme_rows=1000,
                use_scope_index=True,
                hnsw_fetch=FETCH,
                horizon_volatile_s=1e9,
                horizon_ephemeral_s=1e9,
                full_text_rank="idf",
            )
            # Not known yet: the shared text, which reports whether the scope has an index of its own.
            first = await _candidates(conn, table, params)
            assert first.own_index is (subject == "half")
            known = dataclasses.replace(params, own_index_tables=frozenset({table}) if first.own_index else frozenset())
            sql = retrieval.candidates_text(table, known)
            assert ("'half'" in sql) is (subject == "half")
            # Past five runs PostgreSQL keeps one plan for all when it costs no more than theirs.
            for _ in range(7):
                await _candidates(conn, table, known)
            args = (
                (params.project_id, subject, vector, "w1", now, K, 32, 256, 1e9, 1e9, FETCH, 1000)
                if table == "facts"
                else ("p", subject, vector, "w1", K, 32, 8, FETCH, 1000)
            )
            if subject == "half":  # which a large scope's own text does: planned once
                assert (
                    await conn.fetchval("SELECT generic_plans FROM pg_prepared_statements WHERE statement = $1", sql)
                    > 0
                )
            plan = await _generic_plan(conn, sql, args)
            own = scope_indexes.index_name(table, "p", subject)
            if subject == "half":  # its HNSW and IVFFlat indexes; its rows holding the word from the scoped lexemes
                assert own in plan, plan
                assert scope_indexes.ivf_index_name(table, "p", subject) in plan, plan
                assert f"{table}_scoped_search" in plan, plan
                assert "BitmapAnd" not in plan  # the word's rows alone, not ANDed with the scope's
            else:  # no index of its own: no index of another scope either
                assert "_hnsw_" not in plan and "_ivf_" not in plan, plan


@pytest.mark.parametrize("table", ["facts", "episode_chunks"])
async def test_a_wrong_hint_costs_speed_never_rows(recall_pool: asyncpg.Pool, table: str) -> None:
    vector = HashingEncoder().encode(["w1 w2 w3"])[0]
    params = retrieval.SearchParams(
        project_id="p",
        subject_id="tiny",
        vector=vector,
        query="w1",
        now=datetime.now(UTC),
        max_lexemes=32,
        lexeme_rows=1000,
        use_scope_index=True,
        hnsw_fetch=FETCH,
        horizon_volatile_s=1e9,
        horizon_ephemeral_s=1e9,
        full_text_rank="cover_density",
    )
    async with recall_pool.acquire() as conn:
        shared = await _candidates(conn, table, params)
        # The scope's own (HNSW) text for a scope without an index: its rows sorted exactly.
        wrong = await _candidates(conn, table, dataclasses.replace(params, own_index_tables=frozenset({table})))
    assert shared.own_index is False and wrong.own_index is False  # which takes the hint back

    def rows(found: retrieval.FactCandidates | retrieval.EpisodeCandidates) -> set[str]:
        if isinstance(found, retrieval.FactCandidates):
            return {row.id for row, _ in found.candidates}
        return {c.event_id for c in found.chunks}

    assert len(rows(shared)) == SUBJECTS["tiny"] and rows(wrong) == rows(shared)
