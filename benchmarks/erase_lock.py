"""What the subject's erase lock costs the write path: recordEvent and assertFact latency with
the lock (as served) and without it (the lock statements made no-ops), alternating call by call
so both see the same machine load.

    .venv/bin/python benchmarks/erase_lock.py [--calls 2000]

Runs its own embedded PostgreSQL in a temporary directory, with the hashing embedder so the
figures are the database path's (the real embedder adds the same few ms to both).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from unittest import mock

import asyncpg

from haki_context.core.embedding.embedder import Embedder, HashingEncoder
from haki_context.core.memory import events, facts
from haki_context.core.models import AssertMode
from haki_context.core.serving.runtime import Runtime, open_pool
from haki_context.db import embedded, migrate, subject_locks
from haki_context.db import facts as db_facts
from haki_context.settings import EmbedProvider, Settings


async def _share_nothing(conn: asyncpg.Connection, project_id: str, subject_ids: object) -> None:
    return None


async def _old_lock_subject(conn: asyncpg.Connection, project_id: str, subject_id: str) -> None:
    await conn.execute("SELECT pg_advisory_xact_lock(hashtextextended($1 || chr(31) || $2, 0))", project_id, subject_id)


@contextmanager
def without_erase_lock() -> Iterator[None]:
    with (
        mock.patch.object(subject_locks, "share", _share_nothing),
        mock.patch.object(db_facts, "lock_subject", _old_lock_subject),
    ):
        yield


async def timed(call: Callable[[], Awaitable[object]]) -> float:
    started = time.perf_counter()
    await call()
    return (time.perf_counter() - started) * 1000


def summary(ms: list[float]) -> str:
    ms = sorted(ms)
    return f"median {statistics.median(ms):.3f} ms, p95 {ms[int(len(ms) * 0.95)]:.3f} ms (n={len(ms)})"


async def main(calls: int) -> None:
    data_dir = Path(tempfile.mkdtemp(prefix="haki-bench-lock-"))
    server = embedded.start(data_dir)
    try:
        await migrate.apply(server.uri)
        settings = Settings(database_url=server.uri, embed_provider=EmbedProvider.HASHING, dev_mode=True)
        pool = await open_pool(server.uri, settings, min_size=2, max_size=2)
        embedder = Embedder(HashingEncoder())
        rt = Runtime(pool=pool, embedder=embedder, settings=settings)
        project = "bench"
        results: dict[tuple[str, str], list[float]] = {}
        n = 0

        async def record() -> object:
            return await events.record_events(
                rt, project, [events.EventInput(subject_id="ann", kind="note", payload={"text": f"note {n}"})]
            )

        async def assert_() -> object:
            item = facts.FactInput(
                subject_id="ann", predicate=f"p{n % 50}", value=str(uuid.uuid4()), mode=AssertMode.ADD
            )
            return await facts.assert_fact(rt, project, item)

        for _ in range(20):  # warm the plans and the pool
            await record()
            await assert_()
        # Call by call, the two modes alternate (which goes first alternating too): the commit's
        # flush to disk varies by the millisecond with the machine's other work, and both modes
        # must see the same.
        for k in range(calls):
            modes = ("with lock", "without lock") if k % 2 == 0 else ("without lock", "with lock")
            for mode in modes:
                for name, call in (("recordEvent", record), ("assertFact", assert_)):
                    n += 1
                    if mode == "with lock":
                        ms = await timed(call)
                    else:
                        with without_erase_lock():
                            ms = await timed(call)
                    results.setdefault((name, mode), []).append(ms)
        for (name, mode), ms in sorted(results.items()):
            print(f"{name:12} {mode:13} {summary(ms)}")
        await pool.close()
        embedder.close()
    finally:
        server.close()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=2000)
    args = parser.parse_args()
    asyncio.run(main(args.calls))
