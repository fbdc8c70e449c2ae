"""A scope loaded past HAKI_SCOPE_INDEX_ROWS: how long its calls stay on the exact scan, `python -m benchmarks.index_wake`.

The server answers a scope below HAKI_SCOPE_INDEX_ROWS (10,000 rows by default) with an exact
scan, and gives it HNSW and IVFFlat indexes of its own once it is past that size. This harness
serves the app in process (its lifespan runs the index pass, every HAKI_SCOPE_INDEX_INTERVAL_S:
60 s by default) on a fresh database, records `--events` events (10,000: one chunk each) into one
subject in batches of 1,000 through `recordEvents`, and, from the moment the last batch is
acknowledged, times `context` calls back to back (the latency harness's agent selection, budget
900) until the scope's index of episode chunks is ready and `--after` (10) seconds more, then
`--after` seconds more once the tables are vacuumed and analyzed (settled, as autovacuum leaves
them later). It reports the seconds from the load to the ready index, the calls served
meanwhile (on the exact scan), after, and settled, with their p50 / p95.

Twice, each on a subject of its own and a server started anew: `woken`, the server as it is (a
write that takes a scope to the size wakes the pass), and `interval only`, the same server with
that wake switched off in this process, as the server was before it (the pass on its interval
only). The hashing embedder stands in for the model (the statements' cost is what is timed, and
the load takes seconds, not minutes); the timed window is bounded by `--seconds` (120).
Output: results/index-wake-<date>.json and .md.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from collections.abc import Iterable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import asyncpg

from haki_context.core.serving.scope_indexes import ScopeGrowth
from haki_context.db.scope_indexes import ScopeRows
from haki_context.settings import Settings

from .in_process import RESULTS, figures, post, run_and_write, scratch_database, served
from .latency_server import AGENT_QUERY

DATABASE = "haki_bench_index_wake"
BATCH = 1000
WORDS = [
    "garden",
    "river",
    "concert",
    "sister",
    "painting",
    "camping",
    "adoption",
    "support",
    "school",
    "beach",
    "photo",
    "race",
]


class _Unwoken(ScopeGrowth):
    """The server before the wake: writes tell the pass nothing; it runs on its interval only."""

    def saw(self, counts: Iterable[ScopeRows], settings: Settings) -> None:
        return None


async def _ready(conn: asyncpg.Connection, subject: str) -> bool:
    return bool(
        await conn.fetchval(
            "SELECT ready_at IS NOT NULL FROM scope_vector_indexes WHERE subject_id = $1 AND table_name = 'episode_chunks'",
            subject,
        )
    )


async def run_one(dsn: str, *, woken: bool, events: int, seconds: float, after: float) -> dict[str, Any]:
    subject = f"loaded-{'woken' if woken else 'interval'}"
    mutation = "mutation($i: [EventInput!]!) { recordEvents(inputs: $i) { id } }"
    async with served(dsn, scope_growth=None if woken else _Unwoken()) as (http, rt):
        await asyncio.sleep(1.0)  # the pass at start-up (nothing to build yet) is over
        load_started = time.monotonic()
        for start in range(0, events, BATCH):
            inputs = [
                {
                    "subjectId": subject,
                    "kind": "conversation.message",
                    "payload": {
                        "speaker": "Ann",
                        "text": f"turn {i}: the {WORDS[i % 12]} and the {WORDS[(i * 7) % 12]}",
                    },
                }
                for i in range(start, min(events, start + BATCH))
            ]
            await post(http, mutation, {"i": inputs})
        loaded = time.monotonic()
        conn = await asyncpg.connect(dsn)
        before: list[float] = []
        after_ms: list[float] = []
        ready_s: float | None = None
        try:
            i = 0
            while time.monotonic() - loaded < seconds:
                if ready_s is None and await _ready(conn, subject):
                    ready_s = time.monotonic() - loaded
                if ready_s is not None and time.monotonic() - loaded > ready_s + after:
                    break
                variables = {"s": subject, "q": f"what about the {WORDS[i % 12]} on day {i}?", "b": 900}
                t = time.perf_counter()
                await post(http, AGENT_QUERY, variables)
                (before if ready_s is None else after_ms).append((time.perf_counter() - t) * 1000)
                i += 1
            # The same calls once the load has settled: the tables vacuumed (visibility map set,
            # hint bits written) and analyzed, as autovacuum leaves them some time later.
            settled: list[float] = []
            if ready_s is not None:
                await conn.execute("VACUUM (ANALYZE) events, episode_chunks")
                started = time.monotonic()
                while time.monotonic() - started < after:
                    variables = {"s": subject, "q": f"what about the {WORDS[i % 12]} on day {i}?", "b": 900}
                    t = time.perf_counter()
                    await post(http, AGENT_QUERY, variables)
                    settled.append((time.perf_counter() - t) * 1000)
                    i += 1
        finally:
            await conn.close()
        del rt
    return {
        "variant": "woken" if woken else "interval only",
        "load_s": round(loaded - load_started, 2),
        "ready_after_load_s": None if ready_s is None else round(ready_s, 2),
        "exact_scan": figures(before),
        "own_index": figures(after_ms),
        "settled": figures(settled),
    }


def _markdown(result: dict[str, Any]) -> str:
    lines = [
        f"# Index wake, {result['at']}",
        "",
        f"`{result['command']}`: {result['events']:,} events (one chunk each) recorded into one subject in batches"
        f" of {BATCH:,}, then `context` calls back to back (agent selection, budget 900); HAKI_SCOPE_INDEX_ROWS"
        " and HAKI_SCOPE_INDEX_INTERVAL_S at their defaults; the hashing embedder.",
        "",
        "| variant | load s | index ready after the load, s | calls on the exact scan: n, p50 / p95 ms | calls on the own index: n, p50 / p95 ms | the same, settled: n, p50 / p95 ms |",
        "|---|---|---|---|---|---|",
    ]
    for r in result["runs"]:
        e, o, t = r["exact_scan"], r["own_index"], r["settled"]
        ready = "not within the window" if r["ready_after_load_s"] is None else r["ready_after_load_s"]
        lines.append(
            f"| {r['variant']} | {r['load_s']} | {ready} | {e['calls']}, {e.get('p50_ms', '-')} / {e.get('p95_ms', '-')}"
            f" | {o['calls']}, {o.get('p50_ms', '-')} / {o.get('p95_ms', '-')}"
            f" | {t['calls']}, {t.get('p50_ms', '-')} / {t.get('p95_ms', '-')} |"
        )
    return "\n".join(lines) + "\n"


async def run(dsn: str, args: argparse.Namespace) -> dict[str, Any]:
    runs = []
    async with scratch_database(dsn, DATABASE) as bench:
        for woken in (True, False):
            runs.append(await run_one(bench, woken=woken, events=args.events, seconds=args.seconds, after=args.after))
            print(json.dumps(runs[-1]), flush=True)
    return {
        "at": datetime.now(UTC).isoformat(timespec="seconds"),
        "command": "python -m benchmarks.index_wake " + " ".join(sys.argv[1:]),
        "events": args.events,
        "runs": runs,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--events", type=int, default=10_000)
    parser.add_argument("--seconds", type=float, default=120.0, help="the longest timed window after the load")
    parser.add_argument("--after", type=float, default=10.0, help="seconds timed once the index is ready")
    parser.add_argument("--database-url", help="a PostgreSQL (its `postgres` database) instead of a fresh embedded one")
    parser.add_argument("--out", type=Path, default=RESULTS)
    return run_and_write(parser.parse_args(argv), run, name="index-wake", markdown=_markdown)


if __name__ == "__main__":
    raise SystemExit(main())
