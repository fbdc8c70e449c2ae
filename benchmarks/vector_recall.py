"""Per-query recall of the vector branch on a kept benchmark database, with its worst queries.

`python -m benchmarks.vector_recall --database-url URL_OF_haki_bench_N [--fetch 128,256,400]
[--ef-search 100] [--queries 300]`

The latency benchmark reports phase-1 recall as a mean, a minimum and the share
of queries under 0.9; this tool shows which queries make that tail, for each
HNSW over-fetch (HAKI_HNSW_FETCH_ROWS) and ef_search given, through the
product's own statements (`retrieval.fact_candidates` and
`retrieval.episode_candidates` with an empty text, so only the vector branch
finds rows), against an exact scan. It needs a database left by
`python -m benchmarks.latency --keep` (the subject's own indexes built).
Prints the figures and writes them to benchmarks/results/vector-recall-<date>.md
(`--label` adds a suffix, `--out FILE` writes elsewhere). 300 questions at
N = 100,000 take about a minute per over-fetch on 2 cores.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

import numpy as np

from haki_context.core.context import assembler
from haki_context.core.embedding.embedder import Embedder, encoder_for
from haki_context.core.serving.runtime import open_pool
from haki_context.db import retrieval
from haki_context.settings import Settings

from .latency_common import DEFAULT_OUT, PROJECT, SUBJECT, Questions
from .latency_recall import EXACT_CHUNKS_SQL, EXACT_FACTS_SQL
from .latency_recall import recall as _recall

OWN_INDEX = frozenset({"facts", "episode_chunks"})


async def measure(url: str, fetches: list[int], ef_search: int, queries: int, worst: int) -> list[str]:
    """The figures per over-fetch cap, and the worst fact questions under 0.9, as printed lines."""
    lines: list[str] = []
    s = Settings()
    embedder = Embedder(encoder_for(s))
    pool = await open_pool(url, s.model_copy(update={"hnsw_ef_search": ef_search}), min_size=1, max_size=1)
    now = datetime.now(UTC)
    try:
        questions = Questions().take(queries)
        vectors = [await embedder.embed_query(q) for q in questions]
        async with pool.acquire() as conn:
            exact_f = [
                [r["d"] for r in await conn.fetch(EXACT_FACTS_SQL, PROJECT, SUBJECT, v, now, s.retrieval_top_k)]
                for v in vectors
            ]
            exact_c = [
                [r["d"] for r in await conn.fetch(EXACT_CHUNKS_SQL, PROJECT, SUBJECT, v, s.episode_top_k)]
                for v in vectors
            ]
            for fetch in fetches:
                facts, chunks, ms = [], [], []
                for v, ef, ec in zip(vectors, exact_f, exact_c):
                    p = assembler.search_params(
                        s,
                        project_id=PROJECT,
                        subject_id=SUBJECT,
                        vector=v,
                        query="",
                        now=now,
                        own_index_tables=OWN_INDEX,
                    )
                    p = dataclasses.replace(p, hnsw_fetch=fetch)
                    t = time.perf_counter()
                    found = await retrieval.fact_candidates(conn, p, s.retrieval_top_k, s.blocked_trace_limit)
                    ms.append((time.perf_counter() - t) * 1000.0)
                    got = (await retrieval.episode_candidates(conn, p, s.episode_top_k, 0)).chunks
                    facts.append(_recall([row.distance for row, _ in found.candidates], ef) if ef else 1.0)
                    chunks.append(_recall([c.distance for c in got], ec) if ec else 1.0)
                f, c = np.array(facts), np.array(chunks)
                lines.append(
                    f"over-fetch cap {fetch}, ef_search {ef_search}: fact statement p50 {np.median(ms):.2f} ms; "
                    f"facts k={s.retrieval_top_k} mean {f.mean():.3f} min {f.min():.3f} "
                    f"< 0.9: {(f < 0.9).mean():.2f}; episodes k={s.episode_top_k} mean {c.mean():.3f} "
                    f"min {c.min():.3f} < 0.9: {(c < 0.9).mean():.2f}"
                )
                for i in np.argsort(f, kind="stable")[:worst]:
                    if f[i] < 0.9:
                        lines.append(f"    facts {f[i]:.3f}  best exact distance {exact_f[i][0]:.3f}  {questions[i]!r}")
    finally:
        await pool.close()
        embedder.close()
    return lines


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m benchmarks.vector_recall",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--database-url", required=True, help="a database kept by benchmarks.latency --keep")
    p.add_argument("--fetch", default="256", help="comma-separated HNSW over-fetch caps (rows)")
    p.add_argument("--ef-search", type=int, default=Settings().hnsw_ef_search)
    p.add_argument("--queries", type=int, default=300)
    p.add_argument("--worst", type=int, default=10, help="worst fact queries listed per fetch")
    p.add_argument("--label", default="", help="suffix of the result file's name (default: none)")
    p.add_argument("--out", type=Path, help="write the figures to this file instead of benchmarks/results/")
    a = p.parse_args(argv)
    lines = asyncio.run(measure(a.database_url, [int(x) for x in a.fetch.split(",")], a.ef_search, a.queries, a.worst))
    print("\n".join(lines))
    date = datetime.now(UTC).date().isoformat()
    out = a.out or DEFAULT_OUT / (f"vector-recall-{date}" + (f"-{a.label}" if a.label else "") + ".md")
    out.parent.mkdir(parents=True, exist_ok=True)
    command = " ".join(["python -m benchmarks.vector_recall", *(sys.argv[1:] if argv is None else argv)])
    out.write_text(
        f"# Vector-branch recall per question, {date}\n\n`{command}`\n\n```\n" + "\n".join(lines) + "\n```\n"
    )
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
