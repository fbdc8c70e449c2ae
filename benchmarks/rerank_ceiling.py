"""The most any reranker of today's candidates could reach: `python -m benchmarks.rerank_ceiling`.

A reranker reorders the candidates the server already retrieved; it cannot serve a turn that
is not among them. For every LoCoMo dev question (turns only, mode "a" of benchmarks/quality.py)
and budget, this asks `context` as the quality harness does and reads the call's trace, which
records every candidate with its decision: the turns served (INCLUDED) give the server's
recall and hit, all the episode candidates it scored and kept (the best `episode_candidates(budget)`
of the vector and full-text union: 32 at 900, 64 from 2000 on; served, cut by the budget, or
blocked) give the pool's, the ceiling of a perfect reranker that puts every evidence turn of the pool first
(LoCoMo questions cite 1 to 4 turns, far fewer than the ~22 turns a 900-token packet holds).
Writes nothing; prints one row per budget.
"""

from __future__ import annotations

import argparse
import asyncio
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .locomo import add_data_argument, load_conversations
from .quality import Client, Config, build_settings, ingest, open_server

TRACE_QUERY = """
query($s: String!, $q: String!, $b: Int) {
  context(subjectId: $s, query: $q, budget: $b) {
    trace { decisions(itemKind: EPISODE) { itemId chunk decision } }
  }
}
"""


def turns_of(decisions: list[dict[str, Any]], chunk_turns: dict[str, tuple[str, ...]], included: bool) -> set[str]:
    """The dia_ids of the episode decisions (only the INCLUDED ones when `included`)."""
    out: set[str] = set()
    for d in decisions:
        if included and d["decision"] != "INCLUDED":
            continue
        turns = chunk_turns.get(str(d["itemId"]))
        chunk = d["chunk"] if d["chunk"] is not None else 0
        if turns is not None and 0 <= chunk < len(turns):
            out.add(turns[chunk])
    return out


async def measure(
    data_dir: Path, budgets: Sequence[int], limit: int | None, overrides: dict[str, str]
) -> dict[int, dict[str, float]]:
    """Recall and hit of the served turns and of the whole candidate pool, per budget."""
    conversations = load_conversations(data_dir)
    if limit is not None:
        for conv in conversations:
            conv.questions = conv.questions[:limit]
    n_questions = sum(len(c.questions) for c in conversations)
    base = build_settings(None, overrides)
    sums = {b: {"evidence": 0, "served": 0, "pool": 0, "served_hit": 0, "pool_hit": 0, "pool_size": 0} for b in budgets}
    async with open_server(Config(data_dir=data_dir), base, n_questions) as (rt, _encoder):
        client = Client(rt)
        try:
            run_id = uuid.uuid4().hex[:8]
            for conv in conversations:
                ingested = await ingest(client, conv, "a", run_id, base.episode_excerpt_chars)
                for q in conv.questions:
                    evidence = set(q.evidence)
                    for b in budgets:
                        data = await client.execute(TRACE_QUERY, {"s": ingested.subject, "q": q.question, "b": b})
                        decisions = data["context"]["trace"]["decisions"]
                        served = turns_of(decisions, ingested.chunk_turns, included=True)
                        pool = turns_of(decisions, ingested.chunk_turns, included=False)
                        row = sums[b]
                        row["evidence"] += len(evidence)
                        row["served"] += len(served & evidence)
                        row["pool"] += len(pool & evidence)
                        row["served_hit"] += bool(served & evidence)
                        row["pool_hit"] += bool(pool & evidence)
                        row["pool_size"] += len(pool)
        finally:
            await client.aclose()
    return {
        b: {
            "server_recall": row["served"] / row["evidence"],
            "server_hit": row["served_hit"] / n_questions,
            "pool_recall": row["pool"] / row["evidence"],
            "pool_hit": row["pool_hit"] / n_questions,
            "pool_turns": row["pool_size"] / n_questions,
        }
        for b, row in sums.items()
    }


def main(argv: Sequence[str] | None = None) -> None:
    """Print, per budget, the server's recall / hit and the candidate pool's (a reranker's ceiling)."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.rerank_ceiling", description=__doc__.split("\n")[0])
    add_data_argument(parser)
    parser.add_argument("--budgets", default="300,900,2000")
    parser.add_argument("--limit-questions", type=int, default=None, help="per conversation (a smoke run)")
    parser.add_argument("--set", action="append", default=[], metavar="NAME=VALUE", help="override a setting")
    args = parser.parse_args(argv)
    overrides = dict(item.split("=", 1) for item in args.set)
    budgets = [int(b) for b in args.budgets.split(",")]
    result = asyncio.run(measure(args.data, budgets, args.limit_questions, overrides))
    print("| budget | server recall / hit | candidate pool recall / hit (ceiling) | turns in the pool |")
    print("|---:|---:|---:|---:|")
    for b, r in result.items():
        print(
            f"| {b} | {r['server_recall']:.3f} / {r['server_hit']:.3f} | "
            f"{r['pool_recall']:.3f} / {r['pool_hit']:.3f} | {r['pool_turns']:.1f} |"
        )


if __name__ == "__main__":
    main()
