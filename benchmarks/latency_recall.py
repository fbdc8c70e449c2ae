"""Phase-1 recall: the vector branch alone (an empty text matches no row) through the product's own
statements, against an exact scan of the same eligible rows (facts k = retrieval_top_k, episode
chunks k = episode_top_k). A row counts as found when its distance is within the exact k-th."""

from __future__ import annotations

import dataclasses
import math
from datetime import UTC, datetime
from typing import Any

import numpy as np

from haki_context.core.serving.runtime import Runtime
from haki_context.db import retrieval, scope_indexes

from .latency_baseline import search_params
from .latency_common import PROJECT, SUBJECT

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


def recall(got: list[float], exact: list[float]) -> float:
    """Share of the exact top k found: a row counts when its distance is within the exact k-th."""
    return sum(d <= exact[-1] + 1e-6 for d in got) / len(exact)


def _summary(values: list[float], digits: int = 4) -> tuple[float, float, float]:
    """(mean, min, share under 0.9), NaN when there is nothing to summarise."""
    if not values:
        return math.nan, math.nan, math.nan
    a = np.asarray(values)
    return round(float(a.mean()), digits), round(float(a.min()), digits), float(np.mean(a < 0.9))


async def measure_recall(rt: Runtime, questions: list[str]) -> dict[str, Any]:
    s = rt.settings
    facts, chunks, facts_full, chunks_full = [], [], [], []
    async with rt.pool.acquire() as conn:
        for q in questions:
            vector = await rt.embedder.embed_query(q)
            now = datetime.now(UTC)
            vec_only = dataclasses.replace(search_params(rt, SUBJECT, vector, q, now), query="")
            found = await retrieval.fact_candidates(conn, vec_only, s.retrieval_top_k, s.blocked_trace_limit)
            got = [row.distance for row, _ in found.candidates]
            exact = [
                r["d"] for r in await conn.fetch(EXACT_FACTS_SQL, PROJECT, SUBJECT, vector, now, s.retrieval_top_k)
            ]
            if exact:
                facts.append(recall(got, exact))
                facts_full.append(len(got) >= len(exact))
            got_c = [
                c.distance for c in (await retrieval.episode_candidates(conn, vec_only, s.episode_top_k, 0)).chunks
            ]
            exact_c = [r["d"] for r in await conn.fetch(EXACT_CHUNKS_SQL, PROJECT, SUBJECT, vector, s.episode_top_k)]
            if exact_c:
                chunks.append(recall(got_c, exact_c))
                chunks_full.append(len(got_c) >= len(exact_c))
        indexed = {table for subject, table, _ in await scope_indexes.ready(conn, PROJECT) if subject == SUBJECT}
    f_mean, f_min, f_below = _summary(facts)
    c_mean, c_min, c_below = _summary(chunks)
    return {
        # The plan retrieval.py picks: the scope's own HNSW index once it is READY, else the exact scan.
        "facts_plan": "hnsw" if "facts" in indexed else "exact",
        "episodes_plan": "hnsw" if "episode_chunks" in indexed else "exact",
        "facts_k": s.retrieval_top_k,
        "facts_mean": f_mean,
        "facts_min": f_min,
        # The tail: a scope's HNSW graph can miss a tight cluster of near-identical facts whole.
        "facts_below_0_9": f_below,
        "facts_full_rows_share": float(np.mean(facts_full)) if facts_full else math.nan,
        "episodes_k": s.episode_top_k,
        "episodes_mean": c_mean,
        "episodes_min": c_min,
        "episodes_below_0_9": c_below,
        "episodes_full_rows_share": float(np.mean(chunks_full)) if chunks_full else math.nan,
        "queries": len(facts),
    }
