"""A scope past HAKI_SCOPE_INDEX_ROWS gets HNSW and IVFFlat indexes of its own (context answers the same through them)
and a list of its common lexemes (the idf rank and multi-hop read them instead of the rows)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime

import asyncpg
import numpy as np
import pytest
from conftest import GraphQLClient, client_for, make_settings, open_runtime_for
from contextlib_helpers import assert_fact, context, record

from haki_context.core.context.assembler import search_params
from haki_context.core.embedding.embedder import Embedder
from haki_context.core.serving.runtime import Runtime
from haki_context.core.serving.scope_indexes import OwnIndexHints, build_pending
from haki_context.db import migrate, retrieval, scope_indexes

MIN_ROWS = 12
PROJECT = "default"  # dev mode


@pytest.fixture(scope="module")
async def scoped(pg_uri: str, hashing_embedder: Embedder) -> AsyncIterator[Runtime]:
    """A database of its own: the builder considers every scope of a database."""
    admin = await asyncpg.connect(pg_uri)
    await admin.execute("DROP DATABASE IF EXISTS haki_scope_indexes")
    await admin.execute("CREATE DATABASE haki_scope_indexes")
    await admin.close()
    dsn = pg_uri.replace("/postgres?", "/haki_scope_indexes?")
    await migrate.apply(dsn)
    rt = await open_runtime_for(dsn, make_settings(dsn, scope_index_rows=MIN_ROWS), hashing_embedder)
    yield rt
    await rt.pool.close()


@pytest.fixture
async def sclient(scoped: Runtime) -> AsyncIterator[GraphQLClient]:
    c = client_for(scoped)
    yield c
    await c.http.aclose()


async def _index_state(rt: Runtime, name: str) -> bool | None:
    async with rt.pool.acquire() as conn:
        valid: bool | None = await conn.fetchval(
            "SELECT i.indisvalid FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid WHERE c.relname = $1", name
        )
        return valid


async def _fill(client: GraphQLClient, subject: str, facts: int, turns: int) -> None:
    for i in range(facts):
        await assert_fact(client, subject, f"fact_{i}", f"value {i} about topic {i % 5}", mode="ADD")
    if turns:
        await record(client, subject, [f"turn {i} about topic {i % 5}" for i in range(turns)])


async def test_a_scope_past_the_threshold_gets_its_own_index_once(scoped: Runtime, sclient: GraphQLClient) -> None:
    await _fill(sclient, "big", MIN_ROWS, MIN_ROWS)
    await _fill(sclient, "small", MIN_ROWS - 1, 2)
    built = await build_pending(scoped.pool, MIN_ROWS)
    assert built is not None
    assert {(s.subject_id, s.table) for s in built} == {("big", "facts"), ("big", "episode_chunks")}
    for table in scope_indexes.TABLES:
        assert await _index_state(scoped, scope_indexes.index_name(table, PROJECT, "big")) is True
        assert await _index_state(scoped, scope_indexes.index_name(table, PROJECT, "small")) is None
        async with scoped.pool.acquire() as conn:  # the graph the retrieval's settings were measured with
            options = await conn.fetchval(
                "SELECT reloptions FROM pg_class WHERE relname = $1", scope_indexes.index_name(table, PROJECT, "big")
            )
        assert sorted(options) == [f"ef_construction={scope_indexes.HNSW_EF_CONSTRUCTION}", f"m={scope_indexes.HNSW_M}"]
        ivf = scope_indexes.ivf_index_name(table, PROJECT, "big")  # its companion, sqrt(rows) lists
        assert await _index_state(scoped, ivf) is True
        assert await _options(scoped, ivf) == [f"lists={scope_indexes.ivf_lists(MIN_ROWS)}"]
        assert await _index_state(scoped, scope_indexes.ivf_index_name(table, PROJECT, "small")) is None
    assert await build_pending(scoped.pool, MIN_ROWS) == []  # nothing left to build
    async with scoped.pool.acquire() as conn:
        assert {t for _, t, _ in await scope_indexes.ready(conn, PROJECT)} == set(scope_indexes.TABLES)


async def test_context_answers_the_same_through_the_scope_index(scoped: Runtime, sclient: GraphQLClient) -> None:
    await _fill(sclient, "same", MIN_ROWS + 3, MIN_ROWS)
    before = await context(sclient, "same", "value about topic 3", budget=300)
    assert scoped.own_indexes.tables(PROJECT, "same") == frozenset()
    await build_pending(scoped.pool, MIN_ROWS)
    assert await _index_state(scoped, scope_indexes.index_name("facts", PROJECT, "same")) is True
    learning = await context(sclient, "same", "value about topic 3", budget=300)  # the shared text: exact scan
    assert scoped.own_indexes.tables(PROJECT, "same") == set(scope_indexes.TABLES)  # which reported the indexes
    after = await context(sclient, "same", "value about topic 3", budget=300)  # the scope's own text: its index
    for packet in (learning, after):
        assert [f["id"] for f in packet["facts"]] == [f["id"] for f in before["facts"]]
        assert [(e["eventId"], e["chunk"]) for e in packet["episodes"]] == [
            (e["eventId"], e["chunk"]) for e in before["episodes"]
        ]
    assert after["facts"]  # control: the query finds facts at all


async def test_an_interrupted_build_is_dropped_and_rebuilt(scoped: Runtime, sclient: GraphQLClient) -> None:
    await _fill(sclient, "crashed", MIN_ROWS, 0)
    assert [s.subject_id for s in await build_pending(scoped.pool, MIN_ROWS) or []] == ["crashed"]
    name = scope_indexes.index_name("facts", PROJECT, "crashed")
    async with scoped.pool.acquire() as conn:  # what a build killed half-way leaves behind
        await conn.execute(
            "UPDATE pg_index SET indisvalid = false WHERE indexrelid = (SELECT oid FROM pg_class WHERE relname = $1)",
            name,
        )
        await conn.execute("UPDATE scope_vector_indexes SET ready_at = NULL WHERE index_name = $1", name)
    assert await _index_state(scoped, name) is False
    assert [s.subject_id for s in await build_pending(scoped.pool, MIN_ROWS) or []] == ["crashed"]
    assert await _index_state(scoped, name) is True


async def _options(rt: Runtime, name: str) -> list[str] | None:
    async with rt.pool.acquire() as conn:
        options: list[str] | None = await conn.fetchval("SELECT reloptions FROM pg_class WHERE relname = $1", name)
        return options


async def test_an_index_built_with_other_parameters_is_replaced(scoped: Runtime, sclient: GraphQLClient) -> None:
    await _fill(sclient, "older", MIN_ROWS + 3, 0)
    assert [s.subject_id for s in await build_pending(scoped.pool, MIN_ROWS) or []] == ["older"]
    before = await context(sclient, "older", "value about topic 3", budget=300)
    name = scope_indexes.index_name("facts", PROJECT, "older")
    async with scoped.pool.acquire() as conn:  # what an earlier version built (m = 32, ef_construction = 128)
        await conn.execute(f'DROP INDEX "{name}"')
        await conn.execute(
            f'CREATE INDEX "{name}" ON facts USING hnsw (embedding vector_cosine_ops) WITH (m = 32, ef_construction = 128)'
            " WHERE project_id = 'default' AND subject_id = 'older' AND status = 'ACTIVE'"
        )
    assert sorted(await _options(scoped, name) or []) == ["ef_construction=128", "m=32"]
    assert [s.subject_id for s in await build_pending(scoped.pool, MIN_ROWS) or []] == ["older"]
    assert sorted(await _options(scoped, name) or []) == sorted(
        [f"m={scope_indexes.HNSW_M}", f"ef_construction={scope_indexes.HNSW_EF_CONSTRUCTION}"]
    )
    assert await _index_state(scoped, name) is True
    assert await _index_state(scoped, name + "_next") is None
    after = await context(sclient, "older", "value about topic 3", budget=300)
    assert [f["id"] for f in after["facts"]] == [f["id"] for f in before["facts"]] and after["facts"]
    assert await build_pending(scoped.pool, MIN_ROWS) == []  # nothing left to replace

    # A replacement interrupted after the old index was dropped is finished: the new one is renamed.
    async with scoped.pool.acquire() as conn:
        await conn.execute(f'ALTER INDEX "{name}" RENAME TO "{name}_next"')
        await scope_indexes.rebuild(conn, scope_indexes.Scope(PROJECT, "older", "facts", MIN_ROWS + 3))
    assert await _index_state(scoped, name) is True
    assert await _index_state(scoped, name + "_next") is None


async def test_a_scope_indexed_by_an_earlier_version_gets_its_ivf_index_and_keeps_its_hnsw_index(
    scoped: Runtime, sclient: GraphQLClient
) -> None:
    await _fill(sclient, "hnsw-only", MIN_ROWS + 3, 0)
    assert [s.subject_id for s in await build_pending(scoped.pool, MIN_ROWS) or []] == ["hnsw-only"]
    hnsw = scope_indexes.index_name("facts", PROJECT, "hnsw-only")
    ivf = scope_indexes.ivf_index_name("facts", PROJECT, "hnsw-only")
    async with scoped.pool.acquire() as conn:  # what the version before the IVFFlat indexes left
        await conn.execute(f'DROP INDEX "{ivf}"')
        hnsw_oid = await conn.fetchval("SELECT oid FROM pg_class WHERE relname = $1", hnsw)
    before = await context(sclient, "hnsw-only", "value about topic 3", budget=300)
    assert before["facts"]  # served meanwhile (the scope's own text skips the IVFFlat scan while it has no index)
    assert [s.subject_id for s in await build_pending(scoped.pool, MIN_ROWS) or []] == ["hnsw-only"]
    assert await _index_state(scoped, ivf) is True and await _index_state(scoped, ivf + "_next") is None
    async with scoped.pool.acquire() as conn:  # the HNSW index was current: not rebuilt
        assert await conn.fetchval("SELECT oid FROM pg_class WHERE relname = $1", hnsw) == hnsw_oid
    after = await context(sclient, "hnsw-only", "value about topic 3", budget=300)
    assert [f["id"] for f in after["facts"]] == [f["id"] for f in before["facts"]]
    assert await build_pending(scoped.pool, MIN_ROWS) == []


async def test_only_a_scope_past_the_ivf_threshold_gets_an_ivf_index(scoped: Runtime, sclient: GraphQLClient) -> None:
    await _fill(sclient, "under-ivf", MIN_ROWS + 3, 0)
    assert [s.subject_id for s in await build_pending(scoped.pool, MIN_ROWS, ivf_rows=MIN_ROWS + 4) or []] == [
        "under-ivf"
    ]
    ivf = scope_indexes.ivf_index_name("facts", PROJECT, "under-ivf")
    assert await _index_state(scoped, scope_indexes.index_name("facts", PROJECT, "under-ivf")) is True
    assert await _index_state(scoped, ivf) is None
    served = await context(sclient, "under-ivf", "value about topic 3", budget=300)  # the HNSW scan alone
    assert await build_pending(scoped.pool, MIN_ROWS, ivf_rows=MIN_ROWS + 4) == []
    await assert_fact(sclient, "under-ivf", "one_more", "value 99 about topic 4", mode="ADD")  # past it now
    assert [s.subject_id for s in await build_pending(scoped.pool, MIN_ROWS, ivf_rows=MIN_ROWS + 4) or []] == [
        "under-ivf"
    ]
    assert await _index_state(scoped, ivf) is True
    after = await context(sclient, "under-ivf", "value about topic 3", budget=300)
    assert {f["id"] for f in served["facts"]} <= {f["id"] for f in after["facts"]} and served["facts"]


def test_an_index_is_stale_when_built_with_other_parameters_or_when_the_scope_outgrew_its_lists() -> None:
    current = [f"m={scope_indexes.HNSW_M}", f"ef_construction={scope_indexes.HNSW_EF_CONSTRUCTION}"]
    lists = f"lists={scope_indexes.ivf_lists(10_000)}"  # 100
    assert scope_indexes.stale_kinds(10_000, current, [lists], 10_000) == []
    assert scope_indexes.stale_kinds(39_000, current, [lists], 10_000) == []  # sqrt: 197.5, under twice 100
    assert scope_indexes.stale_kinds(41_000, current, [lists], 10_000) == ["ivf"]  # grown past 4x
    assert scope_indexes.stale_kinds(10_000, current, None, 10_000) == ["ivf"]  # none built
    assert scope_indexes.stale_kinds(10_000, current, None, 10_001) == []  # none wanted: under the threshold
    assert scope_indexes.stale_kinds(10_000, ["m=32", "ef_construction=128"], [lists], 10_000) == ["hnsw"]
    assert scope_indexes.stale_kinds(10_000, None, None, 10_000) == ["hnsw", "ivf"]


async def test_one_builder_at_a_time(scoped: Runtime, sclient: GraphQLClient) -> None:
    await _fill(sclient, "waiting", MIN_ROWS, 0)
    async with scoped.pool.acquire() as other:
        assert await scope_indexes.try_lock(other)
        try:
            assert await build_pending(scoped.pool, MIN_ROWS) is None  # another builder holds the lock
        finally:
            await scope_indexes.unlock(other)
    assert [s.subject_id for s in await build_pending(scoped.pool, MIN_ROWS) or []] == ["waiting"]


async def test_scope_ids_that_look_like_sql_are_only_data(scoped: Runtime, sclient: GraphQLClient) -> None:
    hostile = "x'; DROP TABLE facts; --\"%I"
    await _fill(sclient, hostile, MIN_ROWS, 0)
    built = await build_pending(scoped.pool, MIN_ROWS)
    assert [s.subject_id for s in built or []] == [hostile]
    assert await _index_state(scoped, scope_indexes.index_name("facts", PROJECT, hostile)) is True
    first = await context(sclient, hostile, "value about topic 1")
    assert scoped.own_indexes.tables(PROJECT, hostile) == {"facts"}  # no episodes: no index of those
    # Now the scope's own statement text, which names it with constants.
    params = search_params(
        scoped.settings,
        project_id=PROJECT,
        subject_id=hostile,
        vector=np.zeros(384, np.float32),
        query="q",
        now=datetime.now(UTC),
        own_index_tables=scoped.own_indexes.tables(PROJECT, hostile),
    )
    sql = retrieval.candidates_text("facts", params)
    assert "'x''; DROP TABLE facts; --\"%I'" in sql
    again = await context(sclient, hostile, "value about topic 1")
    assert again["facts"] and [f["id"] for f in again["facts"]] == [f["id"] for f in first["facts"]]


def test_own_index_hints_follow_what_statements_report() -> None:
    hints = OwnIndexHints(max_scopes=2)
    hints.saw("p", "a", "facts", True)
    hints.saw("p", "a", "episode_chunks", None)  # no row came back: nothing learned
    assert hints.tables("p", "a") == {"facts"}
    hints.saw("p", "a", "episode_chunks", True)
    hints.saw("p", "a", "facts", False)  # the index was dropped
    assert hints.tables("p", "a") == {"episode_chunks"}
    hints.saw("p", "b", "facts", False)  # small scopes are not kept
    assert hints.tables("p", "b") == frozenset()
    hints.saw("p", "b", "facts", True)
    hints.saw("p", "c", "facts", True)  # past max_scopes: the least recently seen goes
    assert hints.tables("p", "a") == frozenset() and hints.tables("p", "c") == {"facts"}


async def _listed(rt: Runtime, subject: str, table: str = "facts") -> dict[str, int]:
    async with rt.pool.acquire() as conn:
        rows = await conn.fetch(
            "SELECT lexeme, df FROM scope_lexemes WHERE project_id = $1 AND subject_id = $2 AND table_name = $3",
            PROJECT,
            subject,
            table,
        )
    return {r["lexeme"]: r["df"] for r in rows}


async def _listed_at(rt: Runtime, subject: str) -> object:
    async with rt.pool.acquire() as conn:
        return await conn.fetchval(
            "SELECT lexemes_at FROM scope_vector_indexes WHERE project_id = $1 AND subject_id = $2"
            " AND table_name = 'facts'",
            PROJECT,
            subject,
        )


async def test_an_indexed_scope_lists_its_common_lexemes_and_refreshes_them_when_it_grows(
    scoped: Runtime, sclient: GraphQLClient
) -> None:
    await _fill(sclient, "lexicon", MIN_ROWS, 0)  # "topic" in all 12 facts, "topic 1" in 3 of them
    await build_pending(scoped.pool, MIN_ROWS, lexeme_rows=5)
    listed = await _listed(scoped, "lexicon")
    assert listed["topic"] == MIN_ROWS and listed["valu"] == MIN_ROWS
    assert "1" not in listed and min(listed.values()) >= 5  # held by 3 rows: below the threshold
    first = await _listed_at(scoped, "lexicon")
    await build_pending(scoped.pool, MIN_ROWS, lexeme_rows=5)
    assert await _listed_at(scoped, "lexicon") == first  # same size, same threshold: kept
    await assert_fact(sclient, "lexicon", "fact_extra_1", "value 1 about topic 1", mode="ADD")
    await assert_fact(sclient, "lexicon", "fact_extra_2", "value 1 about topic 1", mode="ADD")
    await build_pending(scoped.pool, MIN_ROWS, lexeme_rows=5)
    assert await _listed_at(scoped, "lexicon") != first  # grew by a tenth or more
    assert (await _listed(scoped, "lexicon"))["1"] == 5  # "1" now in 5 facts
    await build_pending(scoped.pool, MIN_ROWS, lexeme_rows=100)  # another threshold: rebuilt, now empty
    assert await _listed(scoped, "lexicon") == {}


async def test_a_listed_lexeme_weighs_what_counting_its_rows_gives(scoped: Runtime, sclient: GraphQLClient) -> None:
    await _fill(sclient, "weights", MIN_ROWS, 0)
    await assert_fact(sclient, "weights", "fact_rare", "a zebra about topic 2", mode="ADD")
    await build_pending(scoped.pool, MIN_ROWS, lexeme_rows=5)
    assert {"topic", "valu"} <= set(await _listed(scoped, "weights"))
    query = "zebra value topic 2"
    vector = await scoped.embedder.embed_query(query)
    params = search_params(
        scoped.settings, project_id=PROJECT, subject_id="weights", vector=vector, query=query, now=datetime.now(UTC)
    )

    async def scores() -> dict[str, float]:
        async with scoped.pool.acquire() as conn:
            found = await retrieval.fact_candidates(conn, params, 64, 0)
        return {row.id: row.full_text or 0.0 for row, _ in found.candidates}

    from_list = await scores()
    async with scoped.pool.acquire() as conn:  # the same df, counted from the rows this time
        await conn.execute("DELETE FROM scope_lexemes WHERE subject_id = 'weights'")
    counted = await scores()
    assert from_list.keys() == counted.keys() and len(counted) == MIN_ROWS + 1
    for fact_id, score in counted.items():
        assert from_list[fact_id] == pytest.approx(score, abs=1e-6)
    assert max(counted.values()) > 0.5  # the zebra fact holds most of the query's idf mass


async def test_multi_hop_does_not_follow_an_entity_the_scope_lists_as_common(
    scoped: Runtime, sclient: GraphQLClient
) -> None:
    await _fill(sclient, "hops", MIN_ROWS, 0)
    await assert_fact(sclient, "hops", "fact_rare", "a zebra about topic 2", mode="ADD")
    query = "zebra"
    vector = await scoped.embedder.embed_query(query)
    params = search_params(
        scoped.settings, project_id=PROJECT, subject_id="hops", vector=vector, query=query, now=datetime.now(UTC)
    )

    async def hop(entity: str) -> list[str]:
        async with scoped.pool.acquire() as conn:
            return [
                row.id
                for _, row in await retrieval.multi_hop(
                    conn, params, [entity], exclude_ids=[], per_entity=5, read_rows=100
                )
            ]

    assert len(await hop("Topic")) == 5  # not listed yet: followed
    await build_pending(scoped.pool, MIN_ROWS, lexeme_rows=5)
    assert "topic" in await _listed(scoped, "hops")
    assert await hop("Topic") == []  # held by all 13 facts: listed, not followed
    assert len(await hop("Zebra")) == 1  # a rare entity still is
