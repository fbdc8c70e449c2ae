"""The naive baseline: our fact-candidate statement beside the full hybrid score over every servable
fact of the subject in one statement, same query vector, pair by pair; and the episode statement."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Any

import numpy as np

from haki_context.core.context import assembler
from haki_context.core.serving.runtime import Runtime
from haki_context.db import retrieval

from .latency_common import PROJECT, SUBJECT, Config, dist, ms_since

# The full hybrid score over every servable fact of the subject, one statement: the same hard
# filters and the same OR-of-lexemes tsquery as the server, without candidate generation.
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


def search_params(rt: Runtime, subject: str, vector: np.ndarray, query: str, now: datetime) -> retrieval.SearchParams:
    """The SearchParams a `context` call builds (assembler.search_params), for the benchmark's project."""
    own = rt.own_indexes.tables(PROJECT, subject)
    return assembler.search_params(
        rt.settings, project_id=PROJECT, subject_id=subject, vector=vector, query=query, now=now, own_index_tables=own
    )


async def measure_sql(rt: Runtime, cfg: Config, questions: list[str]) -> dict[str, Any]:
    """Timed pairs after `cfg.warmup` warm-up questions; the order within a pair alternates."""
    s = rt.settings
    ours, naive, episodes_sql, ratios, rows_back = [], [], [], [], []
    hits, misses = rt.embedder.cache_hits, rt.embedder.cache_misses
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

            async def run_ours(p: retrieval.SearchParams = p) -> float:
                t = time.perf_counter()
                found = await retrieval.fact_candidates(conn, p, s.retrieval_top_k, s.blocked_trace_limit)
                rt.own_indexes.saw(PROJECT, SUBJECT, "facts", found.own_index)  # as the assembler does
                rows_back.append(len(found.candidates))
                return ms_since(t)

            async def run_naive(args: tuple[Any, ...] = args) -> float:
                t = time.perf_counter()
                await conn.fetch(NAIVE_SQL, *args)
                return ms_since(t)

            # Alternate the order, so neither statement always runs on the other's warm cache.
            if i % 2 == 0:
                o, n = await run_ours(), await run_naive()
            else:
                n, o = await run_naive(), await run_ours()
            t = time.perf_counter()
            episodes = await retrieval.episode_candidates(conn, p, s.episode_top_k, s.episode_text_k)
            e = ms_since(t)
            rt.own_indexes.saw(PROJECT, SUBJECT, "episode_chunks", episodes.own_index)
            if i < cfg.warmup:
                continue
            ours.append(o)
            naive.append(n)
            episodes_sql.append(e)
            ratios.append(o / n)
    hits, misses = rt.embedder.cache_hits - hits, rt.embedder.cache_misses - misses
    p50_ours, p50_naive = float(np.median(ours)), float(np.median(naive))
    return {
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
