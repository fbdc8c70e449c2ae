"""Per-scope vector indexes: which scopes need them, and building them (migration 0007).

A scope's index is a partial HNSW index over the rows of one (project, subject):
the planner uses it for that subject's vector search because the statement's
`project_id = $1 AND subject_id = $2` (constants in a custom plan) imply its
predicate. Beside it, a partial IVFFlat index over the same rows' half-precision
copies, whose nearest lists catch what the HNSW graph can miss (a tight cluster
of near-identical rows, see db/retrieval.py). Both are built with CREATE INDEX
CONCURRENTLY, so writes go on during the build, and recorded as one entry in
`scope_vector_indexes` (the HNSW index's name; the IVFFlat one's follows from
it); retrieval switches to them only once `ready_at` is set.

Index names are derived from a hash of the scope (ids are user text up to 128
characters; identifiers are at most 63 bytes). The DDL is composed by the
server's `format()` with %I / %L, never by string concatenation of user text.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass
from enum import StrEnum

import asyncpg

from . import subject_locks

# (subjects column counting the table's rows, the rows the index holds beyond the scope)
TABLES: dict[str, tuple[str, str]] = {
    "facts": ("fact_rows", " AND status = 'ACTIVE'"),
    "episode_chunks": ("chunk_rows", ""),
}

# Fewer neighbours per node (m) mean fewer tuples read per step, so within
# hnsw.max_scan_tuples the relaxed scan gets further; a longer construction makes up the
# graph's quality. An index keeps the parameters it was built with (figures in
# docs/performance.md, "Scope HNSW parameters").
HNSW_M = 16
HNSW_EF_CONSTRUCTION = 256


def ivf_lists(rows: int) -> int:
    """The IVFFlat lists of a scope of `rows` rows: sqrt(rows), so a search of a fixed number
    of lists (HAKI_IVF_PROBES) reads ~sqrt(rows) rows each. Lists are k-means centroids of the rows at build time; past 4x the
    rows (lists under half this figure) the index is rebuilt (`stale_kinds`)."""
    return max(1, round(math.sqrt(rows)))


def wants_ivf(rows: int, ivf_rows: int) -> bool:
    """Whether a scope of `rows` rows gets an IVFFlat index beside its HNSW index."""
    return rows >= ivf_rows


@dataclass(frozen=True)
class ScopeRows:
    """A scope's rows in one table (its `subjects` counter) before and after a write added some."""

    subject_id: str
    table: str
    before: int
    after: int


async def add_rows(conn: asyncpg.Connection, project_id: str, table: str, added: dict[str, int]) -> list[ScopeRows]:
    """Add `added` (rows per subject) to the scopes' counters of `table`, which choose the search
    plan and the scopes to index, in the caller's transaction; each scope's count before and after."""
    column, _ = TABLES[table]
    # Sorted: two writes naming the same subjects lock their rows in one order (no deadlock).
    subjects = sorted(added)
    rows = await conn.fetch(
        f"INSERT INTO subjects (project_id, subject_id, {column})"
        " SELECT $1, s, n FROM unnest($2::text[], $3::bigint[]) AS t(s, n)"
        f" ON CONFLICT (project_id, subject_id) DO UPDATE SET {column} = subjects.{column} + excluded.{column}"
        f" RETURNING subject_id, {column} AS after",
        project_id,
        subjects,
        [added[s] for s in subjects],
    )
    return [ScopeRows(r["subject_id"], table, r["after"] - added[r["subject_id"]], r["after"]) for r in rows]


class IndexKind(StrEnum):
    """A scope's vector indexes: each kind's name carries it (`<table>_<kind>_<digest>`)."""

    HNSW = "hnsw"
    IVF = "ivf"


# Any constant distinct from the application's other advisory locks.
BUILD_LOCK_KEY = 0x4A4B_5349


@dataclass(frozen=True)
class Scope:
    project_id: str
    subject_id: str
    table: str
    rows: int


def index_name(table: str, project_id: str, subject_id: str, kind: IndexKind = IndexKind.HNSW) -> str:
    """A stable identifier for a scope's index: `<table>_<kind>_<20 hex digits of sha256>`."""
    digest = hashlib.sha256(f"{project_id}\x00{subject_id}".encode()).hexdigest()[:20]
    return f"{table}_{kind}_{digest}"


def ivf_index_name(table: str, project_id: str, subject_id: str) -> str:
    """The name of the scope's IVFFlat index."""
    return index_name(table, project_id, subject_id, IndexKind.IVF)


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
    """`memory` (e.g. '512MB') to build in: a graph that fits builds several times faster (a
    100,000-row scope needs ~200 MB). The caller lifts the statement timeout (a build outlives
    any request's: db/pool.without_statement_timeout)."""
    await conn.execute("SELECT set_config('maintenance_work_mem', $1, false)", memory)


async def reset_builder(conn: asyncpg.Connection) -> None:
    """Give a pooled connection back with the pool's own settings."""
    await conn.execute("RESET maintenance_work_mem")


async def build(conn: asyncpg.Connection, scope: Scope, ivf_rows: int = 0) -> str:
    """Build (or finish) the scope's indexes on `conn`, outside any transaction: the HNSW index,
    and the IVFFlat one if the scope holds `ivf_rows` rows or more. Returns the HNSW index's name.

    Idempotent: an index left INVALID by an interrupted build is dropped and rebuilt; a
    valid one is only marked READY. The caller sets statement_timeout and
    maintenance_work_mem on `conn` (a build of 100,000 rows takes tens of seconds).
    """
    name = index_name(scope.table, scope.project_id, scope.subject_id)
    async with conn.transaction():
        # Under the subject's erase lock (shared), and only while the subject holds rows: a scope
        # forgotten since it was listed gets no entry (db/subject_locks.py).
        await subject_locks.share(conn, scope.project_id, [scope.subject_id])
        status = await conn.execute(
            """
            INSERT INTO scope_vector_indexes (project_id, subject_id, table_name, index_name)
            SELECT $1, $2, $3, $4 WHERE EXISTS (SELECT 1 FROM subjects WHERE project_id = $1 AND subject_id = $2)
            ON CONFLICT (project_id, subject_id, table_name)
            DO UPDATE SET index_name = excluded.index_name, requested_at = now(), ready_at = NULL
            """,
            scope.project_id,
            scope.subject_id,
            scope.table,
            name,
        )
    if status.endswith(" 0"):
        return name
    kinds = [IndexKind.HNSW] + ([IndexKind.IVF] if wants_ivf(scope.rows, ivf_rows) else [])
    for kind in kinds:
        index = index_name(scope.table, scope.project_id, scope.subject_id, kind)
        valid = await _validity(conn, index)
        if valid is False:
            await _drop(conn, index)
        if not valid:
            await conn.execute(await _create_ddl(conn, kind, index, scope))
    await conn.execute(
        "UPDATE scope_vector_indexes SET ready_at = now()"
        " WHERE project_id = $1 AND subject_id = $2 AND table_name = $3",
        scope.project_id,
        scope.subject_id,
        scope.table,
    )
    return name


def _options() -> list[str]:
    """The reloptions of an HNSW index built with the current parameters, sorted."""
    return sorted([f"m={HNSW_M}", f"ef_construction={HNSW_EF_CONSTRUCTION}"])


def stale_kinds(
    rows: int, hnsw_options: list[str] | None, ivf_options: list[str] | None, ivf_rows: int
) -> list[IndexKind]:
    """Which of a READY scope's indexes to (re)build ("hnsw", "ivf"): an HNSW index built with
    other parameters than HNSW_M and HNSW_EF_CONSTRUCTION (by an earlier version); for a scope
    of `ivf_rows` rows or more, an IVFFlat index missing (the scope grew past `ivf_rows`, or an
    earlier version built none) or with under half the lists the scope's rows call for (it has
    grown 4x since). Options are reloptions; None: no index (or none set)."""
    stale = []
    if sorted(hnsw_options or []) != _options():
        stale.append(IndexKind.HNSW)
    lists = next((int(o.split("=", 1)[1]) for o in ivf_options or [] if o.startswith("lists=")), 0)
    if wants_ivf(rows, ivf_rows) and lists * 2 < ivf_lists(rows):
        stale.append(IndexKind.IVF)
    return stale


async def _ready_with_options(
    conn: asyncpg.Connection, scope: Scope | None = None
) -> list[tuple[Scope, list[str] | None, list[str] | None]]:
    """READY scopes (all, or `scope` alone), largest first, each with the reloptions of its HNSW
    and IVFFlat indexes (None: no such index, or one without options)."""
    rows = await conn.fetch(
        """
        SELECT i.project_id, i.subject_id, i.table_name,
               CASE i.table_name WHEN 'facts' THEN s.fact_rows ELSE s.chunk_rows END AS n
        FROM scope_vector_indexes i
        JOIN subjects s ON s.project_id = i.project_id AND s.subject_id = i.subject_id
        WHERE i.ready_at IS NOT NULL
          AND ($1::text IS NULL OR (i.project_id, i.subject_id, i.table_name) = ($1, $2, $3))
        ORDER BY n DESC, i.project_id, i.subject_id, i.table_name
        """,
        *((scope.project_id, scope.subject_id, scope.table) if scope else (None, None, None)),
    )
    scopes = [Scope(r["project_id"], r["subject_id"], r["table_name"], r["n"]) for r in rows]
    names = [{kind: index_name(s.table, s.project_id, s.subject_id, kind) for kind in IndexKind} for s in scopes]
    options = {
        o["relname"]: o["reloptions"]
        for o in await conn.fetch(
            "SELECT relname, reloptions FROM pg_class"
            " WHERE relname = ANY($1::text[]) AND relnamespace = current_schema()::regnamespace",
            [name for by_kind in names for name in by_kind.values()],
        )
    }
    return [
        (s, options.get(by_kind[IndexKind.HNSW]), options.get(by_kind[IndexKind.IVF]))
        for s, by_kind in zip(scopes, names)
    ]


async def outdated(conn: asyncpg.Connection, ivf_rows: int = 0, limit: int = 100) -> list[Scope]:
    """READY scopes with an index to (re)build (`stale_kinds`), largest first."""
    ready_scopes = await _ready_with_options(conn)
    return [scope for scope, hnsw, ivf in ready_scopes if stale_kinds(scope.rows, hnsw, ivf, ivf_rows)][:limit]


async def rebuild(conn: asyncpg.Connection, scope: Scope, ivf_rows: int = 0) -> list[IndexKind]:
    """Replace the scope's indexes that `stale_kinds` names by ones built with the current
    parameters; returns the kinds replaced.

    Each new index is built beside the old one (CONCURRENTLY, as `build`), then the old one is
    dropped (CONCURRENTLY) and the new one takes its name, so the scope always has indexes
    of its own to search. Idempotent: after an interruption, a valid replacement is
    finished, an invalid one dropped and built again."""
    found = await _ready_with_options(conn, scope)
    if not found:
        return []
    current, hnsw, ivf = found[0]
    kinds = stale_kinds(current.rows, hnsw, ivf, ivf_rows)
    for kind in kinds:
        await _replace(conn, kind, current)
    return kinds


async def _replace(conn: asyncpg.Connection, kind: IndexKind, scope: Scope) -> None:
    name = index_name(scope.table, scope.project_id, scope.subject_id, kind)
    next_name = f"{name}_next"
    old, new = await _validity(conn, name), await _validity(conn, next_name)
    if new is False:
        await _drop(conn, next_name)
    if not new:
        await conn.execute(await _create_ddl(conn, kind, next_name, scope))
    if old is not None:
        await _drop(conn, name)
    await conn.execute(
        await conn.fetchval("SELECT format('ALTER INDEX %I RENAME TO %I', $1::text, $2::text)", next_name, name)
    )


async def _validity(conn: asyncpg.Connection, name: str) -> bool | None:
    """Whether the index `name` is valid; None: there is none."""
    valid: bool | None = await conn.fetchval(
        "SELECT i.indisvalid FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid"
        " WHERE c.relname = $1 AND c.relnamespace = current_schema()::regnamespace",
        name,
    )
    return valid


async def _drop(conn: asyncpg.Connection, name: str) -> None:
    await conn.execute(await conn.fetchval("SELECT format('DROP INDEX CONCURRENTLY IF EXISTS %I', $1::text)", name))


async def _create_ddl(conn: asyncpg.Connection, kind: IndexKind, name: str, scope: Scope) -> str:
    """CREATE INDEX CONCURRENTLY of the scope's index of `kind` under `name`, composed by the
    server (the method and its parameters are this module's constants, never user text)."""
    _, extra = TABLES[scope.table]
    if kind is IndexKind.HNSW:
        method, params = "hnsw (embedding vector_cosine_ops)", f"m = {HNSW_M}, ef_construction = {HNSW_EF_CONSTRUCTION}"
    else:
        method, params = "ivfflat (embedding_half halfvec_ip_ops)", f"lists = {ivf_lists(scope.rows)}"
    ddl: str = await conn.fetchval(
        "SELECT format('CREATE INDEX CONCURRENTLY IF NOT EXISTS %I ON %I USING ' || $3::text || ' WITH ('"
        " || $4::text || ') WHERE project_id = %L AND subject_id = %L', $1::text, $2::text, $5::text, $6::text)"
        " || $7::text",
        name,
        scope.table,
        method,
        params,
        scope.project_id,
        scope.subject_id,
        extra,
    )
    return ddl


# The names scope indexes have: `<table>_<kind>_<20 hex digits>`, `_next` while a rebuild runs.
_SCOPE_INDEX_NAME = r"^(facts|episode_chunks)_(hnsw|ivf)_[0-9a-f]{20}(_next)?$"


async def drop_orphans(conn: asyncpg.Connection) -> int:
    """Drop the scope indexes no `scope_vector_indexes` entry owns (their subject was forgotten
    while they were built, or the forget could not drop them); returns how many.

    Run by the builder under its lock, so no build of this process's or another's is under
    way: every index an entry owns, a `_next` one included, is kept."""
    entries = await conn.fetch("SELECT project_id, subject_id, table_name FROM scope_vector_indexes")
    owned: set[str] = set()
    for e in entries:
        for kind in IndexKind:
            name = index_name(e["table_name"], e["project_id"], e["subject_id"], kind)
            owned.update((name, f"{name}_next"))
    found = await conn.fetch(
        "SELECT c.relname FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid"
        " WHERE i.indrelid IN ('facts'::regclass, 'episode_chunks'::regclass) AND c.relname ~ $1"
        " ORDER BY c.relname",
        _SCOPE_INDEX_NAME,
    )
    orphans = [r["relname"] for r in found if r["relname"] not in owned]
    for name in orphans:
        await _drop(conn, name)
    return len(orphans)


async def ready(conn: asyncpg.Connection, project_id: str) -> list[tuple[str, str, str]]:
    """(subject_id, table, index name) of the project's READY scope indexes."""
    rows = await conn.fetch(
        "SELECT subject_id, table_name, index_name FROM scope_vector_indexes"
        " WHERE project_id = $1 AND ready_at IS NOT NULL ORDER BY subject_id, table_name",
        project_id,
    )
    return [(r["subject_id"], r["table_name"], r["index_name"]) for r in rows]
