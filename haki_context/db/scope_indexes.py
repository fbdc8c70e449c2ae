"""Per-scope HNSW indexes: which scopes need one, and building one (migration 0007).

A scope's index is a partial HNSW index over the rows of one (project, subject):
the planner uses it for that subject's vector search because the statement's
`project_id = $1 AND subject_id = $2` (constants in a custom plan) imply its
predicate. It is built with CREATE INDEX CONCURRENTLY, so writes go on during
the build, and recorded in `scope_vector_indexes`; retrieval switches to it
only once `ready_at` is set.

Index names are derived from a hash of the scope (ids are user text up to 128
characters; identifiers are at most 63 bytes). The DDL is composed by the
server's `format()` with %I / %L, never by string concatenation of user text.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import asyncpg

# (subjects column counting the table's rows, the rows the index holds beyond the scope)
TABLES: dict[str, tuple[str, str]] = {
    "facts": ("fact_rows", " AND status = 'ACTIVE'"),
    "episode_chunks": ("chunk_rows", ""),
}

# m = 16, ef_construction = 256. Measured for the top 64 facts of the benchmark's subject (170
# questions, ef_search 100, relaxed iterative scan, the over-fetch re-sorted; recall against an
# exact scan, ties by distance): at 10,000 rows, the scan 2.03 ms and recall 0.997 (min 0.92)
# against 2.41 ms and 0.996 (min 0.84) with m = 32, ef_construction = 128 (the earlier
# choice), 1.95 ms and 0.994 (min 0.69) with m = 16, 128; at 100,000 rows, 6.4 ms and 0.982
# against 8.0 ms and 0.941 (16, 128: 6.0 ms, 0.970). Fewer neighbours per node mean fewer
# tuples read per step, and within hnsw.max_scan_tuples the relaxed scan gets further; the
# longer construction makes up the graph's quality. Against pgvector's defaults (16, 64) at
# ef_search 40: recall 0.97 (min 0.56). An index keeps the parameters it was built with.
HNSW_M = 16
HNSW_EF_CONSTRUCTION = 256

# Any constant distinct from the application's other advisory locks.
BUILD_LOCK_KEY = 0x4A4B_5349


@dataclass(frozen=True)
class Scope:
    project_id: str
    subject_id: str
    table: str
    rows: int


def index_name(table: str, project_id: str, subject_id: str) -> str:
    """A stable identifier for a scope's index: `<table>_hnsw_<20 hex digits of sha256>`."""
    digest = hashlib.sha256(f"{project_id}\x00{subject_id}".encode()).hexdigest()[:20]
    return f"{table}_hnsw_{digest}"


async def pending(conn: asyncpg.Connection, min_rows: int, limit: int = 100) -> list[Scope]:
    """Scopes holding at least `min_rows` rows of a table without a READY index, largest first."""
    rows = await conn.fetch(
        """
        SELECT s.project_id, s.subject_id, t.table_name, t.n
        FROM subjects s
        CROSS JOIN LATERAL (VALUES ('facts', s.fact_rows), ('episode_chunks', s.chunk_rows)) t(table_name, n)
        WHERE t.n >= $1
          AND NOT EXISTS (SELECT 1 FROM scope_vector_indexes i
                          WHERE i.project_id = s.project_id AND i.subject_id = s.subject_id
                            AND i.table_name = t.table_name AND i.ready_at IS NOT NULL)
        ORDER BY t.n DESC, s.project_id, s.subject_id, t.table_name
        LIMIT $2
        """,
        min_rows,
        limit,
    )
    return [Scope(r["project_id"], r["subject_id"], r["table_name"], r["n"]) for r in rows]


async def try_lock(conn: asyncpg.Connection) -> bool:
    """Take the builders' session lock (one builder per database at a time); False if held."""
    return bool(await conn.fetchval("SELECT pg_try_advisory_lock($1)", BUILD_LOCK_KEY))


async def unlock(conn: asyncpg.Connection) -> None:
    await conn.execute("SELECT pg_advisory_unlock($1)", BUILD_LOCK_KEY)


async def configure_builder(conn: asyncpg.Connection, memory: str) -> None:
    """No statement timeout (a build outlives any request's) and `memory` (e.g. '512MB') to build
    in: a graph that fits builds several times faster (a 100,000-row scope needs ~200 MB)."""
    await conn.execute(
        "SELECT set_config('statement_timeout', '0', false), set_config('maintenance_work_mem', $1, false)", memory
    )


async def reset_builder(conn: asyncpg.Connection) -> None:
    """Give a pooled connection back with the pool's own settings."""
    await conn.execute("RESET statement_timeout; RESET maintenance_work_mem")


async def build(conn: asyncpg.Connection, scope: Scope) -> str:
    """Build (or finish) the scope's index on `conn`, outside any transaction; returns its name.

    Idempotent: an index left INVALID by an interrupted build is dropped and rebuilt; a
    valid one is only marked READY. The caller sets statement_timeout and
    maintenance_work_mem on `conn` (a build of 100,000 rows takes tens of seconds).
    """
    _, extra = TABLES[scope.table]
    name = index_name(scope.table, scope.project_id, scope.subject_id)
    await conn.execute(
        """
        INSERT INTO scope_vector_indexes (project_id, subject_id, table_name, index_name)
        VALUES ($1, $2, $3, $4)
        ON CONFLICT (project_id, subject_id, table_name)
        DO UPDATE SET index_name = excluded.index_name, requested_at = now(), ready_at = NULL
        """,
        scope.project_id,
        scope.subject_id,
        scope.table,
        name,
    )
    valid = await conn.fetchval(
        "SELECT i.indisvalid FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid"
        " WHERE c.relname = $1 AND c.relnamespace = current_schema()::regnamespace",
        name,
    )
    if valid is False:
        await conn.execute(await conn.fetchval("SELECT format('DROP INDEX CONCURRENTLY IF EXISTS %I', $1::text)", name))
    if not valid:
        await conn.execute(await _create_ddl(conn, name, scope, extra))
    await conn.execute(
        "UPDATE scope_vector_indexes SET ready_at = now()"
        " WHERE project_id = $1 AND subject_id = $2 AND table_name = $3",
        scope.project_id,
        scope.subject_id,
        scope.table,
    )
    return name


def _options() -> list[str]:
    """The reloptions of an index built with the current parameters, sorted."""
    return sorted([f"m={HNSW_M}", f"ef_construction={HNSW_EF_CONSTRUCTION}"])


async def outdated(conn: asyncpg.Connection, limit: int = 100) -> list[Scope]:
    """Scopes whose READY index was built with other parameters than HNSW_M and
    HNSW_EF_CONSTRUCTION (by an earlier version), largest first."""
    rows = await conn.fetch(
        """
        SELECT i.project_id, i.subject_id, i.table_name,
               CASE i.table_name WHEN 'facts' THEN s.fact_rows ELSE s.chunk_rows END AS n
        FROM scope_vector_indexes i
        JOIN subjects s ON s.project_id = i.project_id AND s.subject_id = i.subject_id
        JOIN pg_class c ON c.relname = i.index_name AND c.relnamespace = current_schema()::regnamespace
        WHERE i.ready_at IS NOT NULL
          AND coalesce((SELECT array_agg(o ORDER BY o) FROM unnest(c.reloptions) o), '{}') <> $1::text[]
        ORDER BY n DESC, i.project_id, i.subject_id, i.table_name
        LIMIT $2
        """,
        _options(),
        limit,
    )
    return [Scope(r["project_id"], r["subject_id"], r["table_name"], r["n"]) for r in rows]


async def rebuild(conn: asyncpg.Connection, scope: Scope) -> str:
    """Replace the scope's READY index by one built with the current parameters; returns its name.

    The new index is built beside the old one (CONCURRENTLY, as `build`), then the old one is
    dropped (CONCURRENTLY) and the new one takes its name, so the scope always has an index
    of its own to search. Idempotent: after an interruption, a valid replacement is
    finished, an invalid one dropped and built again."""
    _, extra = TABLES[scope.table]
    name = index_name(scope.table, scope.project_id, scope.subject_id)
    next_name = f"{name}_next"
    state = await conn.fetchrow(
        "SELECT (SELECT i.indisvalid FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid"
        "        WHERE c.relname = $1 AND c.relnamespace = current_schema()::regnamespace) AS old,"
        "       (SELECT i.indisvalid FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid"
        "        WHERE c.relname = $2 AND c.relnamespace = current_schema()::regnamespace) AS next",
        name,
        next_name,
    )
    if state["next"] is False:
        await conn.execute(await conn.fetchval("SELECT format('DROP INDEX CONCURRENTLY IF EXISTS %I', $1::text)", next_name))
    if not state["next"]:
        await conn.execute(await _create_ddl(conn, next_name, scope, extra))
    if state["old"] is not None:
        await conn.execute(await conn.fetchval("SELECT format('DROP INDEX CONCURRENTLY IF EXISTS %I', $1::text)", name))
    await conn.execute(await conn.fetchval("SELECT format('ALTER INDEX %I RENAME TO %I', $1::text, $2::text)", next_name, name))
    return name


async def _create_ddl(conn: asyncpg.Connection, name: str, scope: Scope, extra: str) -> str:
    """CREATE INDEX CONCURRENTLY of the scope's HNSW index under `name`, composed by the server."""
    return await conn.fetchval(
        "SELECT format('CREATE INDEX CONCURRENTLY IF NOT EXISTS %I ON %I USING hnsw (embedding vector_cosine_ops)"
        " WITH (m = %s, ef_construction = %s) WHERE project_id = %L AND subject_id = %L', $1::text, $2::text,"
        " $3::int, $4::int, $5::text, $6::text) || $7::text",
        name,
        scope.table,
        HNSW_M,
        HNSW_EF_CONSTRUCTION,
        scope.project_id,
        scope.subject_id,
        extra,
    )


async def ready(conn: asyncpg.Connection, project_id: str) -> list[tuple[str, str, str]]:
    """(subject_id, table, index name) of the project's READY scope indexes."""
    rows = await conn.fetch(
        "SELECT subject_id, table_name, index_name FROM scope_vector_indexes"
        " WHERE project_id = $1 AND ready_at IS NOT NULL ORDER BY subject_id, table_name",
        project_id,
    )
    return [(r["subject_id"], r["table_name"], r["index_name"]) for r in rows]
