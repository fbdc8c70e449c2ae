"""Frequent words against realistic text: `python -m benchmarks.frequent_words`.

Full text is where a workload of frequent words (templated texts in which most terms appear
in most rows) could cost more than realistic text: each query word's rows are read to count
and rank them. This harness serves the app in process on a fresh database and records
`--events` events (10,000) through `recordEvents` and `--facts` facts (10,000) through
`assertFact` into each of two subjects: `realistic`, the latency harness's generated
conversations and facts (benchmarks/latency_texts.py), and `frequent`, sentences made from a
vocabulary of 24 words, so each word is held by thousands of rows. Once
both scopes have their own indexes (a write reaching HAKI_SCOPE_INDEX_ROWS wakes the build) and
the tables are vacuumed and analyzed, it times `--calls` (300) `context` calls per subject,
interleaved (agent selection, budget 900): natural questions for `realistic`, questions made
of the frequent words for `frequent`. It reports each subject's p50 / p95 and the ratio of
p50s, frequent / realistic.

The hashing embedder stands in for the model (both subjects get the same one, and the
full-text part, which frequent words strain, does not depend on it). Output:
results/frequent-words-<date>.json and .md.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import random
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import asyncpg
import httpx

from haki_context.settings import Settings

from . import latency_texts
from .in_process import RESULTS, figures, post, run_and_write, scratch_database, served
from .index_wake import BATCH
from .latency_server import AGENT_QUERY

SCOPE_INDEX_ROWS = Settings().scope_index_rows
DATABASE = "haki_bench_frequent_words"
VOCABULARY = [
    *["project", "meeting", "report", "team", "status", "update", "client", "budget"],
    *["plan", "review", "week", "task", "deadline", "call", "email", "note"],
    *["today", "tomorrow", "morning", "office", "launch", "design", "draft", "result"],
]


def _frequent_text(rng: random.Random) -> str:
    words = rng.sample(VOCABULARY, 8) + rng.choices(VOCABULARY, k=6)
    rng.shuffle(words)
    return " ".join(words).capitalize() + "."


def _frequent_question(rng: random.Random) -> str:
    return f"What about the {' '.join(rng.sample(VOCABULARY, 4))}?"


async def _load(http: httpx.AsyncClient, subject: str, texts: list[str]) -> None:
    mutation = "mutation($i: [EventInput!]!) { recordEvents(inputs: $i) { id } }"
    for start in range(0, len(texts), BATCH):
        inputs = [
            {"subjectId": subject, "kind": "conversation.message", "payload": {"speaker": "Ann", "text": t}}
            for t in texts[start : start + BATCH]
        ]
        await post(http, mutation, {"i": inputs})


async def _assert(http: httpx.AsyncClient, subject: str, facts: list[tuple[str, Any]], concurrency: int = 8) -> None:
    """Assert (predicate, value) pairs, ADD mode (every one a fact of its own), `concurrency` at a time."""
    mutation = "mutation($i: FactInput!) { assertFact(input: $i) { outcome } }"

    async def one(k: int) -> None:
        for predicate, value in facts[k::concurrency]:
            fact = {"subjectId": subject, "predicate": predicate, "value": value, "mode": "ADD"}
            await post(http, mutation, {"i": fact})

    await asyncio.gather(*(one(k) for k in range(concurrency)))


async def _indexed(conn: asyncpg.Connection, subjects: list[str], tables: list[str], within_s: float) -> None:
    started = time.monotonic()
    while tables:
        n = await conn.fetchval(
            "SELECT count(*) FROM scope_vector_indexes WHERE subject_id = ANY($1::text[])"
            " AND table_name = ANY($2::text[]) AND ready_at IS NOT NULL",
            subjects,
            tables,
        )
        if n == len(subjects) * len(tables):
            return
        if time.monotonic() - started > within_s:
            raise RuntimeError(f"the scopes {subjects} were not indexed within {within_s:g} s")
        await asyncio.sleep(0.2)


async def run(dsn: str, args: argparse.Namespace) -> dict[str, Any]:
    rng = random.Random(5)
    realistic = [str(e.payload.get("text", "")) for e in itertools.islice(latency_texts.events(), args.events)]
    frequent = [_frequent_text(rng) for _ in range(args.events)]
    realistic_facts = [(f.predicate, f.value) for f in itertools.islice(latency_texts.facts(), args.facts)]
    frequent_facts: list[tuple[str, Any]] = [
        ("_".join(rng.sample(VOCABULARY, 2)), _frequent_text(rng)) for _ in range(args.facts)
    ]
    async with scratch_database(dsn, DATABASE) as bench, served(bench) as (http, _):
        await _load(http, "realistic", realistic)
        await _load(http, "frequent", frequent)
        await _assert(http, "realistic", realistic_facts)
        await _assert(http, "frequent", frequent_facts)
        # The tables where the subjects reach the index size (a smoke run's reach none).
        tables = [t for t, n in (("episode_chunks", args.events), ("facts", args.facts)) if n >= SCOPE_INDEX_ROWS]
        conn = await asyncpg.connect(bench)
        try:
            await _indexed(conn, ["realistic", "frequent"], tables, within_s=120)
            await conn.execute("VACUUM (ANALYZE) events, episode_chunks, facts")
        finally:
            await conn.close()
        questions = latency_texts.questions()
        timed: dict[str, list[float]] = {"realistic": [], "frequent": []}
        for i in range(args.warmup + args.calls):
            for subject, q in (("realistic", next(questions)), ("frequent", _frequent_question(rng))):
                t = time.perf_counter()
                await post(http, AGENT_QUERY, {"s": subject, "q": q, "b": 900})
                if i >= args.warmup:
                    timed[subject].append((time.perf_counter() - t) * 1000)
    by_subject = {subject: figures(ms) for subject, ms in timed.items()}
    return {
        "at": datetime.now(UTC).isoformat(timespec="seconds"),
        "command": "python -m benchmarks.frequent_words " + " ".join(sys.argv[1:]),
        "events": args.events,
        "facts": args.facts,
        "figures": by_subject,
        "ratio_p50": round(by_subject["frequent"]["p50_ms"] / by_subject["realistic"]["p50_ms"], 2),
    }


def _markdown(result: dict[str, Any]) -> str:
    f = result["figures"]
    return "\n".join(
        [
            f"# Frequent words, {result['at']}",
            "",
            f"`{result['command']}`: {result['events']:,} events and {result['facts']:,} facts in each subject, own indexes built, tables vacuumed and"
            " analyzed; `context` calls interleaved (agent selection, budget 900); the hashing embedder.",
            "",
            "| subject | calls | p50 / p95 ms |",
            "|---|---|---|",
            *(f"| {s} | {v['calls']} | {v['p50_ms']} / {v['p95_ms']} |" for s, v in f.items()),
            "",
            f"p50 frequent / realistic: {result['ratio_p50']}x",
            "",
        ]
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--events", type=int, default=10_000)
    parser.add_argument("--facts", type=int, default=10_000, help="facts asserted into each subject")
    parser.add_argument("--calls", type=int, default=300, help="timed calls per subject")
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--database-url", help="a PostgreSQL (its `postgres` database) instead of a fresh embedded one")
    parser.add_argument("--out", type=Path, default=RESULTS)
    return run_and_write(parser.parse_args(argv), run, name="frequent-words", markdown=_markdown)


if __name__ == "__main__":
    raise SystemExit(main())
