"""Work that must happen once, however many server processes share the database, is kept so by
the database itself: migrations under an advisory lock, a background pass claimed once per
interval (background_job_runs), scope index builds under the builders' lock. Each test races
real processes (spawned, started together at a barrier) on a fresh database of the session's
server."""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import traceback
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Callable, Coroutine
from multiprocessing.queues import Queue
from multiprocessing.synchronize import Barrier
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit, urlunsplit

import asyncpg
import pytest

from haki_context.core.history.traces import prune
from haki_context.core.serving import jobs
from haki_context.core.serving.jobs import Job
from haki_context.core.serving.scope_indexes import build_pending
from haki_context.db import migrate, scope_indexes
from haki_context.db.pool import init_connection, keep_session

if TYPE_CHECKING:
    from haki_context.core.embedding.embedder import Embedder
    from haki_context.core.serving.runtime import Runtime

# The racing processes import this module: what only the test itself needs (the app, the
# GraphQL client of conftest) is imported inside the tests, so that each process starts fast.

RACERS = 3
RACE_TIMEOUT_S = 120.0
RETENTION_DAYS = 30.0
OLD_TRACES = 5
HOUR_S = 3600.0
SHORT_EVERY_S = 2.0
MIN_ROWS = 12  # HAKI_SCOPE_INDEX_ROWS of the scope index test
PROJECT = "default"  # development mode

Work = Callable[..., Coroutine[Any, Any, Any]]


def _with_database(uri: str, name: str) -> str:
    parts = urlsplit(uri)
    return urlunsplit((parts.scheme, parts.netloc, f"/{name}", parts.query, parts.fragment))


@pytest.fixture
async def fresh_db(pg_uri: str) -> AsyncIterator[str]:
    """An empty database on the session's server, dropped afterwards: no other test's traces,
    claims or scopes in it."""
    name = f"haki_once_{uuid.uuid4().hex[:10]}"
    admin = await asyncpg.connect(pg_uri)
    try:
        await admin.execute(f'CREATE DATABASE "{name}"')
        yield _with_database(pg_uri, name)
    finally:
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        await admin.close()


# --- the racing processes


def _racer(work: Work, start: Barrier, results: Queue[tuple[int, bool, Any]], args: tuple[Any, ...]) -> None:
    """One racing process: `work(start, *args)`, its result (or its traceback) put on `results`."""
    try:
        results.put((os.getpid(), True, asyncio.run(work(start, *args))))
    except BaseException:
        results.put((os.getpid(), False, traceback.format_exc()))


def _race(work: Work, *args: Any) -> list[Any]:
    """RACERS processes each running `work`, which waits at `start` (a barrier) once ready, so
    that all of them go at the same moment; their results."""
    ctx = multiprocessing.get_context("spawn")
    results: Queue[tuple[int, bool, Any]] = ctx.Queue()
    start = ctx.Barrier(RACERS)
    processes = [ctx.Process(target=_racer, args=(work, start, results, args)) for _ in range(RACERS)]
    for process in processes:
        process.start()
    try:
        answers = [results.get(timeout=RACE_TIMEOUT_S) for _ in processes]
    finally:
        for process in processes:
            process.join(timeout=10)
            if process.exitcode is None:
                process.kill()
                process.join()
    failed = [result for _, ok, result in answers if not ok]
    assert not failed, "\n".join(failed)
    assert len({pid for pid, _, _ in answers}) == RACERS
    return [result for _, _, result in answers]


async def _pool(dsn: str) -> asyncpg.Pool:
    """A small pool with the server's codecs, as each server process opens its own."""
    return await asyncpg.create_pool(dsn, min_size=1, max_size=2, init=init_connection, reset=keep_session)


async def _migrate(start: Barrier, dsn: str) -> list[str]:
    start.wait(RACE_TIMEOUT_S)
    return await migrate.apply(dsn)


async def _retention_pass(start: Barrier, dsn: str, every_s: float) -> dict[str, Any]:
    """What a server's retention loop does at each wake: claim the pass, prune when it won."""
    pool = await _pool(dsn)
    try:
        start.wait(RACE_TIMEOUT_S)
        won = await jobs.claim(pool, Job.TRACE_RETENTION, every_s)
        deleted = await prune(pool, RETENTION_DAYS) if won else None
        return {"won": won, "deleted": deleted, "runner": jobs.runner()}
    finally:
        await pool.close()


async def _build_scope_indexes(start: Barrier, dsn: str) -> list[list[str]] | None:
    pool = await _pool(dsn)
    try:
        start.wait(RACE_TIMEOUT_S)
        built = await build_pending(pool, MIN_ROWS)
        return None if built is None else [[s.project_id, s.subject_id, s.table] for s in built]
    finally:
        await pool.close()


# --- migrations


async def test_migrations_raced_by_three_processes_are_each_applied_once(fresh_db: str) -> None:
    expected = [name for name, _ in migrate.available()]
    applied: list[list[str]] = await asyncio.to_thread(_race, _migrate, fresh_db)
    # The processes' lists partition the shipped migrations: each applied by exactly one of them.
    assert sorted(name for names in applied for name in names) == expected, applied
    assert all(names == sorted(names) for names in applied), applied
    conn = await asyncpg.connect(fresh_db)
    try:
        rows = await conn.fetch("SELECT name, count(*) AS n FROM schema_migrations GROUP BY name ORDER BY name")
        assert [(r["name"], r["n"]) for r in rows] == [(name, 1) for name in expected]
        assert await migrate.pending(conn) == []
    finally:
        await conn.close()
    assert await migrate.apply(fresh_db) == []


# --- a background pass


async def _project_traces(rt: Runtime, project: str) -> set[str]:
    async with rt.pool.acquire() as conn:
        rows = await conn.fetch("SELECT id::text FROM context_traces WHERE project_id = $1", project)
    return {r["id"] for r in rows}


async def _age(rt: Runtime, trace_ids: list[str], days: int) -> None:
    async with rt.pool.acquire() as conn:
        await conn.execute(
            "UPDATE context_traces SET created_at = created_at - make_interval(days => $2) WHERE id = ANY($1::uuid[])",
            trace_ids,
            days,
        )


async def _last_claim_age_s(rt: Runtime) -> float:
    async with rt.pool.acquire() as conn:
        age: float = await conn.fetchval(
            "SELECT extract(epoch FROM clock_timestamp() - ran_at)::float8 FROM background_job_runs WHERE job = $1",
            Job.TRACE_RETENTION.value,
        )
    return age


async def test_a_trace_retention_pass_claimed_by_three_processes_runs_once_per_interval(
    fresh_db: str, hashing_embedder: Embedder
) -> None:
    from conftest import ProjectClient, client_for, make_settings, new_project_key, open_runtime_for
    from contextlib_helpers import assert_fact, context

    await migrate.apply(fresh_db)
    rt = await open_runtime_for(fresh_db, make_settings(fresh_db), hashing_embedder)
    try:
        project = f"project-{uuid.uuid4().hex[:12]}"
        base = client_for(rt)
        client = ProjectClient(base.http, await new_project_key(rt, project), project)
        try:
            await assert_fact(client, "ann", "likes", "apples")
            old = [(await context(client, "ann", f"q{i}", selection="traceId"))["traceId"] for i in range(OLD_TRACES)]
            recent = (await context(client, "ann", "recent", selection="traceId"))["traceId"]
        finally:
            await base.http.aclose()
        await _age(rt, old, 40)

        first: list[dict[str, Any]] = await asyncio.to_thread(_race, _retention_pass, fresh_db, HOUR_S)
        winners = [r for r in first if r["won"]]
        assert len(winners) == 1, first
        assert winners[0]["deleted"] == OLD_TRACES
        assert await _project_traces(rt, project) == {recent}
        async with rt.pool.acquire() as conn:
            runs = await conn.fetch("SELECT job, ran_by FROM background_job_runs")
        assert [(r["job"], r["ran_by"]) for r in runs] == [(Job.TRACE_RETENTION.value, winners[0]["runner"])]

        # Within the interval no process claims the pass, however many ask.
        await _age(rt, [recent], 40)
        again: list[dict[str, Any]] = await asyncio.to_thread(_race, _retention_pass, fresh_db, HOUR_S)
        assert [r["won"] for r in again] == [False] * RACERS, again
        assert await _project_traces(rt, project) == {recent}

        # Once the interval has passed since the last claim, exactly one process claims it again.
        while await _last_claim_age_s(rt) <= SHORT_EVERY_S:
            await asyncio.sleep(0.1)
        later: list[dict[str, Any]] = await asyncio.to_thread(_race, _retention_pass, fresh_db, SHORT_EVERY_S)
        winners = [r for r in later if r["won"]]
        assert len(winners) == 1, later
        assert winners[0]["deleted"] == 1
        assert await _project_traces(rt, project) == set()
    finally:
        await rt.pool.close()


# --- scope index builds


async def _scope_indexes(rt: Runtime, table: str, subject: str) -> list[tuple[str, str, bool]]:
    """(name, access method, valid) of every index on `table` restricted to `subject`'s rows."""
    async with rt.pool.acquire() as conn:
        rows = await conn.fetch(
            "SELECT c.relname, am.amname, i.indisvalid FROM pg_index i"
            " JOIN pg_class c ON c.oid = i.indexrelid JOIN pg_am am ON am.oid = c.relam"
            " WHERE i.indrelid = $1::regclass AND pg_get_expr(i.indpred, i.indrelid) LIKE $2"
            " ORDER BY am.amname",
            table,
            f"%subject_id = '{subject}'::text%",
        )
    return [(r["relname"], r["amname"], r["indisvalid"]) for r in rows]


async def test_scope_index_builds_raced_by_three_processes_build_each_index_once(
    fresh_db: str, hashing_embedder: Embedder
) -> None:
    from conftest import client_for, make_settings, open_runtime_for
    from contextlib_helpers import assert_fact, record

    await migrate.apply(fresh_db)
    rt = await open_runtime_for(fresh_db, make_settings(fresh_db, scope_index_rows=MIN_ROWS), hashing_embedder)
    try:
        client = client_for(rt)
        try:
            for subject, facts in (("big", MIN_ROWS), ("wide", MIN_ROWS + 2), ("small", MIN_ROWS - 1)):
                for i in range(facts):
                    await assert_fact(client, subject, f"fact_{i}", f"value {i} about topic {i % 5}", mode="ADD")
            await record(client, "big", [f"turn {i} about topic {i % 5}" for i in range(MIN_ROWS)])
        finally:
            await client.http.aclose()

        results: list[list[list[str]] | None] = await asyncio.to_thread(_race, _build_scope_indexes, fresh_db)
        built = Counter(tuple(scope) for result in results for scope in result or [])
        wanted = {(PROJECT, "big", "facts"), (PROJECT, "big", "episode_chunks"), (PROJECT, "wide", "facts")}
        assert set(built) == wanted, results
        assert set(built.values()) == {1}, results  # no scope built by two processes
        # The builders' lock is held for a whole pass: the others found it taken (None) or found
        # nothing left to build, once the first was done.
        assert sum(1 for result in results if result) == 1, results

        for _, subject, table in sorted(wanted):
            indexes = await _scope_indexes(rt, table, subject)
            assert indexes == [
                (scope_indexes.index_name(table, PROJECT, subject), "hnsw", True),
                (scope_indexes.ivf_index_name(table, PROJECT, subject), "ivfflat", True),
            ], indexes
        for table in scope_indexes.TABLES:
            assert await _scope_indexes(rt, table, "small") == []
        async with rt.pool.acquire() as conn:
            ready = await conn.fetch(
                "SELECT subject_id, table_name, count(*) AS n FROM scope_vector_indexes"
                " WHERE ready_at IS NOT NULL GROUP BY subject_id, table_name"
            )
        assert {(PROJECT, r["subject_id"], r["table_name"]) for r in ready} == wanted
        assert {r["n"] for r in ready} == {1}
    finally:
        await rt.pool.close()
