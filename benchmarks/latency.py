"""Latency benchmark (issue 6): `python -m benchmarks.latency`.

For each N (default 1,000 and 10,000; `--n 100000` opt-in), in one run:

1. a fresh database (in a fresh embedded PostgreSQL in a temp dir, or one
   database per N on the server of `--database-url`), migrated; one subject
   holding N facts and N events, plus 9 other subjects holding copies of its
   rows with perturbed vectors (so the subject is 10% of the tables), loaded
   with COPY (see benchmarks/latency_seed.py). The subject's texts are
   embedded once with the real embedder and cached in benchmarks/cache/;
2. (a) `assemble(rt, project, subject, query, 900)` in-process, timed, with the
   breakdown of its trace timings (embed / retrieve / pack / persist / total),
   then a few calls each after 2 s of idleness (an agent calling now and then);
3. (d) our fact-candidate SQL (`retrieval.fact_candidates`, with the
   SearchParams the assembler builds) beside the naive baseline (the full
   hybrid score over every active fact of the subject in one statement, ORDER
   BY score LIMIT 64), same query vector, pair by pair; and phase-1 recall of
   the vector branch against an exact scan (fact k = 64, episode k = 8);
4. a real server (`python -m haki_context.cli serve` on 127.0.0.1, the same
   database, dev mode) with its RSS sampled: (b) one client (a lean
   keep-alive HTTP/1.1 client, benchmarks/lean_http.py: httpx's own ~1.5 ms
   per call is not the server's), an agent's selection, the same through
   httpx, then a debugging selection (every trace decision with every score
   component and `fact { predicate }`); (c) the agent selection from 8
   concurrent clients, with throughput; the overhead outside the trace is
   client time minus the trace's totalMs (read back from context_traces):
   GraphQL, HTTP, and the trace write's commit and round trip (persistMs is
   the write statement as the database timed it);
5. ingestion: events/s through `recordEvents` over GraphQL in batches of 200
   (into a subject of its own), beside the raw embedder's throughput on the
   same texts measured right before and right after in this process.

Every query text is distinct across the whole run (the query cache cannot
flatter a figure); the cache hit rates are reported. Writes
benchmarks/results/latency-<date>.json, .md and .png and prints the table.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import itertools
import json
import logging
import math
import os
import platform
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import asyncpg
import httpx
import numpy as np
import psutil

from haki_context.app import open_runtime
from haki_context.core import assembler
from haki_context.core.assembler import assemble
from haki_context.core.runtime import Runtime
from haki_context.core.scope_indexes import build_pending
from haki_context.core.texts import event_chunks
from haki_context.db import embedded, retrieval, scope_indexes
from haki_context.settings import Settings

from . import latency_texts
from .latency_report import missing_figures, plot, table
from .latency_seed import EmbeddingCache, build_corpus, embed_cached, seed
from .lean_http import LeanClient

REPO_ROOT = Path(__file__).resolve().parents[1]
DEFAULT_OUT = Path(__file__).resolve().parent / "results"
DEFAULT_CACHE = Path(__file__).resolve().parent / "cache"
PROJECT = "default"  # the project dev mode serves
SUBJECT = "bench-subject"
OTHERS = [f"bench-other-{k}" for k in range(1, 10)]
INGEST_SUBJECT = "bench-ingest"

AGENT_QUERY = """query Agent($s: String!, $q: String!, $b: Int) {
  context(subjectId: $s, query: $q, budget: $b) {
    traceId rendered
    facts { id predicate value score }
    episodes { eventId chunk excerpt score }
  }
}"""

DEBUG_QUERY = """query Debug($s: String!, $q: String!, $b: Int) {
  context(subjectId: $s, query: $q, budget: $b) {
    traceId rendered
    facts { id predicate value score }
    episodes { eventId chunk excerpt score }
    trace {
      id
      timings { embedMs retrieveMs packMs persistMs totalMs }
      counts { included excluded blocked }
      decisions {
        itemKind itemId chunk decision reasonCode rank
        score similarity fullText recency distance tokens viaEntity
        fact { predicate }
      }
    }
  }
}"""

RECORD_EVENTS = """mutation Record($inputs: [EventInput!]!) { recordEvents(inputs: $inputs) { id } }"""

# The naive baseline: the full hybrid score over every servable fact of the subject, one statement.
# Same hard filters and the same OR-of-lexemes tsquery as the server; no candidate generation.
NAIVE_SQL = """
WITH tq AS (
    SELECT (SELECT string_agg('''' || replace(replace(lexeme, '\\', '\\\\'), '''', '''''') || '''', ' | ')::tsquery
              FROM (SELECT lexeme FROM unnest(to_tsvector('english', $4::text)) ORDER BY positions[1], lexeme
                    LIMIT $6) lexemes) AS q
)
SELECT f.id, f.predicate, f.value, f.confidence, f.valid_from, f.valid_to, f.recorded_at,
       f.last_reinforced_at, f.source_event_ids, f.volatility, f.text,
       $7::float8 * (1 - (f.embedding <=> $3))
       + $8::float8 * coalesce(ts_rank_cd(f.search_vector, tq.q), 0)
       + $9::float8 * exp(-greatest(0, extract(epoch FROM $5::timestamptz
                                   - coalesce(f.valid_from, f.recorded_at))::float8) / $10::float8) AS score
FROM facts f, tq
WHERE f.project_id = $1 AND f.subject_id = $2 AND f.status = 'ACTIVE'
  AND (f.valid_to IS NULL OR f.valid_to > $5) AND (f.valid_from IS NULL OR f.valid_from <= $5)
  AND f.open_conflict_id IS NULL
ORDER BY score DESC, f.id
LIMIT $11
"""

# Exact k nearest distances over the same eligible facts as phase 1 (OFFSET 0: no index can serve it).
EXACT_FACTS_SQL = """
SELECT d FROM (
    SELECT f.embedding <=> $3 AS d FROM facts f
    WHERE f.project_id = $1 AND f.subject_id = $2 AND f.status = 'ACTIVE'
      AND (f.valid_to IS NULL OR f.valid_to > $4) AND (f.valid_from IS NULL OR f.valid_from <= $4)
      AND f.open_conflict_id IS NULL
    OFFSET 0) s
ORDER BY d LIMIT $5
"""

EXACT_CHUNKS_SQL = """
SELECT d FROM (
    SELECT c.embedding <=> $3 AS d FROM episode_chunks c
    WHERE c.project_id = $1 AND c.subject_id = $2
    OFFSET 0) s
ORDER BY d LIMIT $4
"""


def log(message: str) -> None:
    print(f"[{datetime.now().strftime('%H:%M:%S')}] {message}", flush=True)


# --- configuration


@dataclass
class Config:
    ns: list[int]
    embedder: str = "onnx"
    database_url: str | None = None
    queries: int = 200  # (a) in-process calls
    http_queries: int = 200  # (b) agent selection, one client
    debug_queries: int = 100  # (b) debugging selection, one client
    concurrency: int = 8
    concurrent_calls: int = 320  # (c) in all, over the clients
    sql_pairs: int = 100  # (d) pairs, and the recall queries
    warmup: int = 10
    ingest: int = 1000
    ingest_batch: int = 200
    idle_calls: int = 10  # (a) calls each after idle_s seconds of idleness
    idle_s: float = 2.0
    budget: int = 900
    sigma: float = 0.01
    maintenance_work_mem: str = "1GB"
    cache_dir: Path = DEFAULT_CACHE
    out: Path = DEFAULT_OUT
    overrides: dict[str, str] = field(default_factory=dict)
    smoke: bool = False
    keep: bool = False
    reuse: bool = False
    argv: list[str] = field(default_factory=list)


def parse_args(argv: list[str] | None = None) -> Config:
    p = argparse.ArgumentParser(
        prog="python -m benchmarks.latency", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--n", default=None, help="comma-separated subject sizes (default 1000,10000; 100000 opt-in)")
    p.add_argument("--smoke", action="store_true", help="N = 200, a few queries of each kind")
    p.add_argument(
        "--embedder",
        choices=["onnx", "onnx-fp32", "minilm", "hashing"],
        default=Settings().embed_provider.value,
        help="default: the server's (onnx); hashing: a fast stand-in for smoke runs (it knows no meaning)",
    )
    p.add_argument(
        "--database-url",
        default=None,
        help="a PostgreSQL server to use instead of a fresh embedded one (one database per N is "
        "created on it, dropped afterwards unless --keep)",
    )
    p.add_argument("--queries", type=int, default=None, help="in-process calls per N (default 200)")
    p.add_argument("--http-queries", type=int, default=None, help="HTTP agent-selection calls per N (200)")
    p.add_argument("--debug-queries", type=int, default=None, help="HTTP debugging-selection calls per N (100)")
    p.add_argument("--concurrency", type=int, default=8)
    p.add_argument("--concurrent-calls", type=int, default=None, help="calls over all concurrent clients (320)")
    p.add_argument("--sql-pairs", type=int, default=None, help="our SQL / naive SQL pairs and recall queries (100)")
    p.add_argument("--warmup", type=int, default=None, help="warm-up calls before each timed phase (10)")
    p.add_argument("--ingest", type=int, default=None, help="events recorded through recordEvents per N (1000)")
    p.add_argument("--ingest-batch", type=int, default=200)
    p.add_argument("--idle-calls", type=int, default=None, help="in-process calls each after --idle s idle (10)")
    p.add_argument("--idle", type=float, default=None, help="seconds idle before each of those calls (2; smoke 0.2)")
    p.add_argument("--budget", type=int, default=900)
    p.add_argument("--sigma", type=float, default=0.01, help="gaussian noise per dimension of the copies' vectors")
    p.add_argument("--maintenance-work-mem", default="1GB", help="for the HNSW rebuild after the load")
    p.add_argument("--cache-dir", type=Path, default=DEFAULT_CACHE)
    p.add_argument("--out", type=Path, default=DEFAULT_OUT)
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a haki_context Settings field, for the in-process runtime and the server alike",
    )
    p.add_argument("--keep", action="store_true", help="with --database-url: keep the benchmark databases")
    p.add_argument(
        "--reuse",
        action="store_true",
        help="with --database-url: measure on a kept database of the same N instead of seeding anew",
    )
    a = p.parse_args(argv)
    smoke = a.smoke
    defaults = (
        dict(
            queries=6,
            http_queries=6,
            debug_queries=4,
            concurrent_calls=16,
            sql_pairs=6,
            warmup=2,
            ingest=100,
            idle_calls=2,
            idle=0.2,
        )
        if smoke
        else dict(
            queries=200,
            http_queries=200,
            debug_queries=100,
            concurrent_calls=320,
            sql_pairs=100,
            warmup=10,
            ingest=1000,
            idle_calls=10,
            idle=2.0,
        )
    )

    def pick(name: str) -> Any:
        value = getattr(a, name)
        return defaults[name] if value is None else value

    ns = [int(x.replace("_", "")) for x in a.n.split(",")] if a.n else ([200] if smoke else [1000, 10000])
    overrides = {}
    for item in a.set:
        name, _, value = item.partition("=")
        if name not in Settings.model_fields or not _:
            p.error(f"--set {item!r}: expected NAME=VALUE with NAME a Settings field")
        overrides[name] = value
    return Config(
        ns=ns,
        embedder=a.embedder,
        database_url=a.database_url,
        queries=pick("queries"),
        http_queries=pick("http_queries"),
        debug_queries=pick("debug_queries"),
        concurrency=a.concurrency,
        concurrent_calls=pick("concurrent_calls"),
        sql_pairs=pick("sql_pairs"),
        warmup=pick("warmup"),
        ingest=pick("ingest"),
        idle_calls=pick("idle_calls"),
        idle_s=pick("idle"),
        ingest_batch=a.ingest_batch if not (smoke and a.ingest_batch == 200) else 50,
        budget=a.budget,
        sigma=a.sigma,
        maintenance_work_mem=a.maintenance_work_mem,
        cache_dir=a.cache_dir,
        out=a.out,
        overrides=overrides,
        smoke=smoke,
        keep=a.keep,
        reuse=a.reuse,
        argv=list(sys.argv if argv is None else argv),
    )


# --- small helpers


def dist(values: list[float]) -> dict[str, float]:
    """p50/p95/p99, mean, min, max of milliseconds (or any figure)."""
    if not values:
        return {
            "count": 0,
            "p50": math.nan,
            "p95": math.nan,
            "p99": math.nan,
            "mean": math.nan,
            "min": math.nan,
            "max": math.nan,
        }
    a = np.asarray(values, dtype=np.float64)
    p50, p95, p99 = np.percentile(a, [50, 95, 99])
    return {
        "count": len(values),
        "p50": round(float(p50), 3),
        "p95": round(float(p95), 3),
        "p99": round(float(p99), 3),
        "mean": round(float(a.mean()), 3),
        "min": round(float(a.min()), 3),
        "max": round(float(a.max()), 3),
    }


def _ms(since: float) -> float:
    return (time.perf_counter() - since) * 1000.0


class Questions:
    """Distinct questions for the whole run; every call takes new ones."""

    def __init__(self) -> None:
        self._it: Iterator[str] = latency_texts.questions()
        self.used = 0

    def take(self, k: int) -> list[str]:
        self.used += k
        return list(itertools.islice(self._it, k))


def search_params(rt: Runtime, subject: str, vector: np.ndarray, query: str, now: datetime) -> retrieval.SearchParams:
    """The SearchParams `assembler.assemble` builds, for the benchmark's project."""
    own = rt.own_indexes.tables(PROJECT, subject)
    return assembler.search_params(rt.settings, PROJECT, subject, vector, query, now, own_index_tables=own)


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
    """Keep the seed's figures with the database (its comment), for a later --reuse run to report."""
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


# --- (a) in-process


async def measure_in_process(rt: Runtime, cfg: Config, qs: Questions) -> dict[str, Any]:
    for q in qs.take(cfg.warmup):
        await assemble(rt, PROJECT, SUBJECT, q, cfg.budget)
    hits, misses = rt.embedder.cache_hits, rt.embedder.cache_misses
    client: list[float] = []
    parts: dict[str, list[float]] = {k: [] for k in ("embed", "retrieve", "pack", "persist", "total")}
    facts, episodes, decisions = [], [], []
    for q in qs.take(cfg.queries):
        t = time.perf_counter()
        packet = await assemble(rt, PROJECT, SUBJECT, q, cfg.budget)
        client.append(_ms(t))
        tm = packet.trace.timings
        for k in parts:
            parts[k].append(getattr(tm, f"{k}_ms"))
        facts.append(len(packet.facts))
        episodes.append(len(packet.episodes))
        decisions.append(len(packet.trace.decisions or ()))
    hits, misses = rt.embedder.cache_hits - hits, rt.embedder.cache_misses - misses
    # What an agent calling now and then meets: each call after the process sat idle.
    after_idle = []
    for q in qs.take(cfg.idle_calls):
        await asyncio.sleep(cfg.idle_s)
        t = time.perf_counter()
        await assemble(rt, PROJECT, SUBJECT, q, cfg.budget)
        after_idle.append(_ms(t))
    return {
        "latency_ms": dist(client),
        "after_idle_ms": {**dist(after_idle), "idle_s": cfg.idle_s},
        "breakdown_ms": {k: dist(v) for k, v in parts.items()},
        "outside_trace_ms": dist([c - t for c, t in zip(client, parts["total"])]),
        "facts_served_mean": float(np.mean(facts)),
        "episodes_served_mean": float(np.mean(episodes)),
        "decisions_mean": float(np.mean(decisions)),
        "query_cache": {"hits": hits, "misses": misses, "hit_rate": hits / max(1, hits + misses)},
    }


# --- (d) our SQL against the naive baseline, and phase-1 recall


async def measure_sql(rt: Runtime, cfg: Config, qs: Questions) -> tuple[dict[str, Any], dict[str, Any]]:
    s = rt.settings
    ours, naive, episodes_sql, ratios = [], [], [], []
    fact_recall, chunk_recall, fact_full, chunk_full, rows_back = [], [], [], [], []
    hits, misses = rt.embedder.cache_hits, rt.embedder.cache_misses
    questions = qs.take(cfg.warmup + cfg.sql_pairs)
    async with rt.pool.acquire() as conn:
        for i, q in enumerate(questions):
            vector = await rt.embedder.embed_query(q)
            now = datetime.now(UTC)
            p = search_params(rt, SUBJECT, vector, q, now)
            args = (
                PROJECT,
                SUBJECT,
                vector,
                q,
                now,
                s.max_query_lexemes,
                s.weight_similarity,
                s.weight_full_text,
                s.weight_recency,
                s.recency_tau_days * 86400.0,
                s.retrieval_top_k,
            )

            async def run_ours() -> float:
                t = time.perf_counter()
                found = await retrieval.fact_candidates(conn, p, s.retrieval_top_k, s.blocked_trace_limit)
                rt.own_indexes.saw(PROJECT, SUBJECT, "facts", found.own_index)  # as the assembler does
                rows_back.append(len(found.candidates))
                return _ms(t)

            async def run_naive() -> float:
                t = time.perf_counter()
                await conn.fetch(NAIVE_SQL, *args)
                return _ms(t)

            # Alternate the order, so neither statement always runs on the other's warm cache.
            if i % 2 == 0:
                o, n = await run_ours(), await run_naive()
            else:
                n, o = await run_naive(), await run_ours()
            t = time.perf_counter()
            episodes = await retrieval.episode_candidates(conn, p, s.episode_top_k, s.episode_text_k)
            e = _ms(t)
            rt.own_indexes.saw(PROJECT, SUBJECT, "episode_chunks", episodes.own_index)
            if i < cfg.warmup:
                continue
            ours.append(o)
            naive.append(n)
            episodes_sql.append(e)
            ratios.append(o / n)

            # Phase-1 recall: the vector branch alone (an empty query matches no text), against an exact scan.
            vec_only = dataclasses.replace(p, query="")
            found = await retrieval.fact_candidates(conn, vec_only, s.retrieval_top_k, s.blocked_trace_limit)
            got = [row.distance for row, _ in found.candidates]
            exact = [
                r["d"] for r in await conn.fetch(EXACT_FACTS_SQL, PROJECT, SUBJECT, vector, now, s.retrieval_top_k)
            ]
            if exact:
                fact_recall.append(sum(d <= exact[-1] + 1e-6 for d in got) / len(exact))
                fact_full.append(len(got) >= len(exact))
            chunks = (await retrieval.episode_candidates(conn, vec_only, s.episode_top_k, 0)).chunks
            exact_c = [r["d"] for r in await conn.fetch(EXACT_CHUNKS_SQL, PROJECT, SUBJECT, vector, s.episode_top_k)]
            if exact_c:
                chunk_recall.append(sum(c.distance <= exact_c[-1] + 1e-6 for c in chunks) / len(exact_c))
                chunk_full.append(len(chunks) >= len(exact_c))
    hits, misses = rt.embedder.cache_hits - hits, rt.embedder.cache_misses - misses
    p50_ours, p50_naive = float(np.median(ours)), float(np.median(naive))
    sql = {
        "ours_fact_candidates_ms": dist(ours),
        "naive_full_scan_ms": dist(naive),
        "episode_candidates_ms": dist(episodes_sql),
        "ratio_ours_over_naive": {
            "p50_of_ratios": round(float(np.median(ratios)), 4),
            "ratio_of_p50s": round(p50_ours / p50_naive, 4),
            "speedup_p50": round(p50_naive / p50_ours, 2),
        },
        "fact_candidate_rows_mean": float(np.mean(rows_back)) if rows_back else 0.0,
        "query_cache": {"hits": hits, "misses": misses, "hit_rate": hits / max(1, hits + misses)},
    }
    async with rt.pool.acquire() as conn:
        indexed = {table for subject, table, _ in await scope_indexes.ready(conn, PROJECT) if subject == SUBJECT}
    recall = {
        # The plan retrieval.py picks: the scope's own HNSW index once it is READY, else the exact scan.
        "facts_plan": "hnsw" if "facts" in indexed else "exact",
        "episodes_plan": "hnsw" if "episode_chunks" in indexed else "exact",
        "facts_k": s.retrieval_top_k,
        "facts_mean": round(float(np.mean(fact_recall)), 4) if fact_recall else math.nan,
        "facts_min": round(float(np.min(fact_recall)), 4) if fact_recall else math.nan,
        # The tail: a scope's HNSW graph can miss a tight cluster of near-identical facts whole.
        "facts_below_0_9": float(np.mean(np.array(fact_recall) < 0.9)) if fact_recall else math.nan,
        "facts_full_rows_share": float(np.mean(fact_full)) if fact_full else math.nan,
        "episodes_k": s.episode_top_k,
        "episodes_mean": round(float(np.mean(chunk_recall)), 4) if chunk_recall else math.nan,
        "episodes_min": round(float(np.min(chunk_recall)), 4) if chunk_recall else math.nan,
        "episodes_below_0_9": float(np.mean(np.array(chunk_recall) < 0.9)) if chunk_recall else math.nan,
        "episodes_full_rows_share": float(np.mean(chunk_full)) if chunk_full else math.nan,
        "queries": len(fact_recall),
    }
    return sql, recall


# --- the server subprocess


class Server:
    """`python -m haki_context.cli serve` on 127.0.0.1, with its RSS sampled; the code is the
    checkout at `root` (this one by default, another revision's worktree for benchmarks.revision_ab)."""

    def __init__(self, dsn: str, cfg: Config, workdir: Path, root: Path = REPO_ROOT) -> None:
        self.dsn, self.cfg, self.workdir, self.root = dsn, cfg, workdir, root
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen[bytes] | None = None
        self.peak_rss = 0
        self.ready_rss = 0
        self.startup_s = math.nan
        self._sampler: asyncio.Task[None] | None = None
        self.log_path = workdir / f"server-{self.port}.log"

    async def start(self) -> None:
        env = dict(os.environ)
        env.update(
            {
                "HAKI_DATABASE_URL": self.dsn,
                "HAKI_DEV_MODE": "1",
                "HAKI_HOST": "127.0.0.1",
                "HAKI_PORT": str(self.port),
                "HAKI_EMBED_PROVIDER": self.cfg.embedder,
            }
        )
        env.pop("HAKI_TRACE_RETENTION_DAYS", None)
        for name, value in self.cfg.overrides.items():
            env[f"HAKI_{name.upper()}"] = value
        t = time.perf_counter()
        self._log = open(self.log_path, "wb")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "haki_context.cli", "serve", "--host", "127.0.0.1", "--port", str(self.port)],
            cwd=self.root,
            env=env,
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )
        self._sampler = asyncio.create_task(self._sample())
        async with httpx.AsyncClient(timeout=5.0) as client:
            deadline = time.monotonic() + 300
            while True:
                if self.proc.poll() is not None:
                    raise RuntimeError(f"the server exited with {self.proc.returncode}:\n{self.log_tail()}")
                if time.monotonic() > deadline:
                    raise RuntimeError(f"the server was not ready after 300 s:\n{self.log_tail()}")
                with contextlib.suppress(httpx.HTTPError):
                    r = await client.get(f"{self.url}/readyz")
                    if r.status_code == 200:
                        break
                await asyncio.sleep(0.2)
        self.startup_s = time.perf_counter() - t
        self.ready_rss = self._rss()

    def _rss(self) -> int:
        try:
            return psutil.Process(self.proc.pid).memory_info().rss if self.proc else 0
        except psutil.Error:
            return 0

    def hwm(self) -> int | None:
        """The kernel's own peak RSS of the server (VmHWM), where /proc has it."""
        try:
            for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():  # type: ignore[union-attr]
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
        except (OSError, ValueError, AttributeError):
            return None
        return None

    async def _sample(self) -> None:
        while self.proc is not None and self.proc.poll() is None:
            self.peak_rss = max(self.peak_rss, self._rss())
            await asyncio.sleep(0.05)

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    async def stop(self) -> dict[str, Any]:
        hwm = self.hwm()
        self.peak_rss = max(self.peak_rss, self._rss())
        if self._sampler is not None:
            self._sampler.cancel()
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                await asyncio.to_thread(self.proc.wait, 30)
            except subprocess.TimeoutExpired:
                self.proc.terminate()
                try:
                    await asyncio.to_thread(self.proc.wait, 10)
                except subprocess.TimeoutExpired:
                    self.proc.kill()
                    await asyncio.to_thread(self.proc.wait)
        self._log.close()
        peak = max(self.peak_rss, hwm or 0)
        return {
            "startup_s": round(self.startup_s, 2),
            "rss_ready_mb": round(self.ready_rss / 2**20, 1),
            "peak_rss_sampled_mb": round(self.peak_rss / 2**20, 1),
            "peak_rss_vmhwm_mb": round(hwm / 2**20, 1) if hwm else None,
            "peak_rss_mb": round(peak / 2**20, 1),
        }


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def graphql(
    client: LeanClient | httpx.AsyncClient, query: str, variables: dict[str, Any]
) -> tuple[float, dict[str, Any]]:
    """One GraphQL call: (client-side ms from sending the request to the last byte read, data)."""
    request = {"query": query, "variables": variables}
    t = time.perf_counter()
    if isinstance(client, LeanClient):
        status, raw = await client.post_json("/graphql", request)
        ms = _ms(t)
    else:
        r = await client.post("/graphql", json=request)
        ms = _ms(t)
        status, raw = r.status_code, r.content
    body = json.loads(raw)
    if status != 200 or body.get("errors"):
        raise RuntimeError(f"GraphQL call failed ({status}): {str(body)[:500]}")
    return ms, body["data"]


async def trace_rows(rt: Runtime, ids: list[str]) -> dict[str, dict[str, float]]:
    async with rt.pool.acquire() as conn:
        rows = await conn.fetch(
            "SELECT id, embed_ms, retrieve_ms, pack_ms, persist_ms, total_ms FROM context_traces"
            " WHERE project_id = $1 AND id = ANY($2::uuid[])",
            PROJECT,
            ids,
        )
    return {str(r["id"]): dict(r) for r in rows}


def server_side(calls: list[tuple[float, str]], traces: dict[str, dict[str, float]]) -> dict[str, Any]:
    """Client latency minus trace totalMs (GraphQL + HTTP), the server's own breakdown, inferred cache hits."""
    rows = [(ms, traces[i]) for ms, i in calls if i in traces]
    parts = {k: dist([t[f"{k}_ms"] for _, t in rows]) for k in ("embed", "retrieve", "pack", "persist", "total")}
    hits = sum(t["embed_ms"] < 0.05 for _, t in rows)  # a cache hit costs microseconds, an encode milliseconds
    return {
        "overhead_ms": dist([ms - t["total_ms"] for ms, t in rows]),
        "server_breakdown_ms": parts,
        "query_cache_inferred": {"hits": hits, "calls": len(rows), "hit_rate": hits / max(1, len(rows))},
    }


async def measure_http(rt: Runtime, server: Server, cfg: Config, qs: Questions) -> dict[str, Any]:
    out: dict[str, Any] = {}
    client = LeanClient(server.url)
    try:
        for q in qs.take(cfg.warmup):
            await graphql(client, AGENT_QUERY, {"s": SUBJECT, "q": q, "b": cfg.budget})
        calls: list[tuple[float, str]] = []
        for q in qs.take(cfg.http_queries):
            ms, data = await graphql(client, AGENT_QUERY, {"s": SUBJECT, "q": q, "b": cfg.budget})
            calls.append((ms, data["context"]["traceId"]))
        out["agent"] = {
            "latency_ms": dist([ms for ms, _ in calls]),
            **server_side(calls, await trace_rows(rt, [i for _, i in calls])),
        }

        # The same selection through httpx, the client most Python agents call through.
        async with httpx.AsyncClient(base_url=server.url, timeout=120.0) as hx:
            for q in qs.take(max(1, cfg.warmup // 2)):
                await graphql(hx, AGENT_QUERY, {"s": SUBJECT, "q": q, "b": cfg.budget})
            calls = []
            for q in qs.take(cfg.http_queries):
                ms, data = await graphql(hx, AGENT_QUERY, {"s": SUBJECT, "q": q, "b": cfg.budget})
                calls.append((ms, data["context"]["traceId"]))
        out["agent_httpx"] = {
            "latency_ms": dist([ms for ms, _ in calls]),
            **server_side(calls, await trace_rows(rt, [i for _, i in calls])),
        }

        for q in qs.take(max(1, cfg.warmup // 2)):
            await graphql(client, DEBUG_QUERY, {"s": SUBJECT, "q": q, "b": cfg.budget})
        calls, decisions = [], []
        for q in qs.take(cfg.debug_queries):
            ms, data = await graphql(client, DEBUG_QUERY, {"s": SUBJECT, "q": q, "b": cfg.budget})
            calls.append((ms, data["context"]["traceId"]))
            decisions.append(len(data["context"]["trace"]["decisions"]))
        out["debug"] = {
            "latency_ms": dist([ms for ms, _ in calls]),
            "decisions_mean": float(np.mean(decisions)) if decisions else 0.0,
            **server_side(calls, await trace_rows(rt, [i for _, i in calls])),
        }
    finally:
        await client.aclose()
    return out


async def measure_concurrent(rt: Runtime, server: Server, cfg: Config, qs: Questions) -> dict[str, Any]:
    queue: asyncio.Queue[str] = asyncio.Queue()
    for q in qs.take(cfg.concurrent_calls):
        queue.put_nowait(q)
    calls: list[tuple[float, str]] = []
    clients = [LeanClient(server.url) for _ in range(cfg.concurrency)]
    try:
        # One warm-up call per client opens its connection.
        await asyncio.gather(
            *(
                graphql(c, AGENT_QUERY, {"s": SUBJECT, "q": q, "b": cfg.budget})
                for c, q in zip(clients, qs.take(cfg.concurrency))
            )
        )

        async def worker(client: LeanClient) -> None:
            while True:
                try:
                    q = queue.get_nowait()
                except asyncio.QueueEmpty:
                    return
                ms, data = await graphql(client, AGENT_QUERY, {"s": SUBJECT, "q": q, "b": cfg.budget})
                calls.append((ms, data["context"]["traceId"]))

        t = time.perf_counter()
        await asyncio.gather(*(worker(c) for c in clients))
        wall = time.perf_counter() - t
    finally:
        for c in clients:
            await c.aclose()
    return {
        "clients": cfg.concurrency,
        "calls": len(calls),
        "wall_s": round(wall, 3),
        "throughput_calls_per_s": round(len(calls) / wall, 2),
        "latency_ms": dist([ms for ms, _ in calls]),
        **server_side(calls, await trace_rows(rt, [i for _, i in calls])),
    }


# --- ingestion


async def measure_ingestion(rt: Runtime, server: Server, cfg: Config, n: int) -> dict[str, Any]:
    specs = list(itertools.islice(latency_texts.events(seed=1000 + n), cfg.ingest + 10))
    warm, specs = specs[:10], specs[10:]
    limit = rt.settings.episode_excerpt_chars
    texts = [c.text for e in specs for c in event_chunks(e.kind, e.payload, limit)]

    def inputs(batch: list[latency_texts.EventSpec]) -> list[dict[str, Any]]:
        return [
            {"subjectId": INGEST_SUBJECT, "kind": e.kind, "payload": e.payload, "occurredAt": e.occurred_at.isoformat()}
            for e in batch
        ]

    async def raw() -> float:
        t = time.perf_counter()
        await rt.embedder.embed_many(texts)
        return len(texts) / (time.perf_counter() - t)

    raw_before = await raw()
    async with httpx.AsyncClient(base_url=server.url, timeout=600.0) as client:
        await graphql(client, RECORD_EVENTS, {"inputs": inputs(warm)})
        batches = []
        t = time.perf_counter()
        for start in range(0, len(specs), cfg.ingest_batch):
            part = specs[start : start + cfg.ingest_batch]
            ms, data = await graphql(client, RECORD_EVENTS, {"inputs": inputs(part)})
            assert len(data["recordEvents"]) == len(part)
            batches.append(ms)
        wall = time.perf_counter() - t
    raw_after = await raw()
    events_per_s = len(specs) / wall
    raw_mean = (raw_before + raw_after) / 2
    return {
        "events": len(specs),
        "chunks": len(texts),
        "batch": cfg.ingest_batch,
        "wall_s": round(wall, 3),
        "events_per_s": round(events_per_s, 1),
        "chunks_per_s": round(len(texts) / wall, 1),
        "batch_ms": dist(batches),
        "raw_embedder_texts_per_s": {
            "before": round(raw_before, 1),
            "after": round(raw_after, 1),
            "mean": round(raw_mean, 1),
        },
        "ratio_to_raw_embedder": round(events_per_s / raw_mean, 3),
    }


# --- one N


async def run_n(cfg: Config, n: int, dsn: str, qs: Questions, workdir: Path, *, reused: bool = False) -> dict[str, Any]:
    settings = Settings(database_url=dsn, embed_provider=cfg.embedder, dev_mode=True, **cfg.overrides)
    result: dict[str, Any] = {"n": n}
    rt, stack = await open_runtime(settings)  # migrates the fresh database, loads the embedder
    async with stack:
        result["embedder"] = rt.embedder.name
        if reused:
            result["seed"] = {**await seed_report_of(dsn), "reused": True}
            log(f"N={n}: reusing the kept database (seeded {result['seed'].get('seeded_at', '?')})")
            # What the server's background pass would do for this code: build missing scope
            # indexes, refresh the common-lexeme lists.
            t = time.perf_counter()
            await build_pending(
                rt.pool,
                settings.scope_index_rows,
                ivf_rows=settings.ivf_index_rows,
                build_memory=cfg.maintenance_work_mem,
                lexeme_rows=settings.full_text_lexeme_rows,
            )
            result["seed"]["maintenance_s"] = round(time.perf_counter() - t, 2)
        else:
            log(f"N={n}: corpus and embeddings ({rt.embedder.name})")
            corpus = build_corpus(n, settings.episode_excerpt_chars)
            cache = EmbeddingCache(cfg.cache_dir, rt.embedder.name)
            fact_vectors, fact_info = await embed_cached(cache, corpus.fact_texts, rt.embedder.embed_many, log=log)
            chunk_vectors, chunk_info = await embed_cached(cache, corpus.chunk_texts, rt.embedder.embed_many, log=log)
            log(f"N={n}: loading {n} facts and {n} events x 10 subjects")
            report = await seed(
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
            built = await build_pending(
                rt.pool,
                settings.scope_index_rows,
                ivf_rows=settings.ivf_index_rows,
                build_memory=cfg.maintenance_work_mem,
                lexeme_rows=settings.full_text_lexeme_rows,
            )
            report.timings_s["create_scope_indexes"] = round(time.perf_counter() - t, 2)
            report.hnsw_indexes.update(
                {
                    scope_indexes.index_name(
                        b.table, b.project_id, b.subject_id
                    ): f"{b.table} of {b.subject_id} ({b.rows} rows)"
                    for b in built or []
                }
            )
            log(f"  built {len(built or [])} scope indexes in {report.timings_s['create_scope_indexes']:.1f} s")
            result["seed"] = {
                "rows": report.rows,
                "timings_s": report.timings_s,
                "hnsw_indexes": report.hnsw_indexes,
                "embedding": {"facts": fact_info, "chunks": chunk_info},
                "sigma": cfg.sigma,
                "subjects": len(report.subjects),
            }
            await keep_seed_report(dsn, result["seed"])
        await rt.pool.expire_connections()  # fresh connections see the rebuilt indexes and statistics

        phase_load = result["loadavg_1min_by_phase"] = {}
        phase_load["in_process"] = os.getloadavg()[0]
        log(f"N={n}: (a) in-process assemble x {cfg.queries}")
        result["in_process"] = await measure_in_process(rt, cfg, qs)
        phase_load["sql"] = os.getloadavg()[0]
        log(f"N={n}: (d) our SQL vs naive SQL x {cfg.sql_pairs}, phase-1 recall")
        result["sql"], result["recall"] = await measure_sql(rt, cfg, qs)

        log(f"N={n}: starting the server")
        server = Server(dsn, cfg, workdir)
        try:
            await server.start()
            log(f"N={n}: server ready in {server.startup_s:.1f} s; (b) HTTP, one client")
            phase_load["http"] = os.getloadavg()[0]
            result["http"] = await measure_http(rt, server, cfg, qs)
            phase_load["concurrent"] = os.getloadavg()[0]
            log(f"N={n}: (c) {cfg.concurrency} concurrent clients x {cfg.concurrent_calls} calls")
            result["concurrent"] = await measure_concurrent(rt, server, cfg, qs)
            phase_load["ingestion"] = os.getloadavg()[0]
            log(f"N={n}: ingestion of {cfg.ingest} events in batches of {cfg.ingest_batch}")
            result["ingestion"] = await measure_ingestion(rt, server, cfg, n)
        except BaseException:
            print(server.log_tail(), file=sys.stderr)
            raise
        finally:
            result["server"] = await server.stop()
        async with rt.pool.acquire() as conn:
            result["database_mb"] = round(await conn.fetchval("SELECT pg_database_size(current_database())") / 2**20, 1)
    return result


# --- the run


def machine() -> dict[str, Any]:
    model = ""
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    info: dict[str, Any] = {
        "cpus": os.cpu_count(),
        "cpu_model": model,
        "platform": platform.platform(),
        "python": platform.python_version(),
        "memory_gb": round(psutil.virtual_memory().total / 2**30, 1),
    }
    with contextlib.suppress(Exception):
        import torch

        info["torch"] = torch.__version__
    with contextlib.suppress(Exception):
        info["git_commit"] = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=REPO_ROOT, capture_output=True, text=True, timeout=10
        ).stdout.strip()
    return info


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


async def run(cfg: Config) -> dict[str, Any]:
    started = time.perf_counter()
    result: dict[str, Any] = {
        "benchmark": "latency",
        "started_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "command": " ".join(["python", "-m", "benchmarks.latency", *cfg.argv[1:]]) if cfg.argv else "",
        "loadavg_start": list(os.getloadavg()),
        "machine": machine(),
        "config": {
            k: (str(v) if isinstance(v, Path) else v) for k, v in dataclasses.asdict(cfg).items() if k != "argv"
        },
        "runs": [],
    }
    workdir = Path(tempfile.mkdtemp(prefix="haki-latency-"))
    pg = None
    qs = Questions()
    try:
        if cfg.database_url:
            base = cfg.database_url
        else:
            log(f"starting an embedded PostgreSQL in {workdir}")
            pg = await asyncio.to_thread(embedded.start, workdir / "data")
            base = pg.uri
        for n in cfg.ns:
            name = f"haki_bench_{n}"
            reused = cfg.reuse and cfg.database_url is not None and await seeded(base, name, n)
            dsn = database_dsn(base, name) if reused else await create_database(base, name)
            result["runs"].append(await run_n(cfg, n, dsn, qs, workdir, reused=reused))
            if "postgres" not in result:
                result["postgres"] = await postgres_info(dsn)
            if cfg.database_url and not cfg.keep:
                await drop_database(base, name)
    finally:
        if pg is not None:
            await asyncio.to_thread(pg.close)
        shutil.rmtree(workdir, ignore_errors=True)
    s = Settings(**cfg.overrides)
    result["settings"] = {
        k: getattr(s, k)
        for k in (
            "scope_index_rows",
            "hnsw_ef_search",
            "hnsw_max_scan_tuples",
            "hnsw_fetch_rows",
            "ivf_index_rows",
            "ivf_probes",
            "retrieval_top_k",
            "episode_top_k",
            "embed_threads",
            "embed_query_threads",
            "embed_batch_size",
            "pool_max_size",
        )
    }
    result["distinct_questions_used"] = qs.used
    result["loadavg_end"] = list(os.getloadavg())
    result["wall_s"] = round(time.perf_counter() - started, 1)
    return result


def write(result: dict[str, Any], cfg: Config) -> dict[str, Path]:
    cfg.out.mkdir(parents=True, exist_ok=True)
    stem = f"latency-{'smoke-' if cfg.smoke else ''}{datetime.now(UTC).date().isoformat()}"
    paths = {"json": cfg.out / f"{stem}.json", "md": cfg.out / f"{stem}.md", "png": cfg.out / f"{stem}.png"}
    paths["json"].write_text(json.dumps(result, indent=2, default=str))
    paths["md"].write_text(table(result, plot_name=paths["png"].name))
    plot(result, paths["png"])
    return paths


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    cfg = parse_args(argv)
    result = asyncio.run(run(cfg))
    paths = write(result, cfg)
    print(paths["md"].read_text())
    missing = missing_figures(result)
    if missing:
        print(f"missing figures: {', '.join(missing)}", file=sys.stderr)
    for kind, path in paths.items():
        print(f"wrote {path}")
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main())
