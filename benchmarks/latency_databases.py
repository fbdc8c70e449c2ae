"""The benchmark database of each N: created and seeded (or a kept one reused, with what the
server's background pass would build for it), the seeding's figures kept in its comment for a later
`--reuse` run, and dropped afterwards unless kept."""

from __future__ import annotations

import contextlib
import json
import time
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import asyncpg

from haki_context.core.serving.runtime import Runtime
from haki_context.core.serving.scope_indexes import build_pending
from haki_context.db import scope_indexes

from .latency_common import INGEST_SUBJECT, OTHERS, PROJECT, SUBJECT, Config, log
from .latency_seed import EmbeddingCache, build_corpus, embed_cached, seed


def database_dsn(base: str, name: str) -> str:
    parts = urlsplit(base)
    return urlunsplit(parts._replace(path=f"/{name}"))


async def create_database(base: str, name: str) -> str:
    conn = await asyncpg.connect(base)
    try:
        await conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        await conn.execute(f'CREATE DATABASE "{name}"')
    finally:
        await conn.close()
    return database_dsn(base, name)


async def seeded(base: str, name: str, n: int) -> bool:
    """True when database `name` holds a seeded subject of N facts (kept by an earlier --keep run)."""
    conn = await asyncpg.connect(base)
    try:
        if not await conn.fetchval("SELECT 1 FROM pg_database WHERE datname = $1", name):
            return False
    finally:
        await conn.close()
    conn = await asyncpg.connect(database_dsn(base, name))
    try:
        rows = await conn.fetchval(
            "SELECT fact_rows FROM subjects WHERE project_id = $1 AND subject_id = $2", PROJECT, SUBJECT
        )
        if rows != n:
            return False
        # The ingestion phase writes into a subject of its own: start it empty again.
        await conn.execute("DELETE FROM events WHERE project_id = $1 AND subject_id = $2", PROJECT, INGEST_SUBJECT)
        await conn.execute("DELETE FROM subjects WHERE project_id = $1 AND subject_id = $2", PROJECT, INGEST_SUBJECT)
        return True
    finally:
        await conn.close()


async def keep_seed_report(dsn: str, report: dict[str, Any]) -> None:
    """Keep the seeding's figures with the database (its comment), for a later --reuse run to report."""
    conn = await asyncpg.connect(dsn)
    try:
        text = json.dumps({**report, "seeded_at": datetime.now(UTC).isoformat(timespec="seconds")})
        literal = await conn.fetchval("SELECT quote_literal($1::text)", text)
        await conn.execute(
            f"COMMENT ON DATABASE {await conn.fetchval('SELECT quote_ident(current_database())')} IS {literal}"
        )
    finally:
        await conn.close()


async def seed_report_of(dsn: str) -> dict[str, Any]:
    conn = await asyncpg.connect(dsn)
    try:
        text = await conn.fetchval(
            "SELECT shobj_description(oid, 'pg_database') FROM pg_database WHERE datname = current_database()"
        )
    finally:
        await conn.close()
    return json.loads(text) if text else {}


async def drop_database(base: str, name: str) -> None:
    conn = await asyncpg.connect(base)
    try:
        await conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    finally:
        await conn.close()


async def postgres_info(dsn: str) -> dict[str, Any]:
    conn = await asyncpg.connect(dsn)
    try:
        out = {"version": await conn.fetchval("SHOW server_version")}
        for name in (
            "shared_buffers",
            "work_mem",
            "effective_cache_size",
            "max_parallel_workers_per_gather",
            "max_parallel_maintenance_workers",
        ):
            out[name] = await conn.fetchval(f"SHOW {name}")
        with contextlib.suppress(asyncpg.PostgresError):
            out["pgvector"] = await conn.fetchval("SELECT extversion FROM pg_extension WHERE extname = 'vector'")
        return out
    finally:
        await conn.close()


async def _build_indexes(rt: Runtime, cfg: Config) -> list[Any]:
    """What the server's background pass does: build missing scope indexes, refresh the common-lexeme lists."""
    s = rt.settings
    built = await build_pending(
        rt.pool,
        s.scope_index_rows,
        ivf_rows=s.ivf_index_rows,
        build_memory=cfg.maintenance_work_mem,
        lexeme_rows=s.full_text_lexeme_rows,
    )
    return list(built or [])


async def prepare(rt: Runtime, cfg: Config, n: int, dsn: str, *, reused: bool) -> dict[str, Any]:
    """Seed the subject of N facts and N events (or take the kept one); returns the seeding's figures."""
    if reused:
        report = {**await seed_report_of(dsn), "reused": True}
        log(f"N={n}: reusing the kept database (seeded {report.get('seeded_at', '?')})")
        t = time.perf_counter()
        await _build_indexes(rt, cfg)
        report["maintenance_s"] = round(time.perf_counter() - t, 2)
        return report
    settings = rt.settings
    log(f"N={n}: corpus and embeddings ({rt.embedder.name})")
    corpus = build_corpus(n, settings.episode_excerpt_chars)
    cache = EmbeddingCache(cfg.cache_dir, rt.embedder.name)
    fact_vectors, fact_info = await embed_cached(cache, corpus.fact_texts, rt.embedder.embed_many, log=log)
    chunk_vectors, chunk_info = await embed_cached(cache, corpus.chunk_texts, rt.embedder.embed_many, log=log)
    log(f"N={n}: loading {n} facts and {n} events x 10 subjects")
    loaded = await seed(
        dsn,
        project_id=PROJECT,
        subject_id=SUBJECT,
        others=OTHERS,
        corpus=corpus,
        fact_vectors=fact_vectors,
        chunk_vectors=chunk_vectors,
        sigma=cfg.sigma,
        maintenance_work_mem=cfg.maintenance_work_mem,
        log=log,
    )
    # As the server does in the background: an HNSW index for every scope past scope_index_rows.
    t = time.perf_counter()
    built = await _build_indexes(rt, cfg)
    loaded.timings_s["create_scope_indexes"] = round(time.perf_counter() - t, 2)
    loaded.hnsw_indexes.update(
        {
            scope_indexes.index_name(
                b.table, b.project_id, b.subject_id
            ): f"{b.table} of {b.subject_id} ({b.rows} rows)"
            for b in built
        }
    )
    log(f"  built {len(built)} scope indexes in {loaded.timings_s['create_scope_indexes']:.1f} s")
    report = {
        "rows": loaded.rows,
        "timings_s": loaded.timings_s,
        "hnsw_indexes": loaded.hnsw_indexes,
        "embedding": {"facts": fact_info, "chunks": chunk_info},
        "sigma": cfg.sigma,
        "subjects": len(loaded.subjects),
    }
    await keep_seed_report(dsn, report)
    return report
