"""`python -m benchmarks.trace_notify --database-url URL/haki_bench_10000`: what announcing a
trace costs its write.

Takes the trace with the most decisions from a kept latency database, writes copies of it
with the trace write's statement without and with its pg_notify, alternating on one
connection (the order alternating too), and prints each side's p50 and the median
per-pair difference: once with nobody listening on the channel (a server process listens
only while it has subscribers) and once with a listening connection in this process, as a
server with a dashboard open holds. The copies are deleted afterwards.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
import uuid
from dataclasses import replace
from typing import Any

import asyncpg

from haki_context.core.models import ReasonCode
from haki_context.core.packet import ContextTrace
from haki_context.core.records import decision_from_row, trace_from_row
from haki_context.db import traces as db
from haki_context.db.pool import init_connection

# The trace write without its announcement: the statement as it was before it notified.
PLAIN = db._INSERT
NOTIFYING = db._INSERT_NOTIFY


def arguments(project_id: str, t: ContextTrace) -> list[Any]:
    """The statement's parameters for a copy of `t` under a new id (as db.traces.insert binds them)."""
    return [
        project_id, str(uuid.uuid4()), t.subject_id, t.query, t.budget_tokens, t.used_tokens, t.status.value,
        t.empty_reason.value if t.empty_reason else None, list(t.warnings), t.created_at,
        t.timings.embed_ms, t.timings.retrieve_ms, t.timings.pack_ms, t.timings.total_ms,
        t.facts_served, t.episodes_served, t.counts.included, t.counts.excluded, t.counts.blocked,
        *[t.reason_counts[ReasonCode(code)] for code in db.REASON_COLUMNS], list(t.decisions or ()), False,
        t.settings_id, t.as_of,
    ]  # fmt: skip


async def pairs(
    conn: asyncpg.Connection, project_id: str, trace: ContextTrace, n: int, ids: list[str]
) -> dict[str, float]:
    async def write(sql: str) -> float:
        args = arguments(project_id, trace)
        ids.append(args[1])
        started = time.perf_counter()
        await conn.fetchval(sql, *args)
        return (time.perf_counter() - started) * 1000

    for _ in range(50):  # plans and caches made once
        await write(PLAIN)
        await write(NOTIFYING)
    plain, notifying, diffs = [], [], []
    for i in range(n):
        if i % 2:
            p, q = await write(PLAIN), await write(NOTIFYING)
        else:
            q, p = await write(NOTIFYING), await write(PLAIN)
        plain.append(p)
        notifying.append(q)
        diffs.append(q - p)
    return {
        "plain_p50_ms": statistics.median(plain),
        "notifying_p50_ms": statistics.median(notifying),
        "median_pair_difference_ms": statistics.median(diffs),
    }


async def run(dsn: str, n: int) -> None:
    conn = await asyncpg.connect(dsn)
    await init_connection(conn)
    row = await conn.fetchrow(
        f"SELECT project_id, {db.TRACE_COLUMNS} FROM context_traces ORDER BY n_included + n_excluded DESC LIMIT 1"
    )
    assert row is not None, "no trace: seed the database with benchmarks.latency --keep first"
    trace = trace_from_row(row)
    decisions = await db.decisions_for(conn, row["project_id"], [str(trace.id)])
    trace = replace(trace, decisions=tuple(decision_from_row(r) for r in decisions))
    ids: list[str] = []
    try:
        alone = await pairs(conn, row["project_id"], trace, n, ids)
        heard: list[str] = []
        listener = await asyncpg.connect(dsn)
        await listener.add_listener(db.TRACE_CHANNEL, lambda *args: heard.append(args[-1]))
        try:
            listened = await pairs(conn, row["project_id"], trace, n, ids)
        finally:
            await listener.close()
        print(f"{len(decisions)} decisions per trace, {n} pairs each")
        for label, figures in (("nobody listening", alone), (f"one listener ({len(heard)} heard)", listened)):
            print(
                f"{label}: plain p50 {figures['plain_p50_ms']:.3f} ms, with pg_notify "
                f"{figures['notifying_p50_ms']:.3f} ms, median per pair {figures['median_pair_difference_ms']:+.3f} ms"
            )
    finally:
        await conn.execute("DELETE FROM trace_decisions WHERE trace_id = ANY($1::uuid[])", ids)
        await conn.execute("DELETE FROM context_traces WHERE id = ANY($1::uuid[])", ids)
        await conn.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--database-url", required=True, help="a database the latency benchmark seeded (--keep)")
    parser.add_argument("--pairs", type=int, default=2000)
    args = parser.parse_args()
    asyncio.run(run(args.database_url, args.pairs))


if __name__ == "__main__":
    main()
