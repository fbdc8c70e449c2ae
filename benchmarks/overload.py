"""Overload: `context` under more concurrent clients than the machine can serve, admission on and off.

    python -m benchmarks.overload                       # sweep, then 4x the saturating count, ~30 s each
    python -m benchmarks.overload --clients 32 --seconds 20 --on max_concurrent_context=2

1. A fresh embedded PostgreSQL (loopback only) with one subject of N facts and N events (1,000 by
   default) among 10 such subjects, seeded as the latency harness does, with the real default
   embedder (`onnx`), so every call costs the CPU it costs in production.
2. Saturation: a server with admission off answers closed-loop clients (each sends its next call
   when the last is answered) of 1, 2, 4, 8 ... for a few seconds each; the saturating count is
   the smallest past which throughput grows by less than `--growth` (5 %).
3. Overload: `--factor` (4) times that many clients for `--seconds` (30) against a server with
   admission on (the settings' defaults, or `--on NAME=VALUE` overrides) and one with admission
   off (slots and line too large to matter). A refused call (503, UNAVAILABLE) makes its client
   wait `--shed-pause` (the Retry-After the server sends) before its next call, as a client that
   honours Retry-After does. Reported per run: answered calls per second, p50 / p99 of the
   answered calls, the share shed, other failures; and that every answered call's trace exists
   afterwards (nothing acknowledged is lost).

Every call asks a question no other call asked (the query-vector cache never hits). The clients
run on the same machine as the server and take a share of its cores, as the latency harness's do.
Output: `results/overload-<date>.json` and `.md`.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from haki_context.app import open_runtime
from haki_context.core.serving.runtime import Runtime
from haki_context.db import embedded
from haki_context.settings import EmbedProvider, Settings

from .latency_common import DEFAULT_OUT, PROJECT, SUBJECT, Config, Questions, dist, log
from .latency_databases import create_database, prepare
from .latency_server import AGENT_QUERY, Server
from .lean_http import LeanClient

# Admission off: more slots and places in line than any client count here.
OFF = {"max_concurrent_context": "100000", "admission_queue": "100000", "admission_wait_s": "3600"}


@dataclass
class Run:
    """What one load of `clients` closed-loop clients saw."""

    label: str
    clients: int
    seconds: float
    answered_ms: list[float] = field(default_factory=list)
    trace_ids: list[str] = field(default_factory=list)
    shed: int = 0
    shed_ms: list[float] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    wall_s: float = 0.0

    def summary(self) -> dict[str, Any]:
        total = len(self.answered_ms) + self.shed + len(self.failed)
        return {
            "label": self.label,
            "clients": self.clients,
            "wall_s": round(self.wall_s, 2),
            "calls": total,
            "answered": len(self.answered_ms),
            "throughput_per_s": round(len(self.answered_ms) / self.wall_s, 2) if self.wall_s else 0.0,
            "answered_ms": dist(self.answered_ms),
            "shed": self.shed,
            "shed_share": round(self.shed / total, 4) if total else 0.0,
            "shed_ms": dist(self.shed_ms),
            "failed": len(self.failed),
            "failures": self.failed[:5],
        }


async def load(server: Server, run: Run, qs: Questions, budget: int, shed_pause: float) -> Run:
    """`run.clients` clients, each calling again as soon as answered, for `run.seconds`."""
    clients = [LeanClient(server.url, timeout=120.0) for _ in range(run.clients)]

    async def call(client: LeanClient) -> tuple[int, float, dict[str, Any]]:
        request = {"query": AGENT_QUERY, "variables": {"s": SUBJECT, "q": qs.take(1)[0], "b": budget}}
        t = time.perf_counter()
        status, raw = await client.post_json("/graphql", request)
        return status, (time.perf_counter() - t) * 1000.0, json.loads(raw)

    async def worker(client: LeanClient, deadline: float) -> None:
        while time.perf_counter() < deadline:
            try:
                status, ms, body = await call(client)
            except Exception as exc:  # a timeout or a lost connection: counted, not fatal
                run.failed.append(f"{type(exc).__name__}: {exc}"[:200])
                continue
            errors = body.get("errors") or []
            if status == 200 and not errors:
                run.answered_ms.append(ms)
                run.trace_ids.append(body["data"]["context"]["traceId"])
            elif status == 503 and errors and errors[0].get("extensions", {}).get("code") == "UNAVAILABLE":
                run.shed += 1
                run.shed_ms.append(ms)
                await asyncio.sleep(shed_pause)
            else:
                run.failed.append(f"{status}: {str(errors)[:200]}")

    try:
        # One call per client first opens its connection and warms the server's paths.
        await asyncio.gather(*(call(c) for c in clients), return_exceptions=True)
        t = time.perf_counter()
        await asyncio.gather(*(worker(c, t + run.seconds) for c in clients))
        run.wall_s = time.perf_counter() - t
    finally:
        for c in clients:
            await c.aclose()
    return run


async def missing_traces(rt: Runtime, ids: list[str]) -> int:
    """Answered calls whose trace is not in the database."""
    async with rt.pool.acquire() as conn:
        found = await conn.fetchval(
            "SELECT count(*) FROM context_traces WHERE project_id = $1 AND id = ANY($2::uuid[])", PROJECT, ids
        )
    return len(set(ids)) - int(found)


async def serving(
    dsn: str,
    cfg: Config,
    workdir: Path,
    *,
    overrides: dict[str, str],
    rt: Runtime,
    body: Callable[[Server], Awaitable[list[Run]]],
) -> list[dict[str, Any]]:
    """Start a server with `overrides`, run `body(server)` (a list of Runs), check their traces."""
    server = Server(dsn, Config(ns=cfg.ns, embedder=cfg.embedder, overrides=overrides), workdir)
    await server.start()
    try:
        runs: list[Run] = await body(server)
    except BaseException:
        print(server.log_tail(), file=sys.stderr)
        raise
    finally:
        await server.stop()
    out = []
    for run in runs:
        summary = run.summary()
        summary["answered_without_trace"] = await missing_traces(rt, run.trace_ids)
        summary["settings"] = overrides
        out.append(summary)
        log(
            f"  {run.label}: {run.clients} clients, {summary['throughput_per_s']} answered/s,"
            f" p50 {summary['answered_ms']['p50']} ms, p99 {summary['answered_ms']['p99']} ms,"
            f" shed {summary['shed_share']:.1%}, failed {summary['failed']},"
            f" without trace {summary['answered_without_trace']}"
        )
    return out


def saturating(sweep: list[dict[str, Any]], growth: float) -> int:
    """The smallest client count past which throughput grows by less than `growth`."""
    for here, there in itertools.pairwise(sweep):
        if there["throughput_per_s"] < here["throughput_per_s"] * (1 + growth):
            return int(here["clients"])
    return int(sweep[-1]["clients"])


async def run(a: argparse.Namespace) -> dict[str, Any]:
    cfg = Config(ns=[a.n], embedder="onnx")
    on = dict(kv.split("=", 1) for kv in a.on)
    workdir = Path(tempfile.mkdtemp(prefix="haki-overload-"))
    qs = Questions()
    result: dict[str, Any] = {
        "benchmark": "overload",
        "started_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "command": " ".join(["python", "-m", "benchmarks.overload", *sys.argv[1:]]),
        "cpus": os.cpu_count(),
        "n": a.n,
        "defaults": {
            k: getattr(Settings(), k) for k in ("max_concurrent_context", "admission_queue", "admission_wait_s")
        },
    }
    pg = None
    try:
        log(f"starting an embedded PostgreSQL in {workdir}")
        pg = await asyncio.to_thread(embedded.start, workdir / "data")
        dsn = await create_database(pg.uri, f"haki_overload_{a.n}")
        settings = Settings(database_url=dsn, embed_provider=EmbedProvider.ONNX, dev_mode=True)
        rt, stack = await open_runtime(settings)
        async with stack:
            result["seed"] = await prepare(rt, cfg, a.n, dsn, reused=False)
            await rt.pool.expire_connections()

            if a.clients:
                base = a.clients
            else:
                log(f"saturation sweep, admission off, {a.sweep_seconds} s each")

                async def sweep(server: Server) -> list[Run]:
                    runs = []
                    for k in a.sweep:
                        runs.append(await load(server, Run("sweep", k, a.sweep_seconds), qs, a.budget, a.shed_pause))
                    return runs

                result["sweep"] = await serving(dsn, cfg, workdir, overrides=OFF, rt=rt, body=sweep)
                base = saturating(result["sweep"], a.growth) * a.factor
            result["overload_clients"] = base
            result["overload"] = []
            for label, overrides in (("admission on", on), ("admission off", OFF)):
                log(f"overload, {label}: {base} clients for {a.seconds} s")

                async def overload(server: Server, label: str = label) -> list[Run]:
                    return [await load(server, Run(label, base, a.seconds), qs, a.budget, a.shed_pause)]

                result["overload"] += await serving(dsn, cfg, workdir, overrides=overrides, rt=rt, body=overload)
    finally:
        if pg is not None:
            await asyncio.to_thread(pg.close)
        shutil.rmtree(workdir, ignore_errors=True)
    result["questions_used"] = qs.used
    return result


def markdown(result: dict[str, Any]) -> str:
    lines = [
        f"# Overload, {result['started_at']}",
        "",
        f"`{result['command']}`: {result['n']} facts + {result['n']} events, onnx embedder,"
        f" {result['cpus']} CPUs; defaults {result['defaults']}.",
        "",
        "| run | clients | answered/s | p50 / p99 answered ms | shed | failed | answered without trace |",
        "|---|---|---|---|---|---|---|",
    ]
    for row in [*result.get("sweep", []), *result["overload"]]:
        lines.append(
            f"| {row['label']} | {row['clients']} | {row['throughput_per_s']} |"
            f" {row['answered_ms']['p50']} / {row['answered_ms']['p99']} | {row['shed_share']:.1%} |"
            f" {row['failed']} | {row['answered_without_trace']} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.overload", description=__doc__.split("\n")[0])
    p.add_argument("--n", type=int, default=1000, help="facts and events of the measured subject")
    p.add_argument("--sweep", type=lambda s: [int(x) for x in s.split(",")], default=[1, 2, 4, 8, 16])
    p.add_argument("--sweep-seconds", type=float, default=8.0)
    p.add_argument("--growth", type=float, default=0.05, help="throughput growth below which clients saturate")
    p.add_argument("--factor", type=int, default=4, help="overload clients = factor x the saturating count")
    p.add_argument("--clients", type=int, default=0, help="overload clients (skips the sweep)")
    p.add_argument("--seconds", type=float, default=30.0, help="each overload run")
    p.add_argument("--shed-pause", type=float, default=1.0, help="a refused client's wait (the Retry-After)")
    p.add_argument("--budget", type=int, default=900)
    p.add_argument("--on", action="append", default=[], metavar="NAME=VALUE", help="admission-on overrides")
    p.add_argument("--label", default="")
    a = p.parse_args(argv)
    result = asyncio.run(run(a))
    DEFAULT_OUT.mkdir(parents=True, exist_ok=True)
    stem = DEFAULT_OUT / f"overload-{datetime.now().strftime('%Y-%m-%d')}{'-' + a.label if a.label else ''}"
    stem.with_suffix(".json").write_text(json.dumps(result, indent=2))
    stem.with_suffix(".md").write_text(markdown(result))
    print(markdown(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
