"""What the in-process harnesses share (`index_wake`, `frequent_words`): a database of their own on
a fresh embedded PostgreSQL or a given one, the app served in this process on it (its lifespan runs
the background passes), GraphQL calls, and a run's figures written to results/."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import statistics
import tempfile
from collections.abc import AsyncIterator, Callable, Coroutine
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import asyncpg
import httpx

from haki_context.app import create_app
from haki_context.core.serving.runtime import Runtime
from haki_context.core.serving.scope_indexes import ScopeGrowth
from haki_context.db import embedded, migrate
from haki_context.settings import EmbedProvider, Settings

from .latency_databases import create_database

RESULTS = Path(__file__).resolve().parent / "results"


@contextlib.asynccontextmanager
async def scratch_database(dsn: str, name: str) -> AsyncIterator[str]:
    """Database `name` on the server of `dsn`, made anew and migrated; dropped after the block."""
    bench = await create_database(dsn, name)
    await migrate.apply(bench)
    try:
        yield bench
    finally:
        admin = await asyncpg.connect(dsn)
        try:
            await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        finally:
            await admin.close()


@contextlib.asynccontextmanager
async def served(
    dsn: str, *, scope_growth: ScopeGrowth | None = None
) -> AsyncIterator[tuple[httpx.AsyncClient, Runtime]]:
    """The app on `dsn` (development mode, the hashing embedder), its lifespan running, and a client
    of it; `scope_growth` replaces the runtime's before any write."""
    app = create_app(Settings(database_url=dsn, dev_mode=True, embed_provider=EmbedProvider.HASHING))
    async with app.router.lifespan_context(app):
        rt: Runtime = app.state.runtime
        if scope_growth is not None:
            object.__setattr__(rt, "scope_growth", scope_growth)  # the index loop waits on the attribute
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://b", timeout=60) as http:
            yield http, rt


async def post(http: httpx.AsyncClient, query: str, variables: dict[str, Any]) -> dict[str, Any]:
    """A GraphQL call's data; RuntimeError on any error."""
    body = (await http.post("/graphql", json={"query": query, "variables": variables})).json()
    if body.get("errors"):
        raise RuntimeError(body["errors"])
    data: dict[str, Any] = body["data"]
    return data


def figures(ms: list[float]) -> dict[str, Any]:
    """Calls, p50 and p95 of `ms` (just the count when there are none)."""
    if not ms:
        return {"calls": 0}
    ordered = sorted(ms)
    return {
        "calls": len(ms),
        "p50_ms": round(statistics.median(ordered), 2),
        "p95_ms": round(ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))], 2),
    }


def run_and_write(
    args: argparse.Namespace,
    run: Callable[[str, argparse.Namespace], Coroutine[Any, Any, dict[str, Any]]],
    *,
    name: str,
    markdown: Callable[[dict[str, Any]], str],
) -> int:
    """Run `run` on `args.database_url`, else on a fresh embedded PostgreSQL, and write its result
    to `args.out` as <name>-<date>.json and .md."""
    with tempfile.TemporaryDirectory(prefix=f"haki-{name}-") as tmp:
        server = None if args.database_url else embedded.start(Path(tmp))
        try:
            dsn = args.database_url or server.uri  # type: ignore[union-attr]
            result = asyncio.run(run(dsn, args))
        finally:
            if server is not None:
                server.close()
    write_result(args.out, name, result, markdown)
    return 0


def write_result(out: Path, name: str, result: dict[str, Any], markdown: Callable[[dict[str, Any]], str]) -> None:
    """Write `result` to `out` as <name>-<date>.json and .md, and print the markdown."""
    out.mkdir(parents=True, exist_ok=True)
    stem = out / f"{name}-{datetime.now(UTC).date().isoformat()}"
    stem.with_suffix(".json").write_text(json.dumps(result, indent=2) + "\n")
    stem.with_suffix(".md").write_text(markdown(result))
    print(markdown(result))
    print(f"wrote {stem}.json and .md")
