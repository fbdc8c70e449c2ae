"""Bytes per fact, per event and per call, for the capacity model: `python -m benchmarks.capacity`.

On the latency benchmark's database (one subject of N facts + N events among ten such, seeded
as `benchmarks.latency` seeds it, its scope indexes built): the size on disk of each table and
of each of its indexes (the per-subject HNSW and IVFFlat indexes included), per row; then
`--calls` agent `context` calls in process, persisted as a server persists them, and what each
adds to the traces' tables and to the write-ahead log (what a replica replays).

`--database-url URL` names a server: the database `haki_bench_<N>` is seeded there unless it is
kept already (`benchmarks.latency --keep` makes the same one), and kept. Output:
benchmarks/results/capacity-<date>.json and .md (docs/scale-out.md, "Capacity").
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
from pathlib import Path
from typing import Any

import asyncpg

from haki_context.app import open_runtime
from haki_context.core.context.assembler import start_assembly
from haki_context.settings import Settings

from . import latency_texts
from .latency_common import DEFAULT_OUT, PROJECT, SUBJECT, Config, dated_result, log, write_result
from .latency_databases import create_database, database_dsn, prepare, seeded

# The tables of a subject's memory, and of its calls' traces.
MEMORY_TABLES = ("facts", "events", "episode_chunks")
TRACE_TABLES = ("context_traces", "trace_decisions")

_SIZES = """
SELECT c.relname AS table_name,
       pg_relation_size(c.oid) AS heap,
       coalesce(pg_total_relation_size(c.reltoastrelid), 0) AS toast,
       pg_indexes_size(c.oid) AS indexes,
       (SELECT count(*) FROM pg_index i WHERE i.indrelid = c.oid) AS index_count
FROM pg_class c WHERE c.relname = ANY($1::text[]) AND c.relkind = 'r'
"""
_VECTOR_INDEXES = """
SELECT i.tablename AS table_name, sum(pg_relation_size(quote_ident(i.indexname)::regclass)) AS bytes
FROM pg_indexes i
WHERE i.tablename = ANY($1::text[]) AND (i.indexdef ILIKE '% USING hnsw %' OR i.indexdef ILIKE '% USING ivfflat %')
GROUP BY i.tablename
"""


async def sizes(conn: asyncpg.Connection, tables: tuple[str, ...]) -> dict[str, dict[str, float]]:
    """Each table's bytes (heap, toast, indexes, vector indexes among them) and rows."""
    await conn.execute("CHECKPOINT")  # sizes as on disk, the last writes included
    vectors = {r["table_name"]: int(r["bytes"]) for r in await conn.fetch(_VECTOR_INDEXES, list(tables))}
    out: dict[str, dict[str, float]] = {}
    for r in await conn.fetch(_SIZES, list(tables)):
        name = str(r["table_name"])
        rows = int(await conn.fetchval(f"SELECT count(*) FROM {name}"))
        out[name] = {
            "rows": rows,
            "heap_bytes": int(r["heap"]),
            "toast_bytes": int(r["toast"]),
            "index_bytes": int(r["indexes"]),
            "vector_index_bytes": vectors.get(name, 0),
            "indexes": int(r["index_count"]),
        }
    return out


def per_row(table: dict[str, float]) -> dict[str, float]:
    """Bytes per row: all of it, and the vector indexes' share."""
    rows = max(table["rows"], 1)
    total = table["heap_bytes"] + table["toast_bytes"] + table["index_bytes"]
    return {"total": total / rows, "vector_indexes": table["vector_index_bytes"] / rows}


async def trace_volume(dsn: str, calls: int) -> dict[str, float]:
    """What `calls` persisted context calls add to the traces' tables and to the WAL, per call."""
    settings = Settings(database_url=dsn, embed_provider="onnx", dev_mode=True, scope_index_interval_s=0)
    rt, stack = await open_runtime(settings)
    async with stack:
        async with rt.pool.acquire() as conn:
            before = await sizes(conn, TRACE_TABLES)
            wal_before = int(await conn.fetchval("SELECT (pg_current_wal_lsn() - '0/0'::pg_lsn)::bigint"))
        for question in itertools.islice(latency_texts.questions(), calls):
            assembly = await start_assembly(rt, PROJECT, SUBJECT, question, 900, persist=True)
            await assembly.write.committed()
        async with rt.pool.acquire() as conn:
            wal_after = int(await conn.fetchval("SELECT (pg_current_wal_lsn() - '0/0'::pg_lsn)::bigint"))
            after = await sizes(conn, TRACE_TABLES)
    grown = sum(
        (after[t]["heap_bytes"] + after[t]["toast_bytes"] + after[t]["index_bytes"])
        - (before[t]["heap_bytes"] + before[t]["toast_bytes"] + before[t]["index_bytes"])
        for t in TRACE_TABLES
    )
    decisions = after["trace_decisions"]["rows"] - before["trace_decisions"]["rows"]
    return {
        "calls": calls,
        "bytes_per_call": grown / calls,
        "decisions_per_call": decisions / calls,
        "wal_bytes_per_call": (wal_after - wal_before) / calls,
    }


async def run(base: str, n: int, calls: int) -> dict[str, Any]:
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
    conn = await asyncpg.connect(dsn)
    try:
        memory = await sizes(conn, MEMORY_TABLES)
    finally:
        await conn.close()
    log(f"N={n}: {calls} persisted context calls")
    traces = await trace_volume(dsn, calls)
    return {
        "n": n,
        "tables": memory,
        "per_row": {t: per_row(v) for t, v in memory.items()},
        "traces": traces,
    }


def report(result: dict[str, Any]) -> str:
    """The figures as a Markdown table."""
    per_row_ = result["per_row"]
    tables = result["tables"]
    events, chunks = tables["events"], tables["episode_chunks"]
    chunks_per_event = chunks["rows"] / max(events["rows"], 1)
    event_total = per_row_["events"]["total"] + chunks_per_event * per_row_["episode_chunks"]["total"]
    traces = result["traces"]
    lines = [
        f"# Capacity, N = {result['n']:,} (one subject of N facts + N events among ten such)",
        "",
        "| figure | bytes |",
        "|---|---|",
        f"| a fact: table, toast and indexes | {per_row_['facts']['total']:,.0f} |",
        f"| of which its vector indexes (HNSW and IVFFlat of its scope) | {per_row_['facts']['vector_indexes']:,.0f} |",
        f"| an event with its {chunks_per_event:.2f} chunk(s): tables and indexes | {event_total:,.0f} |",
        f"| of which the chunks' vector indexes | {chunks_per_event * per_row_['episode_chunks']['vector_indexes']:,.0f} |",
        f"| a persisted context call: its trace and {traces['decisions_per_call']:.0f} decisions | {traces['bytes_per_call']:,.0f} |",
        f"| a persisted context call: write-ahead log | {traces['wal_bytes_per_call']:,.0f} |",
        "",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.capacity", description=__doc__)
    p.add_argument("--database-url", required=True)
    p.add_argument("--n", type=int, default=10_000)
    p.add_argument("--calls", type=int, default=200)
    p.add_argument("--out", type=Path, default=DEFAULT_OUT)
    a = p.parse_args(argv)
    result = asyncio.run(run(a.database_url, a.n, a.calls))
    text = report(result)
    print(text)
    path = dated_result("capacity", a.out)
    write_result(result, path)
    path.with_suffix(".md").write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
