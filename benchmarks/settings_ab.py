"""Two sets of settings on one checkout, call by call over HTTP: `python -m benchmarks.settings_ab`.

What `revision_ab` does for two commits, for two configurations of this one:
two servers on one kept latency database, the baseline with `--baseline-set`
overrides and the current one with `--set` overrides (default: none, the
shipped defaults), answer the same distinct questions in turns, the order
alternating; the figure is the median of the per-pair differences. Every
other question has " in May 2023" appended, so a ranking step that reacts to
a named date runs on half the calls.

    python -m benchmarks.latency --n 10000 --database-url URL --keep     # once
    python -m benchmarks.settings_ab --database-url URL/haki_bench_10000 \\
        --baseline-set packing=sections,date_boost=0,neighbour_weight=0,weight_similarity=0.6

Prints one JSON object: p50 / p95 per side and the per-pair median and mean
difference (current - baseline), in ms.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from . import latency_texts
from .latency_common import SUBJECT, Config
from .latency_server import AGENT_QUERY, DEBUG_QUERY, Server, graphql
from .lean_http import LeanClient

WARMUP = 20  # calls each before measuring, as in revision_ab


def _pairs(text: str) -> dict[str, str]:
    out = {}
    for item in filter(None, (p.strip() for p in text.split(","))):
        name, sep, value = item.partition("=")
        if not sep:
            raise SystemExit(f"{item!r}: expected name=value")
        out[name.strip()] = value.strip()
    return out


async def compare(
    dsn: str, *, baseline: dict[str, str], current: dict[str, str], pairs: int, selection: str, budget: int
) -> dict[str, Any]:
    """Interleaved calls to both servers; per side p50 / p95 ms, and the per-pair difference."""
    query = AGENT_QUERY if selection == "agent" else DEBUG_QUERY
    questions = list(itertools.islice(latency_texts.questions(seed=4242), WARMUP + pairs))
    questions = [q if i % 2 else q.rstrip("?") + " in May 2023?" for i, q in enumerate(questions)]
    fixed = {"scope_index_interval_s": "0"}
    with tempfile.TemporaryDirectory(prefix="haki-settings-ab-") as logs:
        servers = {
            "baseline": Server(dsn, Config(ns=[], overrides={**fixed, **baseline}), Path(logs)),
            "current": Server(dsn, Config(ns=[], overrides={**fixed, **current}), Path(logs)),
        }
        clients: dict[str, LeanClient] = {}
        try:
            for name, server in servers.items():
                await server.start()
                clients[name] = LeanClient(server.url)
            times: dict[str, list[float]] = {name: [] for name in servers}
            for i, q in enumerate(questions):
                for name in ("baseline", "current") if i % 2 else ("current", "baseline"):
                    ms, _ = await graphql(clients[name], query, {"s": SUBJECT, "q": q, "b": budget})
                    if i >= WARMUP:
                        times[name].append(ms)
        finally:
            for client in clients.values():
                await client.aclose()
            for server in servers.values():
                await server.stop()
    diff = np.array(times["current"]) - np.array(times["baseline"])
    return {
        "pairs": pairs,
        "selection": selection,
        "budget": budget,
        "baseline_set": baseline,
        "current_set": current,
        **{
            f"{name}_ms": {"p50": float(np.median(xs)), "p95": float(np.percentile(xs, 95))}
            for name, xs in times.items()
        },
        "current_minus_baseline_ms": {"median": float(np.median(diff)), "mean": float(diff.mean())},
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m benchmarks.settings_ab",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--database-url", required=True, help="a database the latency benchmark seeded (--keep)")
    p.add_argument("--baseline-set", default="", metavar="NAME=VALUE,...", help="the baseline server's settings")
    p.add_argument("--set", dest="current_set", default="", metavar="NAME=VALUE,...", help="the current server's")
    p.add_argument("--pairs", type=int, default=200)
    p.add_argument("--selection", choices=["agent", "debug"], default="agent")
    p.add_argument("--budget", type=int, default=900)
    a = p.parse_args(argv)
    result = asyncio.run(
        compare(
            a.database_url,
            baseline=_pairs(a.baseline_set),
            current=_pairs(a.current_set),
            pairs=a.pairs,
            selection=a.selection,
            budget=a.budget,
        )
    )
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
