"""The full-text scope's form in the candidates statement: `python -m benchmarks.text_scope`.

Where rows come from the scoped full-text index, the statement rechecks the scope
(db/retrieval.py, `text_scope`). This harness compares three ways of writing that recheck on one
database: the server's (`= $1 COLLATE "C"`, which matches no index and which Citus routes on),
`IS NOT DISTINCT FROM` (which matches no index either) and a plain `=` (which the planner may
answer with a btree bitmap ANDed to the full-text index). It seeds a subject of `--n` facts in one
project and `--others` facts in other projects (by default 100,000 and 900,000: the subject's
project a tenth of the table), then, for each full-text rank and three queries (a common, a
middling and a rare word), prints whether each form's plan equals the server's, node for node
and estimate for estimate, whether it ANDs a btree bitmap, and the statement's median time over
interleaved runs. The vector part reads every row of the subject (no HNSW index is built, to
seed fast), so the times compare forms, not the hot path. Seeding 1,000,000 facts takes ~3
minutes here; `--data-dir` keeps the database for a later run.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import asyncpg
import numpy as np

from haki_context.db import embedded, migrate, retrieval
from haki_context.db.pool import init_connection

RESULTS = Path(__file__).resolve().parent / "results"
PROJECT, SUBJECT = "big", "s"

# Facts of ten words each, drawn from 5,000 with a skew (a few words common, most rare).
_SEED = """
INSERT INTO facts (project_id, id, subject_id, predicate, value, value_hash, confidence, status, volatility,
                   recorded_at, text, embedding)
SELECT $1, gen_random_uuid(), $2, 'p' || i, to_jsonb(i), md5(i::text), 0.9, 'ACTIVE', 'STABLE', now(),
       (SELECT string_agg('w' || (power(random(), 3) * 5000)::int, ' ') FROM generate_series(1, 10) g
        WHERE g > i * 0),
       (SELECT array_agg(random() - 0.5) FROM generate_series(1, 384) d WHERE d > i * 0)::vector
FROM generate_series(1, $3) i
"""

# The server's recheck, and the other forms written in its place.
_SERVER = re.compile(r'(\w+)\.project_id = (\$\d+) COLLATE "C" AND \1\.subject_id = (\$\d+) COLLATE "C"')
FORMS: dict[str, str | None] = {
    "collate_c (the server's)": None,
    "is_not_distinct_from": r"\1.project_id IS NOT DISTINCT FROM \2 AND \1.subject_id IS NOT DISTINCT FROM \3",
    "plain_equality": r"\1.project_id = \2 AND \1.subject_id = \3",
}
_ESTIMATES = re.compile(r"cost=[0-9.]+\.\.[0-9.]+ rows=\d+")


class _Recorder:
    """Takes the statement a retrieval function sends, instead of sending it."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, tuple[Any, ...]]] = []

    async def fetch(self, text: str, *args: Any) -> list[Any]:
        self.calls.append((text, args))
        return []


async def seed(conn: asyncpg.Connection, n: int, others: int) -> float:
    """Seed once (a kept database is reused); seconds taken."""
    if await conn.fetchval("SELECT count(*) FROM facts WHERE project_id = $1", PROJECT):
        return 0.0
    started = time.perf_counter()
    await conn.execute("DROP INDEX IF EXISTS facts_embedding")  # seeding without the HNSW graph
    await conn.execute(_SEED, PROJECT, SUBJECT, n)
    batch = 100_000
    for k in range(0, others, batch):
        await conn.execute(_SEED, f"other-{k // batch}", "o", min(batch, others - k))
    await conn.execute("ANALYZE facts")
    return time.perf_counter() - started


async def statement(rank: str, query: str, vector: np.ndarray) -> tuple[str, tuple[Any, ...]]:
    """The fact candidates statement the server sends for `query` (the shared text, exact scan)."""
    params = retrieval.SearchParams(
        project_id=PROJECT,
        subject_id=SUBJECT,
        vector=vector,
        query=query,
        now=datetime.now(UTC),
        max_lexemes=32,
        lexeme_rows=1000,
        use_scope_index=False,
        hnsw_fetch=400,
        horizon_volatile_s=1e9,
        horizon_ephemeral_s=1e9,
        full_text_rank=rank,
    )
    recorder = _Recorder()
    await retrieval.fact_candidates(recorder, params, 40, 20)  # type: ignore[arg-type]
    [(text, args)] = recorder.calls
    if not _SERVER.search(text):
        raise RuntimeError("the statement's full-text recheck is not the form this harness rewrites")
    return text, args


async def run(uri: str, n: int, others: int, rounds: int) -> dict[str, Any]:
    await migrate.apply(uri)
    conn = await asyncpg.connect(uri)
    await init_connection(conn)
    try:
        seeded_s = await seed(conn, n, others)
        words = [
            r[0]
            for r in await conn.fetch(
                "SELECT word FROM ts_stat(format('SELECT search_vector FROM facts WHERE project_id = %L', $1::text))"
                " ORDER BY ndoc DESC, word",
                PROJECT,
            )
        ]
        queries = [words[0], words[len(words) // 2], words[-1]]
        vector = np.random.default_rng(1).standard_normal(384).astype(np.float32)
        vector /= np.linalg.norm(vector)
        rows: list[dict[str, Any]] = []
        for rank in ("idf", "cover_density"):
            texts = {}
            for form, rewrite in FORMS.items():
                for q in queries:
                    text, args = await statement(rank, q, vector)
                    texts[form, q] = (_SERVER.sub(rewrite, text) if rewrite else text, args)
            plans = {
                key: "\n".join(r[0] for r in await conn.fetch("EXPLAIN " + t, *a)) for key, (t, a) in texts.items()
            }
            times: dict[str, list[float]] = {form: [] for form in FORMS}
            for _ in range(rounds):  # interleaved, so drift falls on every form alike
                for form in FORMS:
                    for q in queries:
                        text, args = texts[form, q]
                        started = time.perf_counter()
                        await conn.fetch(text, *args)
                        times[form].append((time.perf_counter() - started) * 1000)
            server = next(iter(FORMS))
            for form in FORMS:
                rows.append(
                    {
                        "rank": rank,
                        "form": form,
                        "same_plan_as_server": all(
                            _ESTIMATES.findall(plans[form, q]) == _ESTIMATES.findall(plans[server, q]) for q in queries
                        ),
                        "btree_bitmap_anded": any("BitmapAnd" in plans[form, q] for q in queries),
                        "median_ms": round(statistics.median(times[form]), 1),
                        "runs": len(times[form]),
                    }
                )
        return {"n": n, "others": others, "seeded_s": round(seeded_s), "queries": queries, "rows": rows}
    finally:
        await conn.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--n", type=int, default=100_000, help="facts of the subject (default 100,000)")
    parser.add_argument("--others", type=int, default=900_000, help="facts of other projects (default 900,000)")
    parser.add_argument("--rounds", type=int, default=7, help="interleaved runs of each statement (default 7)")
    parser.add_argument("--data-dir", type=Path, help="an embedded database kept here (default: a temporary one)")
    parser.add_argument("--out", type=Path, help="write the figures here as JSON")
    args = parser.parse_args(argv)
    data_dir = args.data_dir or Path(tempfile.mkdtemp(prefix="haki-text-scope-"))
    server = embedded.start(data_dir)
    try:
        result = asyncio.run(run(server.uri, args.n, args.others, args.rounds))
    finally:
        server.close()
    print(f"subject of {result['n']:,} facts, {result['others']:,} in other projects; queries {result['queries']}")
    for row in result["rows"]:
        print(
            f"  {row['rank']:14s} {row['form']:26s} same plan as the server's: {row['same_plan_as_server']!s:5s}"
            f"  btree bitmap ANDed: {row['btree_bitmap_anded']!s:5s}  median {row['median_ms']:6.1f} ms"
        )
    out = args.out or RESULTS / f"text-scope-{datetime.now(UTC):%Y-%m-%d}.json"
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"written to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
