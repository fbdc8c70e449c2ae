"""A call after the server sat idle: `python -m benchmarks.idle --database-url URL/haki_bench_10000`.

An agent that calls `context` every few minutes meets a server that has been
idle. asyncpg's pool, left at its defaults, closed every connection idle for
300 s beyond the pool's minimum (one connection), so such a call opened a new
connection for one of its two concurrent candidates statements, and planned
the statements anew on it (custom plans, five times, before the plan made once
for all). The server now keeps idle connections open (`pool_idle_lifetime_s` =
0) and two of them at least (`pool_min_size` = 2).

Two in-process runtimes on one database: "ours" with this checkout's settings,
and "closing", where connections idle past `--idle` / 2 seconds are closed
beyond a minimum of one (asyncpg's behaviour at 300 s, brought within reach of
a benchmark). Each side is warmed, then they take turns: wait `--idle` seconds,
one call (a distinct question each). The database must hold the latency
benchmark's subject (`python -m benchmarks.latency --n 10000 --database-url URL
--keep`). Prints p50 / mean per side and the median per-pair difference; `--out
FILE` also writes them as JSON.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from haki_context.app import open_runtime
from haki_context.core.assembler import assemble
from haki_context.settings import Settings

from . import latency_texts
from .latency import PROJECT, SUBJECT

WARMUP = 30  # calls each before measuring: connections, statement caches, plans made once


async def compare(dsn: str, pairs: int, idle_s: float, budget: int) -> dict[str, Any]:
    sides = {
        "ours": {},
        "closing": {"pool_idle_lifetime_s": idle_s / 2, "pool_min_size": 1},
    }
    questions = latency_texts.questions(seed=7373)
    runtimes = {}
    stacks = []
    try:
        for name, overrides in sides.items():
            rt, stack = await open_runtime(
                Settings(database_url=dsn, dev_mode=True, scope_index_interval_s=0, **overrides)  # type: ignore[arg-type]
            )
            runtimes[name] = rt
            stacks.append(stack)

        async def call(name: str) -> float:
            t = time.perf_counter()
            await assemble(runtimes[name], PROJECT, SUBJECT, next(questions), budget)
            return (time.perf_counter() - t) * 1000.0

        for name in runtimes:
            for _ in range(WARMUP):
                await call(name)
        times: dict[str, list[float]] = {name: [] for name in runtimes}
        for i in range(pairs):
            for name in ("ours", "closing") if i % 2 else ("closing", "ours"):
                await asyncio.sleep(idle_s)
                times[name].append(await call(name))
    finally:
        for stack in reversed(stacks):
            await stack.aclose()
    diffs = [c - o for o, c in zip(times["ours"], times["closing"])]
    return {
        "idle_s": idle_s,
        "pairs": pairs,
        "budget": budget,
        "sides": sides,
        **{
            name: {"p50_ms": statistics.median(v), "mean_ms": statistics.mean(v), "calls_ms": v}
            for name, v in times.items()
        },
        "closing_minus_ours_median_ms": statistics.median(diffs),
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m benchmarks.idle", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--database-url", required=True, help="a database holding the latency benchmark's subject")
    p.add_argument("--pairs", type=int, default=14)
    p.add_argument("--idle", type=float, default=2.0, help="seconds idle before each call")
    p.add_argument("--budget", type=int, default=900)
    p.add_argument("--out", type=Path, default=None)
    a = p.parse_args(argv)
    result = asyncio.run(compare(a.database_url, a.pairs, a.idle, a.budget))
    result["command"] = " ".join(["python -m benchmarks.idle", *(sys.argv[1:] if argv is None else argv)])
    for name in ("ours", "closing"):
        print(
            f"{name:8s} after {a.idle:g} s idle: p50 {result[name]['p50_ms']:.1f} ms, "
            f"mean {result[name]['mean_ms']:.1f} ms"
        )
    print(f"closing - ours, median of {a.pairs} pairs: {result['closing_minus_ours_median_ms']:+.1f} ms")
    if a.out:
        a.out.write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
