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

`--clients N` (N > 1) compares throughput instead: N clients at once send
`--pairs` calls to one server, then to the other, for `--bursts` bursts, the
order alternating; it prints each burst's calls/s and the median p50 / p99.
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
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from . import latency_texts
from .latency_common import DEFAULT_OUT, REPO_ROOT, SUBJECT, Config
from .latency_server import AGENT_QUERY, DEBUG_QUERY, Server, closed_loop, graphql
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


@contextlib.asynccontextmanager
async def two_servers(dsn: str, baseline_root: Path) -> AsyncIterator[dict[str, Server]]:
    """The baseline's server and this checkout's, both started on `dsn`, stopped on exit."""
    cfg = Config(ns=[], overrides={"scope_index_interval_s": "0"})
    with tempfile.TemporaryDirectory(prefix="haki-ab-logs-") as logs:
        servers = {
            "baseline": Server(dsn, cfg, Path(logs), root=baseline_root),
            "current": Server(dsn, cfg, Path(logs)),
        }
        try:
            for server in servers.values():
                await server.start()
            yield servers
        finally:
            for server in servers.values():
                await server.stop()


async def compare(dsn: str, baseline_root: Path, pairs: int, selection: str, budget: int) -> dict[str, Any]:
    """Interleaved calls to both servers; per side p50 / p95 ms, and the per-pair difference."""
    query = AGENT_QUERY if selection == "agent" else DEBUG_QUERY
    questions = list(itertools.islice(latency_texts.questions(seed=4242), WARMUP + pairs))
    async with two_servers(dsn, baseline_root) as servers:
        clients = {name: LeanClient(server.url) for name, server in servers.items()}
        try:
            times: dict[str, list[float]] = {name: [] for name in servers}
            for i, q in enumerate(questions):
                for name in ("baseline", "current") if i % 2 else ("current", "baseline"):
                    ms, _ = await graphql(clients[name], query, {"s": SUBJECT, "q": q, "b": budget})
                    if i >= WARMUP:
                        times[name].append(ms)
        finally:
            for client in clients.values():
                await client.aclose()
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


async def compare_throughput(
    dsn: str, baseline_root: Path, *, calls: int, bursts: int, clients: int, selection: str, budget: int
) -> dict[str, Any]:
    """Alternating bursts of `calls` calls from `clients` clients; per side calls/s and p50 / p99 ms."""
    query = AGENT_QUERY if selection == "agent" else DEBUG_QUERY
    questions = latency_texts.questions(seed=4343)
    rates: dict[str, list[float]] = {"baseline": [], "current": []}
    p50: dict[str, list[float]] = {"baseline": [], "current": []}
    p99: dict[str, list[float]] = {"baseline": [], "current": []}
    async with two_servers(dsn, baseline_root) as servers:
        for b in range(bursts):
            for name in ("current", "baseline") if b % 2 else ("baseline", "current"):
                asked = list(itertools.islice(questions, calls))
                warm_up = [f"warm up {i}" for i in range(clients)]
                wall, answered = await closed_loop(
                    servers[name].url, query, asked, warm_up, clients=clients, budget=budget
                )
                times = [ms for ms, _ in answered]
                rates[name].append(len(answered) / wall)
                p50[name].append(float(np.percentile(times, 50)))
                p99[name].append(float(np.percentile(times, 99)))
    return {
        "clients": clients,
        "calls_per_burst": calls,
        "selection": selection,
        "budget": budget,
        **{
            f"{name}_calls_per_s": {
                "bursts": [round(r, 1) for r in rates[name]],
                "median": float(np.median(rates[name])),
                "p50_ms": float(np.median(p50[name])),
                "p99_ms": float(np.median(p99[name])),
            }
            for name in rates
        },
    }


def _print(result: dict[str, Any]) -> None:
    if "clients" in result:
        for name in ("baseline", "current"):
            f = result[f"{name}_calls_per_s"]
            print(
                f"{name:>8}: {f['median']:.1f} calls/s (bursts {f['bursts']}), p50 {f['p50_ms']:.1f} ms, "
                f"p99 {f['p99_ms']:.1f} ms, {result['clients']} clients"
            )
        return
    for name in ("baseline", "current"):
        figures = result[f"{name}_ms"]
        print(f"{name:>8}: p50 {figures['p50']:.2f} ms, p95 {figures['p95']:.2f} ms")
    d = result["current_minus_baseline_ms"]
    print(
        f"current - baseline, per pair: median {d['median']:+.2f} ms, mean {d['mean']:+.2f} ms ({result['pairs']} pairs)"
    )


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
    p.add_argument("--clients", type=int, default=1, help="above 1: compare calls/s with this many clients at once")
    p.add_argument("--bursts", type=int, default=4, help="with --clients: bursts of --pairs calls on each side")
    p.add_argument("--label", default="", help="suffix of the result file's name (default: none)")
    p.add_argument("--out", type=Path, help="write the figures to this JSON file instead of benchmarks/results/")
    args = p.parse_args(argv)
    with worktree(args.baseline) as root:
        if args.clients > 1:
            result = asyncio.run(
                compare_throughput(
                    args.database_url,
                    root,
                    calls=args.pairs,
                    bursts=args.bursts,
                    clients=args.clients,
                    selection=args.selection,
                    budget=args.budget,
                )
            )
        else:
            result = asyncio.run(compare(args.database_url, root, args.pairs, args.selection, args.budget))
    result["baseline"] = args.baseline
    result["database"] = args.database_url.rsplit("/", 1)[-1].split("?", 1)[0]
    _print(result)
    stem = f"revision-ab-{datetime.now(UTC).date().isoformat()}" + (f"-{args.label}" if args.label else "")
    out = args.out or DEFAULT_OUT / f"{stem}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
