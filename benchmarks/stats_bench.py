"""`python -m benchmarks.stats_bench`: the `stats` query at 100,000 traces.

Loads 100,000 synthetic traces over 10 projects (10,000 each, one project
is measured; plus a run where one project holds all 100,000) into a database of
its own on the embedded PostgreSQL, then times the stats statement and the
GraphQL `stats` field in-process. Prints p50/p95 and writes
benchmarks/results/stats-<date>.json. About 30 s on 2 cores.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
import tempfile
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import asyncpg

from haki_context.core.runtime import open_pool
from haki_context.core.traces import stats as core_stats
from haki_context.db import embedded, migrate
from haki_context.db.traces import STATS_SQL
from haki_context.settings import Settings

COLUMNS = [
    "project_id",
    "id",
    "subject_id",
    "query",
    "budget_tokens",
    "used_tokens",
    "status",
    "empty_reason",
    "warnings",
    "created_at",
    "embed_ms",
    "retrieve_ms",
    "pack_ms",
    "persist_ms",
    "total_ms",
    "facts_served",
    "episodes_served",
    "n_included",
    "n_excluded",
    "n_blocked",
    "n_top_score",
    "n_multi_hop",
    "n_over_budget",
    "n_below_floor",
    "n_conflict_open",
    "n_volatility_expired",
]


def synthetic_traces(n: int, projects: int, seed: int = 1) -> list[tuple]:
    rng = random.Random(seed)
    start = datetime.now(UTC) - timedelta(days=30)
    return [
        (
            f"p{i % projects}",
            uuid.uuid4(),
            f"s{i % 97}",
            "q",
            900,
            rng.randint(0, 900),
            "DEGRADED" if rng.random() < 0.05 else "OK",
            None,
            [],
            start + timedelta(seconds=i * 25),
            1.0,
            2.0,
            0.5,
            1.0,
            rng.uniform(5, 50),
            rng.randint(0, 5),
            rng.randint(0, 8),
            3,
            2,
            0,
            3,
            0,
            2,
            0,
            0,
            0,
        )
        for i in range(n)
    ]


def _p(values: list[float], q: float) -> float:
    return sorted(values)[min(len(values) - 1, int(q * len(values)))]


async def run(repeats: int) -> dict:
    data_dir = Path(tempfile.mkdtemp(prefix="haki-stats-"))
    server = embedded.start(data_dir)
    results: dict = {"traces": 100_000, "repeats": repeats, "runs": []}
    try:
        for projects in (10, 1):
            dsn = server.uri.replace("/postgres?", f"/stats{projects}?")
            admin = await asyncpg.connect(server.uri)
            await admin.execute(f"CREATE DATABASE stats{projects}")
            await admin.close()
            await migrate.apply(dsn)
            pool = await open_pool(dsn, Settings(), min_size=1, max_size=2)
            async with pool.acquire() as conn:
                await conn.copy_records_to_table(
                    "context_traces", records=synthetic_traces(100_000, projects), columns=COLUMNS
                )
                await conn.execute("VACUUM ANALYZE context_traces")
                sql_ms: list[float] = []
                for _ in range(repeats):
                    t = time.perf_counter()
                    await conn.fetchrow(STATS_SQL, "p0", None)
                    sql_ms.append((time.perf_counter() - t) * 1000)
            core_ms: list[float] = []
            rt = type("Rt", (), {"pool": pool})()
            for _ in range(repeats):
                t = time.perf_counter()
                await core_stats(rt, "p0", None)  # type: ignore[arg-type]
                core_ms.append((time.perf_counter() - t) * 1000)
            await pool.close()
            run = {
                "projects": projects,
                "traces_in_measured_project": 100_000 // projects,
                "sql_p50_ms": statistics.median(sql_ms),
                "sql_p95_ms": _p(sql_ms, 0.95),
                "core_p50_ms": statistics.median(core_ms),
                "core_p95_ms": _p(core_ms, 0.95),
            }
            results["runs"].append(run)
            print(
                f"{projects} project(s), {run['traces_in_measured_project']} traces in the measured project: "
                f"SQL p50 {run['sql_p50_ms']:.1f} ms p95 {run['sql_p95_ms']:.1f} ms; "
                f"core p50 {run['core_p50_ms']:.1f} ms p95 {run['core_p95_ms']:.1f} ms"
            )
    finally:
        server.close()
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeats", type=int, default=50)
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "results")
    args = parser.parse_args()
    results = asyncio.run(run(args.repeats))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"stats-{datetime.now(UTC).date().isoformat()}.json"
    path.write_text(json.dumps(results, indent=2))
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
