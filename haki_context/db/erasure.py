"""SQL of forgetting a subject: every row the project holds about it, and the audit record.

The caller holds one transaction and the subject's erase lock, EXCLUSIVE (db/subject_locks.py),
so no write of the subject runs meanwhile. Traces are written without that lock (a `context`
call must not wait on it): they and their decisions go in one statement, whose one snapshot
sees a concurrent trace whole or not at all.
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import cast

import asyncpg
import orjson

from .scope_indexes import TABLES, IndexKind, index_name

# What is deleted, in order (children before their parents): a kind and its statement.
_DELETES = (
    ("episode_chunks", "DELETE FROM episode_chunks WHERE project_id = $1 AND subject_id = $2"),
    ("events", "DELETE FROM events WHERE project_id = $1 AND subject_id = $2"),
    (
        "conflict_members",
        "DELETE FROM conflict_members m USING conflict_sets c"
        " WHERE c.project_id = $1 AND c.subject_id = $2 AND m.project_id = $1 AND m.conflict_id = c.id",
    ),
    ("conflict_sets", "DELETE FROM conflict_sets WHERE project_id = $1 AND subject_id = $2"),
    ("facts", "DELETE FROM facts WHERE project_id = $1 AND subject_id = $2"),
    ("scope_lexemes", "DELETE FROM scope_lexemes WHERE project_id = $1 AND subject_id = $2"),
    ("scope_indexes", "DELETE FROM scope_vector_indexes WHERE project_id = $1 AND subject_id = $2"),
    ("subject_counters", "DELETE FROM subjects WHERE project_id = $1 AND subject_id = $2"),
)

_DELETE_TRACES = """
WITH t AS (DELETE FROM context_traces WHERE project_id = $1 AND subject_id = $2 RETURNING id),
     d AS (DELETE FROM trace_decisions d USING t WHERE d.project_id = $1 AND d.trace_id = t.id RETURNING 1)
SELECT (SELECT count(*) FROM t) AS traces, (SELECT count(*) FROM d) AS trace_decisions
"""


async def delete_subject(conn: asyncpg.Connection, project_id: str, subject_id: str) -> dict[str, int]:
    """Delete every row of (project, subject); returns how many of each kind, by table-like name
    (`traces` and `trace_decisions` from one statement)."""
    counts: dict[str, int] = {}
    for kind, statement in _DELETES:
        status = await conn.execute(statement, project_id, subject_id)
        counts[kind] = int(cast(str, status).split()[-1])
    row = await conn.fetchrow(_DELETE_TRACES, project_id, subject_id)
    counts["traces"], counts["trace_decisions"] = int(row["traces"]), int(row["trace_decisions"])
    return counts


async def insert_erasure(
    conn: asyncpg.Connection,
    project_id: str,
    *,
    subject_hash: bytes,
    counts: dict[str, int],
    key_id: str | None,
    actor: str,
    erased_at: datetime,
) -> str:
    """The audit record of one forget; returns its id."""
    erasure_id = str(uuid.uuid4())
    await conn.execute(
        "INSERT INTO erasures (project_id, id, subject_hash, counts, key_id, actor, erased_at)"
        " VALUES ($1, $2, $3, $4::jsonb, $5, $6, $7)",
        project_id,
        erasure_id,
        subject_hash,
        orjson.loads(orjson.dumps(counts)),
        key_id,
        actor,
        erased_at,
    )
    return erasure_id


def scope_index_names(project_id: str, subject_id: str) -> list[str]:
    """Every name a scope index of the subject can have (db/scope_indexes.py), the `_next` ones
    of a rebuild under way included."""
    names = [index_name(table, project_id, subject_id, kind) for table in TABLES for kind in IndexKind]
    return [n for name in names for n in (name, f"{name}_next")]


async def drop_scope_indexes(conn: asyncpg.Connection, names: list[str]) -> int:
    """Drop those of the indexes `names` that exist, CONCURRENTLY (no lock that stops other
    subjects' reads and writes), outside any transaction; returns how many were dropped.

    Without a statement timeout: a concurrent drop waits for the transactions already using
    the table (a build of the same scope, too)."""
    existing: list[str] = [
        r["relname"]
        for r in await conn.fetch(
            "SELECT relname FROM pg_class WHERE relkind = 'i' AND relname = ANY($1::text[])"
            " AND relnamespace = current_schema()::regnamespace ORDER BY relname",
            names,
        )
    ]
    if not existing:
        return 0
    for name in existing:
        ddl = await conn.fetchval("SELECT format('DROP INDEX CONCURRENTLY IF EXISTS %I', $1::text)", name)
        await conn.execute(ddl)
    return len(existing)
