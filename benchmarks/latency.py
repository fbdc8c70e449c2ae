"""Latency benchmark: `python -m benchmarks.latency`.

For each N (default 1,000 and 10,000; `--n 100000` opt-in), in one run:

1. a fresh database (in a fresh embedded PostgreSQL in a temp dir, or one
   database per N on the server of `--database-url`), migrated; one subject
   holding N facts and N events, plus 9 other subjects holding copies of its
   rows with perturbed vectors (so the subject is 10% of the tables), loaded
   with COPY (benchmarks/latency_databases.py, latency_seed.py). The subject's
   texts are embedded once with the real embedder (the shipped ONNX int8 one
   unless `--embedder` says otherwise) and cached in benchmarks/cache/;
2. (a) `assemble(rt, project, subject, query, 900)` in-process, timed, with the
   breakdown of its trace timings (embed / retrieve / pack / persist / total),
   then a few calls each after `--idle` s of idleness (an agent calling now
   and then) (benchmarks/latency_phases.py);
3. (d) our fact-candidate SQL (`retrieval.fact_candidates`, with the
   SearchParams the assembler builds) beside the naive baseline (the full
   hybrid score over every active fact of the subject in one statement, ORDER
   BY score LIMIT 64), same query vector, pair by pair (latency_baseline.py);
   and phase-1 recall of the vector branch against an exact scan (fact k = 64,
   episode k = 32; latency_recall.py);
4. a real server (`python -m haki_context.cli serve` on 127.0.0.1, the same
   database, dev mode) with its RSS sampled: (b) one client (a lean
   keep-alive HTTP/1.1 client, benchmarks/lean_http.py: httpx's own ~1.5 ms
   per call is not the server's), an agent's selection, the same through
   httpx, then a debugging selection (every trace decision with every score
   component and `fact { predicate }`); (c) the agent selection from 8
   concurrent clients, with throughput; the overhead outside the trace is
   client time minus the trace's totalMs (read back from context_traces):
   GraphQL, HTTP, and the trace write's commit and round trip (persistMs is
   the write statement as the database timed it) (latency_server.py);
5. ingestion: events/s through `recordEvents` over GraphQL in batches of 200
   (into a subject of its own), beside the raw embedder's throughput on the
   same texts measured right before and right after in this process.

Every query text is distinct across the whole run (the query cache cannot
flatter a figure); the cache hit rates are reported. Writes
benchmarks/results/latency-<date>.json, .md and .png (latency-<date>-<label>
with `--label`; the plot needs matplotlib, the `[bench]` extra, and is skipped
without it) and prints the table (latency_report.py).

Typical runtime on 2 cores: N = 1,000 and 10,000 from a fresh embedded
PostgreSQL, ~10 minutes the first time (embedding 20,000 texts), ~5 with the
embedding cache; N = 100,000 needs `--database-url` and about an hour to seed.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import logging
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any

import psutil

from haki_context.app import open_runtime
from haki_context.db import embedded
from haki_context.settings import Settings

from .latency_baseline import measure_sql
from .latency_common import DEFAULT_CACHE, DEFAULT_OUT, REPO_ROOT, Config, Questions, log
from .latency_databases import create_database, database_dsn, drop_database, postgres_info, prepare, seeded
from .latency_phases import measure_concurrent, measure_http, measure_in_process, measure_ingestion
from .latency_recall import measure_recall
from .latency_report import missing_figures, write
from .latency_server import Server


def parse_args(argv: list[str] | None = None) -> Config:
    p = argparse.ArgumentParser(
        prog="python -m benchmarks.latency", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--n", default=None, help="comma-separated subject sizes (default 1000,10000; 100000 opt-in)")
    p.add_argument("--smoke", action="store_true", help="N = 200, a few queries of each kind")
    p.add_argument(
        "--embedder",
        choices=["onnx", "onnx-fp32", "minilm", "hashing"],
        default=Settings().embed_provider.value,
        help="default: the server's (onnx); hashing: a fast stand-in for smoke runs (it knows no meaning)",
    )
    p.add_argument(
        "--database-url",
        default=None,
        help="a PostgreSQL server to use instead of a fresh embedded one (one database per N is "
        "created on it, dropped afterwards unless --keep)",
    )
    p.add_argument("--queries", type=int, default=None, help="in-process calls per N (default 200)")
    p.add_argument("--http-queries", type=int, default=None, help="HTTP agent-selection calls per N (200)")
    p.add_argument("--debug-queries", type=int, default=None, help="HTTP debugging-selection calls per N (100)")
    p.add_argument("--concurrency", type=int, default=8)
    p.add_argument("--concurrent-calls", type=int, default=None, help="calls over all concurrent clients (320)")
    p.add_argument("--sql-pairs", type=int, default=None, help="our SQL / naive SQL pairs and recall queries (100)")
    p.add_argument("--warmup", type=int, default=None, help="warm-up calls before each timed phase (10)")
    p.add_argument("--ingest", type=int, default=None, help="events recorded through recordEvents per N (1000)")
    p.add_argument("--ingest-batch", type=int, default=200)
    p.add_argument("--idle-calls", type=int, default=None, help="in-process calls each after --idle s idle (10)")
    p.add_argument("--idle", type=float, default=None, help="seconds idle before each of those calls (2; smoke 0.2)")
    p.add_argument("--budget", type=int, default=900)
    p.add_argument("--sigma", type=float, default=0.01, help="gaussian noise per dimension of the copies' vectors")
    p.add_argument("--maintenance-work-mem", default="1GB", help="for the HNSW rebuild after the load")
    p.add_argument("--cache-dir", type=Path, default=DEFAULT_CACHE)
    p.add_argument("--out", type=Path, default=DEFAULT_OUT)
    p.add_argument("--label", default="", help="suffix of the result files' names (default: none; smoke runs: smoke)")
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a haki_context Settings field, for the in-process runtime and the server alike",
    )
    p.add_argument("--keep", action="store_true", help="with --database-url: keep the benchmark databases")
    p.add_argument(
        "--reuse",
        action="store_true",
        help="with --database-url: measure on a kept database of the same N instead of seeding anew",
    )
    a = p.parse_args(argv)
    smoke = a.smoke
    defaults = (
        dict(
            queries=6,
            http_queries=6,
            debug_queries=4,
            concurrent_calls=16,
            sql_pairs=6,
            warmup=2,
            ingest=100,
            idle_calls=2,
            idle=0.2,
        )
        if smoke
        else dict(
            queries=200,
            http_queries=200,
            debug_queries=100,
            concurrent_calls=320,
            sql_pairs=100,
            warmup=10,
            ingest=1000,
            idle_calls=10,
            idle=2.0,
        )
    )

    def pick(name: str) -> Any:
        value = getattr(a, name)
        return defaults[name] if value is None else value

    ns = [int(x.replace("_", "")) for x in a.n.split(",")] if a.n else ([200] if smoke else [1000, 10000])
    overrides = {}
    for item in a.set:
        name, _, value = item.partition("=")
        if name not in Settings.model_fields or not _:
            p.error(f"--set {item!r}: expected NAME=VALUE with NAME a Settings field")
        overrides[name] = value
    return Config(
        ns=ns,
        embedder=a.embedder,
        database_url=a.database_url,
        queries=pick("queries"),
        http_queries=pick("http_queries"),
        debug_queries=pick("debug_queries"),
        concurrency=a.concurrency,
        concurrent_calls=pick("concurrent_calls"),
        sql_pairs=pick("sql_pairs"),
        warmup=pick("warmup"),
        ingest=pick("ingest"),
        idle_calls=pick("idle_calls"),
        idle_s=pick("idle"),
        ingest_batch=a.ingest_batch if not (smoke and a.ingest_batch == 200) else 50,
        budget=a.budget,
        sigma=a.sigma,
        maintenance_work_mem=a.maintenance_work_mem,
        cache_dir=a.cache_dir,
        out=a.out,
        label=a.label,
        overrides=overrides,
        smoke=smoke,
        keep=a.keep,
        reuse=a.reuse,
        argv=list(sys.argv if argv is None else argv),
    )


async def run_n(cfg: Config, n: int, dsn: str, qs: Questions, workdir: Path, *, reused: bool = False) -> dict[str, Any]:
    settings = Settings(database_url=dsn, embed_provider=cfg.embedder, dev_mode=True, **cfg.overrides)
    result: dict[str, Any] = {"n": n}
    rt, stack = await open_runtime(settings)  # migrates the fresh database, loads the embedder
    async with stack:
        result["embedder"] = rt.embedder.name
        result["seed"] = await prepare(rt, cfg, n, dsn, reused=reused)
        await rt.pool.expire_connections()  # fresh connections see the rebuilt indexes and statistics

        phase_load = result["loadavg_1min_by_phase"] = {}
        phase_load["in_process"] = os.getloadavg()[0]
        log(f"N={n}: (a) in-process assemble x {cfg.queries}")
        result["in_process"] = await measure_in_process(rt, cfg, qs)
        phase_load["sql"] = os.getloadavg()[0]
        log(f"N={n}: (d) our SQL vs naive SQL x {cfg.sql_pairs}, phase-1 recall")
        questions = qs.take(cfg.warmup + cfg.sql_pairs)
        result["sql"] = await measure_sql(rt, cfg, questions)
        result["recall"] = await measure_recall(rt, questions[cfg.warmup :])

        log(f"N={n}: starting the server")
        server = Server(dsn, cfg, workdir)
        try:
            await server.start()
            log(f"N={n}: server ready in {server.startup_s:.1f} s; (b) HTTP, one client")
            phase_load["http"] = os.getloadavg()[0]
            result["http"] = await measure_http(rt, server, cfg, qs)
            phase_load["concurrent"] = os.getloadavg()[0]
            log(f"N={n}: (c) {cfg.concurrency} concurrent clients x {cfg.concurrent_calls} calls")
            result["concurrent"] = await measure_concurrent(rt, server, cfg, qs)
            phase_load["ingestion"] = os.getloadavg()[0]
            log(f"N={n}: ingestion of {cfg.ingest} events in batches of {cfg.ingest_batch}")
            result["ingestion"] = await measure_ingestion(rt, server, cfg, n)
        except BaseException:
            print(server.log_tail(), file=sys.stderr)
            raise
        finally:
            result["server"] = await server.stop()
        async with rt.pool.acquire() as conn:
            result["database_mb"] = round(await conn.fetchval("SELECT pg_database_size(current_database())") / 2**20, 1)
    return result


def machine() -> dict[str, Any]:
    model = ""
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    info: dict[str, Any] = {
        "cpus": os.cpu_count(),
        "cpu_model": model,
        "platform": platform.platform(),
        "python": platform.python_version(),
        "memory_gb": round(psutil.virtual_memory().total / 2**30, 1),
    }
    with contextlib.suppress(metadata.PackageNotFoundError):
        info["torch"] = metadata.version("torch")  # only with the [torch] extra
    with contextlib.suppress(Exception):
        info["git_commit"] = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=REPO_ROOT, capture_output=True, text=True, timeout=10
        ).stdout.strip()
    return info


async def run(cfg: Config) -> dict[str, Any]:
    started = time.perf_counter()
    result: dict[str, Any] = {
        "benchmark": "latency",
        "started_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "command": " ".join(["python", "-m", "benchmarks.latency", *cfg.argv[1:]]) if cfg.argv else "",
        "loadavg_start": list(os.getloadavg()),
        "machine": machine(),
        "config": {
            k: (str(v) if isinstance(v, Path) else v) for k, v in dataclasses.asdict(cfg).items() if k != "argv"
        },
        "runs": [],
    }
    workdir = Path(tempfile.mkdtemp(prefix="haki-latency-"))
    pg = None
    qs = Questions()
    try:
        if cfg.database_url:
            base = cfg.database_url
        else:
            log(f"starting an embedded PostgreSQL in {workdir}")
            pg = await asyncio.to_thread(embedded.start, workdir / "data")
            base = pg.uri
        for n in cfg.ns:
            name = f"haki_bench_{n}"
            reused = cfg.reuse and cfg.database_url is not None and await seeded(base, name, n)
            dsn = database_dsn(base, name) if reused else await create_database(base, name)
            result["runs"].append(await run_n(cfg, n, dsn, qs, workdir, reused=reused))
            if "postgres" not in result:
                result["postgres"] = await postgres_info(dsn)
            if cfg.database_url and not cfg.keep:
                await drop_database(base, name)
    finally:
        if pg is not None:
            await asyncio.to_thread(pg.close)
        shutil.rmtree(workdir, ignore_errors=True)
    s = Settings(**cfg.overrides)
    result["settings"] = {
        k: getattr(s, k)
        for k in (
            "scope_index_rows",
            "hnsw_ef_search",
            "hnsw_max_scan_tuples",
            "hnsw_fetch_rows",
            "ivf_index_rows",
            "ivf_probes",
            "retrieval_top_k",
            "episode_top_k",
            "embed_threads",
            "embed_query_threads",
            "embed_batch_size",
            "pool_max_size",
        )
    }
    result["distinct_questions_used"] = qs.used
    result["loadavg_end"] = list(os.getloadavg())
    result["wall_s"] = round(time.perf_counter() - started, 1)
    return result


def stem(cfg: Config) -> str:
    """The result files' name: harness and date, and the label (smoke runs: "smoke") as a suffix."""
    label = cfg.label or ("smoke" if cfg.smoke else "")
    return f"latency-{datetime.now(UTC).date().isoformat()}" + (f"-{label}" if label else "")


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    cfg = parse_args(argv)
    result = asyncio.run(run(cfg))
    paths = write(result, cfg.out, stem(cfg))
    print(paths["md"].read_text())
    missing = missing_figures(result)
    if missing:
        print(f"missing figures: {', '.join(missing)}", file=sys.stderr)
    for path in paths.values():
        print(f"wrote {path}")
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main())
