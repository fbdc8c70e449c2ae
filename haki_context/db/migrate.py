"""Numbered `.sql` migrations, applied in order under an advisory lock, recorded in a table."""

from __future__ import annotations

import logging
from importlib import resources

import asyncpg

log = logging.getLogger(__name__)

# Any constant distinct from other advisory locks of the application.
_MIGRATION_LOCK_KEY = 0x4A4B_4D31


def available() -> list[tuple[str, str]]:
    """(name, sql) of every migration shipped in the package, in order."""
    folder = resources.files("haki_context.db") / "migrations"
    files = sorted((p for p in folder.iterdir() if p.name.endswith(".sql")), key=lambda p: p.name)
    return [(p.name, p.read_text(encoding="utf-8")) for p in files]


def summary(names: list[str]) -> str:
    """A list of migrations in a few words, whatever its length: the count and the first and
    last names, without their extension ("16 migrations (0001_core .. 0016_trace_same_text_counts)")."""
    stems = [name.removesuffix(".sql") for name in names]
    if len(stems) == 1:
        return f"1 migration ({stems[0]})"
    between = ", " if len(stems) == 2 else " .. "
    return f"{len(stems)} migrations ({stems[0]}{between}{stems[-1]})" if stems else "0 migrations"


async def apply(dsn: str) -> list[str]:
    """Apply every pending migration; return the names applied (empty when up to date)."""
    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute("SELECT pg_advisory_lock($1)", _MIGRATION_LOCK_KEY)
        try:
            await conn.execute(
                "CREATE TABLE IF NOT EXISTS schema_migrations ("
                " name text PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())"
            )
            done = {r["name"] for r in await conn.fetch("SELECT name FROM schema_migrations")}
            applied = []
            for name, sql in available():
                if name in done:
                    continue
                async with conn.transaction():
                    await conn.execute(sql)
                    await conn.execute("INSERT INTO schema_migrations (name) VALUES ($1)", name)
                log.debug("applied migration %s", name)  # serve logs the list before it starts
                applied.append(name)
            return applied
        finally:
            await conn.execute("SELECT pg_advisory_unlock($1)", _MIGRATION_LOCK_KEY)
    finally:
        await conn.close()


async def pending(conn: asyncpg.Connection) -> list[str]:
    """Names of shipped migrations not yet applied (for readiness checks)."""
    try:
        done = {r["name"] for r in await conn.fetch("SELECT name FROM schema_migrations")}
    except asyncpg.UndefinedTableError:
        done = set()
    return [name for name, _ in available() if name not in done]
