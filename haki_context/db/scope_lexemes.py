"""The common lexemes of large scopes and their document frequency (migration 0008).

Retrieval's idf rank (db/retrieval.py, `_idf`) takes a listed lexeme's df from here
instead of reading every row that holds it. A scope is listed once it has a READY
vector index of its own (it is large); its list is rebuilt, in one transaction, when
its size has moved by a tenth since the last refresh or the threshold has changed.
Between refreshes a listed df is stale by less than that tenth; a lexeme that became
common since is still read, up to the cap.
"""

from __future__ import annotations

import asyncpg

from . import subject_locks
from .scope_indexes import TABLES, Scope

# Refresh a scope's list once its size differs from the size it was built at by this share.
REFRESH_CHANGE = 0.1


async def stale(conn: asyncpg.Connection, min_df: int, limit: int = 100) -> list[Scope]:
    """Indexed scopes whose list is missing, built with another threshold, or a tenth off in size."""
    rows = await conn.fetch(
        """
        SELECT i.project_id, i.subject_id, i.table_name, t.n
        FROM scope_vector_indexes i
        JOIN subjects s ON s.project_id = i.project_id AND s.subject_id = i.subject_id
        CROSS JOIN LATERAL (SELECT CASE i.table_name WHEN 'facts' THEN s.fact_rows ELSE s.chunk_rows END AS n) t
        WHERE i.ready_at IS NOT NULL
          AND (i.lexemes_rows IS NULL OR i.lexemes_min_df IS DISTINCT FROM $1
               OR abs(t.n - i.lexemes_rows) >= $2::float8 * i.lexemes_rows)
        ORDER BY i.project_id, i.subject_id, i.table_name
        LIMIT $3
        """,
        min_df,
        REFRESH_CHANGE,
        limit,
    )
    return [Scope(r["project_id"], r["subject_id"], r["table_name"], r["n"]) for r in rows]


async def refresh(conn: asyncpg.Connection, scope: Scope, min_df: int) -> int:
    """Replace the scope's list with its lexemes held by `min_df`+ rows; returns how many.

    ts_stat reads every tsvector of the scope once, which takes long in a large scope
    (docs/performance.md); the caller lifts the statement timeout. The scope's ids reach the inner query through format(%L).
    """
    _, extra = TABLES[scope.table]
    async with conn.transaction():
        # The subject's erase lock, shared: a forget of the subject never leaves a list read before it.
        await subject_locks.share(conn, scope.project_id, [scope.subject_id])
        await conn.execute(
            "DELETE FROM scope_lexemes WHERE project_id = $1 AND subject_id = $2 AND table_name = $3",
            scope.project_id,
            scope.subject_id,
            scope.table,
        )
        status = await conn.execute(
            """
            INSERT INTO scope_lexemes (project_id, subject_id, table_name, lexeme, df)
            SELECT $1, $2, $3, word, ndoc
            FROM ts_stat(format('SELECT search_vector FROM %I WHERE project_id = %L AND subject_id = %L',
                                $3::text, $1::text, $2::text) || $5::text)
            WHERE ndoc >= $4
            """,
            scope.project_id,
            scope.subject_id,
            scope.table,
            min_df,
            extra,
        )
        await conn.execute(
            "UPDATE scope_vector_indexes SET lexemes_rows = $4, lexemes_min_df = $5, lexemes_at = now()"
            " WHERE project_id = $1 AND subject_id = $2 AND table_name = $3",
            scope.project_id,
            scope.subject_id,
            scope.table,
            scope.rows,
            min_df,
        )
    return int(status.split()[-1])
