"""Does a replay reproduce the stored call? `python -m benchmarks.replay_fidelity`.

A real workload, as an agent lives it: each LoCoMo dev conversation (`--data` or `$LOCOMO_DIR`)
is recorded session by session through GraphQL, one event per turn, each session's observations
asserted as facts citing their evidence turns (validFrom the session date) and a fact the agent
keeps current (`current_session`, superseded every session). After each session the questions
whose evidence is all recorded by then are asked (budget 900), so every later call finds more
memory than the one before. Then every stored call is replayed (`replay(traceId)`, no overrides),
when the memory holds all the later sessions too, and the share whose decisions are identical is
the figure; a differing replay's changes are counted by kind. A sample is also compared with now
(`compareWithNow`) to count what the later sessions changed.

Output: benchmarks/results/replay-fidelity-<date>.json (and the figures on stdout).
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import time
import uuid
from pathlib import Path
from typing import Any

from haki_context.settings import Settings

from .latency_common import dated_result, write_result
from .locomo import add_data_argument, events, load_conversations
from .quality import (
    ASSERT_MUTATION,
    DEFAULT_OUT,
    RECORD_MUTATION,
    Client,
    Config,
    build_settings,
    open_server,
)

CONTEXT = "query($s: String!, $q: String!) { context(subjectId: $s, query: $q, budget: 900) { traceId } }"
REPLAY = """
query($id: ID!, $now: Boolean!) {
  replay(traceId: $id, compareWithNow: $now) {
    diff { identical added removed moved scoreChanged decisionChanged changes { kinds why } }
  }
}
"""


async def live(client: Client, conv: Any, run_id: str) -> list[str]:
    """Record the conversation session by session, asking what can be answered after each; the trace ids."""
    subject = f"replay-{conv.id}-{run_id}"
    specs = events(conv, "a")  # one per turn, in the turns' order
    event_of: dict[str, str] = {}
    asked: set[int] = set()
    traces: list[str] = []
    for session in sorted(conv.sessions):
        batch = [(t, s) for t, s in zip(conv.turns, specs, strict=True) if t.session == session]
        if batch:
            inputs = [
                {"subjectId": subject, "kind": s.kind, "payload": s.payload, "occurredAt": s.occurred_at.isoformat()}
                for _, s in batch
            ]
            data = await client.execute(RECORD_MUTATION, {"i": inputs})
            for (turn, _), event in zip(batch, data["recordEvents"], strict=True):
                event_of[turn.dia_id] = event["id"]
        for obs in (o for o in conv.observations if o.session == session):
            fact = {
                "subjectId": subject,
                "predicate": obs.predicate,
                "value": obs.text,
                "validFrom": obs.valid_from.isoformat(),
                "sourceEventIds": [event_of[d] for d in obs.evidence if d in event_of],
                "mode": "ADD",
            }
            await client.execute(ASSERT_MUTATION, {"i": fact})
        current = {"subjectId": subject, "predicate": "current_session", "value": session}
        await client.execute(ASSERT_MUTATION, {"i": current})
        for q in conv.questions:
            if q.index not in asked and all(d in event_of for d in q.evidence):
                asked.add(q.index)
                traces.append((await client.execute(CONTEXT, {"s": subject, "q": q.question}))["context"]["traceId"])
    return traces


async def run(data_dir: Path, database_url: str | None, compare_sample: int) -> dict[str, Any]:
    convs = load_conversations(data_dir)
    n_questions = sum(len(c.questions) for c in convs)
    base: Settings = build_settings(database_url, {})
    config = Config(data_dir=data_dir, database_url=database_url, out_dir=None, quiet=True)
    async with open_server(config, base, n_questions) as (rt, _):
        client = Client(rt)
        try:
            run_id = uuid.uuid4().hex[:8]
            started = time.perf_counter()
            traces = [t for conv in convs for t in await live(client, conv, run_id)]
            live_s = time.perf_counter() - started
            identical, kinds, replay_ms = 0, collections.Counter[str](), []
            for trace_id in traces:
                t = time.perf_counter()
                diff = (await client.execute(REPLAY, {"id": trace_id, "now": False}))["replay"]["diff"]
                replay_ms.append((time.perf_counter() - t) * 1000.0)
                identical += diff["identical"]
                kinds.update(k for c in diff["changes"] for k in c["kinds"])
            step = max(1, len(traces) // max(1, compare_sample))
            changed_now, whys = 0, collections.Counter[str]()
            sample = traces[::step][:compare_sample]
            for trace_id in sample:
                diff = (await client.execute(REPLAY, {"id": trace_id, "now": True}))["replay"]["diff"]
                changed_now += not diff["identical"]
                whys.update((c["why"] or "ranking only").split(" ")[0] for c in diff["changes"])
        finally:
            await client.aclose()
    replay_ms.sort()
    return {
        "conversations": [c.id for c in convs],
        "traces": len(traces),
        "replayed_identical": identical,
        "share_identical": identical / len(traces) if traces else None,
        "changes_by_kind": dict(kinds),
        "replay_ms": {"p50": replay_ms[len(replay_ms) // 2], "p95": replay_ms[int(len(replay_ms) * 0.95)]}
        if replay_ms
        else None,
        "live_s": round(live_s, 1),
        "compared_with_now": {"sample": len(sample), "changed": changed_now, "why_first_word": dict(whys)},
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.replay_fidelity", description=__doc__)
    add_data_argument(p)
    p.add_argument("--database-url", default=None, help="default: a fresh embedded PostgreSQL")
    p.add_argument("--compare-sample", type=int, default=50)
    p.add_argument("--out", type=Path, default=DEFAULT_OUT)
    a = p.parse_args(argv)
    result = asyncio.run(run(a.data, a.database_url, a.compare_sample))
    write_result(result, dated_result("replay-fidelity", a.out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
