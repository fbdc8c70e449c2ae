"""`python -m benchmarks.defaults_latency`: the context p50 with the seed's defaults vs the current ones.

One subject holds 1,000 LoCoMo turns (conversations 26 + 30 + ..., mode a, real
embedder); distinct questions alternate between two runtimes on the same
database that differ only by the assembler settings. The query embedding is
included (no two questions are equal, so the query cache never hits).
Issue 5 bounds the ratio at 1.3.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import tempfile
import time
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

from haki_context.core.assembler import assemble
from haki_context.core.embedder import Embedder, encoder_for
from haki_context.core.events import EventInput, record_events
from haki_context.core.runtime import Runtime
from haki_context.db import embedded, migrate
from haki_context.db.pool import create_pool
from haki_context.settings import Settings

from .locomo import load_conversations
from .quality import DEFAULT_DATA

# The seed's assembler (DESIGN.md); everything else as the current defaults.
SEED = {
    "episode_top_k": 8,
    "episode_max_k": 8,
    "episode_text_k": 0,
    "episode_ranking": "cosine",
    "episode_excerpt_format": "json",
    "weight_full_text": 0.25,
    "full_text_rank": "cover_density",
    "fusion": "weighted",
    "speaker_boost": 0.0,
}


async def run(turns: int, questions: int, provider: str) -> dict:
    convs = load_conversations(DEFAULT_DATA)
    payloads = [(t.payload, t.occurred_at) for c in convs for t in c.turns][:turns]
    asked = [q.question for c in convs for q in c.questions][: questions * 2]
    data_dir = Path(tempfile.mkdtemp(prefix="haki-defaults-"))
    server = embedded.start(data_dir)
    try:
        await migrate.apply(server.uri)
        pool = await create_pool(server.uri, max_size=4)
        current = Settings(database_url=server.uri, embed_provider=provider)
        embedder = Embedder(encoder_for(current), cache_size=0)
        rt_new = Runtime(pool=pool, embedder=embedder, settings=current)
        rt_seed = replace(rt_new, settings=current.model_copy(update=SEED))
        for i in range(0, len(payloads), 200):
            await record_events(
                rt_new,
                "bench",
                [EventInput("s", "conversation.message", p, at) for p, at in payloads[i : i + 200]],
            )
        async with pool.acquire() as conn:  # what autovacuum gives a server in use: statistics, visibility map
            await conn.execute("VACUUM ANALYZE")
        for q in asked[:10]:  # warm-up
            await assemble(rt_new, "bench", "s", q + " warm", 900)
        times: dict[str, list[float]] = {"seed": [], "new": []}
        steps: dict[str, list[tuple[float, ...]]] = {"seed": [], "new": []}
        for i, q in enumerate(asked):
            name, rt = (("seed", rt_seed), ("new", rt_new))[i % 2]
            t = time.perf_counter()
            packet = await assemble(rt, "bench", "s", f"{q} ({i})", 900)
            times[name].append((time.perf_counter() - t) * 1000)
            tm = packet.trace.timings
            steps[name].append((tm.embed_ms, tm.retrieve_ms, tm.pack_ms, tm.persist_ms))
        await pool.close()
        embedder.close()
    finally:
        server.close()
    seed, new = statistics.median(times["seed"]), statistics.median(times["new"])
    breakdown = {
        name: dict(
            zip(("embed_ms", "retrieve_ms", "pack_ms", "persist_ms"), (statistics.median(col) for col in zip(*rows)))
        )
        for name, rows in steps.items()
    }
    return {
        "turns": turns,
        "questions_each": len(times["new"]),
        "embedder": provider,
        "p50_breakdown": breakdown,
        "seed_p50_ms": seed,
        "new_p50_ms": new,
        "ratio": new / seed,
        "seed_settings": SEED,
        "at": datetime.now(UTC).isoformat(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--turns", type=int, default=1000)
    parser.add_argument("--questions", type=int, default=150)
    parser.add_argument("--embedder", default=Settings().embed_provider.value)
    args = parser.parse_args()
    result = asyncio.run(run(args.turns, args.questions, args.embedder))
    print(json.dumps(result, indent=2))
    out = Path("benchmarks/results") / f"defaults-latency-{args.embedder}-{datetime.now(UTC).date()}.json"
    out.write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
