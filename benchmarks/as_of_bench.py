"""`context(asOf:)` against a normal call, in process, pair by pair: `python -m benchmarks.as_of_bench`.

On the latency benchmark's database (one subject of N facts and N events among ten such), each
distinct question is asked twice in turn, the order alternating: once as a normal call, once
`asOf` a past instant after the seeding (the memory is the same then, so the packets answer the
same question from the same rows). The figure is the median of the per-pair ratio of the calls'
wall times (the trace written included), so the machine's drift falls on both sides alike; also
p50 / p95 of each side and the share of pairs with the same decisions and ranks (the scores
differ a little, recency running from another instant; the asOf call scans exactly where the
normal one uses the scope's approximate index).

`--database-url URL` names a server: the database `haki_bench_<N>` is seeded there unless it is
kept already (`benchmarks.latency --keep` makes the same one), and kept. Output:
benchmarks/results/as-of-<date>.json.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np

from haki_context.app import open_runtime
from haki_context.core.context.assembler import start_assembly
from haki_context.core.history.replay_diff import ChangeKind, diff
from haki_context.settings import Settings

from . import latency_texts
from .latency_common import DEFAULT_OUT, PROJECT, SUBJECT, Config, dated_result, log, write_result
from .latency_databases import create_database, database_dsn, prepare, seeded

WARMUP = 10


async def _call(rt: Any, question: str, as_of: datetime | None) -> tuple[float, Any]:
    started = time.perf_counter()
    assembly = await start_assembly(rt, PROJECT, SUBJECT, question, 900, as_of=as_of)
    await assembly.write.committed()
    return (time.perf_counter() - started) * 1000.0, assembly.packet


async def measure(dsn: str, pairs: int) -> dict[str, Any]:
    settings = Settings(database_url=dsn, embed_provider="onnx", dev_mode=True, scope_index_interval_s=0)
    rt, stack = await open_runtime(settings)
    async with stack:
        async with rt.pool.acquire() as conn:
            seeded_at = await conn.fetchval(
                "SELECT max(recorded_at) FROM facts WHERE project_id = $1 AND subject_id = $2", PROJECT, SUBJECT
            )
        as_of = max(seeded_at, datetime.now(UTC) - timedelta(seconds=1))
        questions = list(itertools.islice(latency_texts.questions(seed=777), WARMUP + pairs))
        for q in questions:  # the query vectors, so neither side pays for an embedding
            await rt.embedder.embed_query(q)
        normal, past, ratios, identical = [], [], [], 0
        for i, q in enumerate(questions):
            order = (None, as_of) if i % 2 == 0 else (as_of, None)
            timed = {}
            for when in order:
                timed[when is None] = await _call(rt, q, when)
            if i < WARMUP:
                continue
            (live_ms, live), (past_ms, then) = timed[True], timed[False]
            normal.append(live_ms)
            past.append(past_ms)
            ratios.append(past_ms / live_ms)
            # The instants differ by a second or more, so recency (and the score) moves a little
            # for every item: the same decisions and ranks is the figure.
            changes = diff(live.trace.decisions or (), then.trace.decisions or ()).changes
            identical += all(c.kinds == (ChangeKind.SCORE_CHANGED,) for c in changes)
        a, b = np.asarray(normal), np.asarray(past)
        return {
            "pairs": pairs,
            "as_of": as_of.isoformat(),
            "normal_ms": {"p50": float(np.percentile(a, 50)), "p95": float(np.percentile(a, 95))},
            "as_of_ms": {"p50": float(np.percentile(b, 50)), "p95": float(np.percentile(b, 95))},
            "ratio_median": float(np.median(ratios)),
            "ratio_p95": float(np.percentile(ratios, 95)),
            "same_decisions_and_ranks": identical / pairs,
        }


async def run(base: str, n: int, pairs: int) -> dict[str, Any]:
    name = f"haki_bench_{n}"
    if await seeded(base, name, n):
        dsn = database_dsn(base, name)
        log(f"N={n}: the kept database {name}")
    else:
        dsn = await create_database(base, name)
        settings = Settings(database_url=dsn, embed_provider="onnx", dev_mode=True, scope_index_interval_s=0)
        rt, stack = await open_runtime(settings)
        async with stack:
            await prepare(rt, Config(ns=[n]), n, dsn, reused=False)
    log(f"N={n}: {pairs} pairs, normal and asOf")
    return {"n": n, **await measure(dsn, pairs)}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.as_of_bench", description=__doc__)
    p.add_argument("--database-url", required=True)
    p.add_argument("--n", type=int, default=10_000)
    p.add_argument("--pairs", type=int, default=200)
    p.add_argument("--out", type=Path, default=DEFAULT_OUT)
    a = p.parse_args(argv)
    write_result(asyncio.run(run(a.database_url, a.n, a.pairs)), dated_result("as-of", a.out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
