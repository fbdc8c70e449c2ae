"""`python -m benchmarks.stats_bench`: the `stats` and `statsSeries` queries at 100,000 traces.

Loads 100,000 synthetic traces over 10 projects (10,000 each, one project
is measured; plus a run where one project holds all 100,000) into a database of
its own on the embedded PostgreSQL, then times the stats statement and the
GraphQL `stats` field in-process, and the series of the last week in hourly
buckets (168 buckets; the traces are spread over 29 days, so the week holds a
quarter of the measured project's traces; a third run puts all 100,000 in the week) as a statement and through core.
Prints p50/p95 and writes benchmarks/results/stats-<date>.json. About 40 s on 2 cores.
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

from haki_context.core.history.traces import StatsBucket, stats_series
from haki_context.core.history.traces import stats as core_stats
from haki_context.core.serving.runtime import open_pool
from haki_context.db import embedded, migrate
from haki_context.db.traces import SERIES_SQL, STATS_SQL
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


def synthetic_traces(n: int, projects: int, days: float = 29, seed: int = 1) -> list[tuple]:
    """`n` traces spread evenly over the last `days` days, round-robin over `projects` projects."""
    rng = random.Random(seed)
    start = datetime.now(UTC) - timedelta(days=days)
    step = days * 86_400 / n
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
            start + timedelta(seconds=i * step),
            rng.uniform(0, 4),
            rng.uniform(1, 20),
            rng.uniform(0.2, 3),
            rng.uniform(0.5, 2),
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
        # The third run puts all 100,000 traces of one project in the last week: the series'
        # worst case, every trace of the table in its window.
        for projects, days in ((10, 29), (1, 29), (1, 7)):
            name = f"stats{projects}_{days}"
            dsn = server.uri.replace("/postgres?", f"/{name}?")
            admin = await asyncpg.connect(server.uri)
            await admin.execute(f"CREATE DATABASE {name}")
            await admin.close()
            await migrate.apply(dsn)
            pool = await open_pool(dsn, Settings(), min_size=1, max_size=2)
            async with pool.acquire() as conn:
                await conn.copy_records_to_table(
                    "context_traces", records=synthetic_traces(100_000, projects, days), columns=COLUMNS
                )
                await conn.execute("VACUUM ANALYZE context_traces")
                sql_ms: list[float] = []
                for _ in range(repeats):
                    t = time.perf_counter()
                    await conn.fetchrow(STATS_SQL, "p0", None)
                    sql_ms.append((time.perf_counter() - t) * 1000)
                until = datetime.now(UTC)
                week = until - timedelta(days=7)
                series_sql_ms: list[float] = []
                for _ in range(repeats):
                    t = time.perf_counter()
                    await conn.fetch(SERIES_SQL, "p0", week, until, timedelta(hours=1))
                    series_sql_ms.append((time.perf_counter() - t) * 1000)
                in_week = await conn.fetchval(
                    "SELECT count(*) FROM context_traces WHERE project_id = 'p0' AND created_at >= $1", week
                )
            core_ms: list[float] = []
            series_core_ms: list[float] = []
            rt = type("Rt", (), {"pool": pool})()
            for _ in range(repeats):
                t = time.perf_counter()
                await core_stats(rt, "p0", None)  # type: ignore[arg-type]
                core_ms.append((time.perf_counter() - t) * 1000)
                t = time.perf_counter()
                await stats_series(rt, "p0", week, until, StatsBucket.HOUR)  # type: ignore[arg-type]
                series_core_ms.append((time.perf_counter() - t) * 1000)
            await pool.close()
            run = {
                "projects": projects,
                "days": days,
                "traces_in_measured_project": 100_000 // projects,
                "sql_p50_ms": statistics.median(sql_ms),
                "sql_p95_ms": _p(sql_ms, 0.95),
                "core_p50_ms": statistics.median(core_ms),
                "core_p95_ms": _p(core_ms, 0.95),
                "series_week_hourly": {
                    "traces_in_week": in_week,
                    "sql_p50_ms": statistics.median(series_sql_ms),
                    "sql_p95_ms": _p(series_sql_ms, 0.95),
                    "core_p50_ms": statistics.median(series_core_ms),
                    "core_p95_ms": _p(series_core_ms, 0.95),
                },
            }
            results["runs"].append(run)
            print(
                f"{projects} project(s), {run['traces_in_measured_project']} traces over {days} days in the measured project: "
                f"SQL p50 {run['sql_p50_ms']:.1f} ms p95 {run['sql_p95_ms']:.1f} ms; "
                f"core p50 {run['core_p50_ms']:.1f} ms p95 {run['core_p95_ms']:.1f} ms"
            )
            week_run = run["series_week_hourly"]
            print(
                f"  statsSeries, last week hourly ({week_run['traces_in_week']} traces): "
                f"SQL p50 {week_run['sql_p50_ms']:.1f} ms p95 {week_run['sql_p95_ms']:.1f} ms; "
                f"core p50 {week_run['core_p50_ms']:.1f} ms p95 {week_run['core_p95_ms']:.1f} ms"
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
