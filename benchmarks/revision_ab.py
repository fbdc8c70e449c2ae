"""This checkout against another revision, over HTTP, call by call: `python -m benchmarks.revision_ab`.

Two servers on one database, one running this checkout and one a git worktree of
`--baseline` (both with this environment's packages), answer the same distinct
questions in turns, the order alternating; the figure is the median of the
per-pair differences, so the machine's drift (load, caches, the other tenant of
a shared host) falls on both sides of it alike. Whole-run figures of
`benchmarks.latency` varied by 10-25% between runs of the same code here; pairs
show a change of a few percent.

The database must hold the latency benchmark's subject: keep one with
`python -m benchmarks.latency --n 10000 --database-url URL --keep`, then pass
`--database-url URL/haki_bench_10000`. Both revisions must share its schema (a
server migrates the database it serves at start, so a revision that adds a
migration would change the baseline's too). Neither server builds scope indexes
while measured (`scope_index_interval_s` = 0).

Prints p50 / p95 of each side and the median per-pair difference, and writes
them to benchmarks/results/revision-ab-<date>.json (`--label` adds a suffix,
`--out FILE` writes elsewhere). 200 pairs at N = 10,000 take about 2 minutes on
2 cores, after the two servers' start (~10 s each).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from . import latency_texts
from .latency_common import DEFAULT_OUT, REPO_ROOT, SUBJECT, Config
from .latency_server import AGENT_QUERY, DEBUG_QUERY, Server, graphql
from .lean_http import LeanClient

WARMUP = 20  # calls each before measuring: connections, statement caches, plans made once


@contextlib.contextmanager
def worktree(revision: str) -> Iterator[Path]:
    """A detached git worktree of `revision`, removed afterwards."""
    with tempfile.TemporaryDirectory(prefix="haki-ab-") as tmp:
        path = Path(tmp) / "baseline"
        subprocess.run(
            ["git", "-C", str(REPO_ROOT), "worktree", "add", "--detach", str(path), revision],
            check=True,
            capture_output=True,
        )
        try:
            yield path
        finally:
            subprocess.run(
                ["git", "-C", str(REPO_ROOT), "worktree", "remove", "--force", str(path)],
                check=False,
                capture_output=True,
            )


async def compare(dsn: str, baseline_root: Path, pairs: int, selection: str, budget: int) -> dict[str, Any]:
    """Interleaved calls to both servers; per side p50 / p95 ms, and the per-pair difference."""
    query = AGENT_QUERY if selection == "agent" else DEBUG_QUERY
    cfg = Config(ns=[], overrides={"scope_index_interval_s": "0"})
    questions = list(itertools.islice(latency_texts.questions(seed=4242), WARMUP + pairs))
    with tempfile.TemporaryDirectory(prefix="haki-ab-logs-") as logs:
        servers = {
            "baseline": Server(dsn, cfg, Path(logs), root=baseline_root),
            "current": Server(dsn, cfg, Path(logs)),
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
        **{
            f"{name}_ms": {"p50": float(np.median(xs)), "p95": float(np.percentile(xs, 95))}
            for name, xs in times.items()
        },
        "current_minus_baseline_ms": {"median": float(np.median(diff)), "mean": float(diff.mean())},
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m benchmarks.revision_ab",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--baseline", required=True, help="the git revision to compare against")
    p.add_argument("--database-url", required=True, help="a database the latency benchmark seeded (--keep)")
    p.add_argument("--pairs", type=int, default=200)
    p.add_argument("--selection", choices=["agent", "debug"], default="agent")
    p.add_argument("--budget", type=int, default=900)
    p.add_argument("--label", default="", help="suffix of the result file's name (default: none)")
    p.add_argument("--out", type=Path, help="write the figures to this JSON file instead of benchmarks/results/")
    args = p.parse_args(argv)
    with worktree(args.baseline) as root:
        result = asyncio.run(compare(args.database_url, root, args.pairs, args.selection, args.budget))
    result["baseline"] = args.baseline
    result["database"] = args.database_url.rsplit("/", 1)[-1].split("?", 1)[0]
    for name in ("baseline", "current"):
        figures = result[f"{name}_ms"]
        print(f"{name:>8}: p50 {figures['p50']:.2f} ms, p95 {figures['p95']:.2f} ms")
    d = result["current_minus_baseline_ms"]
    print(f"current - baseline, per pair: median {d['median']:+.2f} ms, mean {d['mean']:+.2f} ms ({args.pairs} pairs)")
    stem = f"revision-ab-{datetime.now(UTC).date().isoformat()}" + (f"-{args.label}" if args.label else "")
    out = args.out or DEFAULT_OUT / f"{stem}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
